#!/usr/bin/env python3
"""Reference data for the GGUF dequantiser test (tests/test_convert.c), computed by the `gguf`
Python package (llama.cpp's gguf-py: pip install gguf numpy), independent of our C code.

Writes into tests/data/dequant/:
  <TYPE>.bin          synthetic blocks of each ggml block type: random bytes with sane f16
                      scales (every bit pattern of the quants is a valid block), and
                      gguf.quants.dequantize() of them.
                      Layout (little-endian): u32 ggml_type, u32 rows, u32 cols, u32 row_bytes,
                      u8 raw[rows][row_bytes], f32 ref[rows][cols].
  smollm2_rows.bin    a few rows of real tensors of SmolLM2-135M-Instruct.Q4_1.gguf (Q8_0
                      embeddings, Q4_1 matrices) dequantised by gguf-py.
                      Layout: u64 gguf_file_bytes, u32 n; n times: char name[64], u32 ggml_type,
                      u32 row, u32 cols, f32 ref[cols].

Usage: python3 tools/gen_dequant_reference.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "dequant")

# Byte offsets of the f16 scale fields inside one block, per type (the rest is random).
SCALES = {
    T.Q4_0: (18, [0]),
    T.Q4_1: (20, [0, 2]),
    T.Q5_0: (22, [0]),
    T.Q5_1: (24, [0, 2]),
    T.Q8_0: (34, [0]),
    T.Q4_K: (144, [0, 2]),
    T.Q5_K: (176, [0, 2]),
    T.Q6_K: (210, [208]),
}
BLOCK_ELEMS = {T.Q4_K: 256, T.Q5_K: 256, T.Q6_K: 256}


def synthetic(rng, qtype, rows=3, cols=512):
    block_bytes, scale_offsets = SCALES[qtype]
    elems = BLOCK_ELEMS.get(qtype, 32)
    nblocks = rows * cols // elems
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        s = (rng.uniform(0.001, 0.1, size=nblocks) * rng.choice([-1, 1], size=nblocks)).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(nblocks, 2)
    raw = raw.reshape(rows, cols // elems * block_bytes)
    ref = dequantize(raw, qtype).astype(np.float32).reshape(rows, cols)
    path = os.path.join(OUT, qtype.name + ".bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<4I", int(qtype), rows, cols, raw.shape[1]))
        f.write(raw.tobytes())
        f.write(ref.astype("<f4").tobytes())
    print(path, raw.nbytes + ref.nbytes, "bytes")


def smollm2(path):
    r = GGUFReader(path)
    want = {
        "token_embd.weight": [0, 1000, 49151],
        "blk.0.attn_q.weight": [0, 575],
        "blk.29.ffn_down.weight": [0, 575],
        "blk.7.attn_k.weight": [191],
    }
    entries = []
    for t in r.tensors:
        if t.name not in want:
            continue
        cols = int(t.shape[0])  # ggml ne[0]: the row length
        data = np.asarray(t.data)  # [rows][row_bytes] of blocks
        for row in want[t.name]:
            ref = dequantize(data[row:row + 1], t.tensor_type).astype(np.float32).reshape(-1)
            assert ref.size == cols
            entries.append((t.name, int(t.tensor_type), row, cols, ref))
    out = os.path.join(OUT, "smollm2_rows.bin")
    with open(out, "wb") as f:
        f.write(struct.pack("<QI", os.path.getsize(path), len(entries)))
        for name, qtype, row, cols, ref in entries:
            f.write(name.encode().ljust(64, b"\0"))
            f.write(struct.pack("<3I", qtype, row, cols))
            f.write(ref.astype("<f4").tobytes())
    print(out, len(entries), "rows")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261121)
    for qtype in SCALES:
        synthetic(rng, qtype)
    gguf_path = sys.argv[1] if len(sys.argv) > 1 else "weights/download/SmolLM2-135M-Instruct.Q4_1.gguf"
    if os.path.exists(gguf_path):
        smollm2(gguf_path)
    else:
        print("no", gguf_path, "- smollm2_rows.bin not written")


if __name__ == "__main__":
    main()
