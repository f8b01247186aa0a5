#!/usr/bin/env python3
"""make_gguf_quant_ref.py — the reference data of tests/test_gguf_quants.c: a small GGUF file of
block-quantised tensors with random blocks, and each tensor's values as the `gguf` Python
package (llama.cpp's gguf-py) decodes them, gguf.quants.dequantize.

    python3 tools/make_gguf_quant_ref.py -o tests/data/gguf_quants     # needs gguf and numpy

Writes OUT/quants.gguf (tensors "<type>" of shape [4, 512]: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
Q5_K, Q6_K) and OUT/<type>.f32 (the 2048 decoded values, float32 little-endian, row-major). Every
block's bytes are random (seeded), its f16 scales random finite halves of moderate size, so every
nibble, 6-bit scale and sign pattern occurs; the C test converts each tensor as ./run keeps it
(exact copies and the q4_k32 repack) and compares its decoded values with these bit for bit.
"""
import argparse
import os

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

ROWS, COLS = 4, 512
TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
# Where each block keeps its f16 scales (byte offsets): set to random finite halves.
HALVES = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def random_blocks(rng, name):
    qt = T[name]
    block_elems, block_bytes = GGML_QUANT_SIZES[qt]
    n_blocks = ROWS * COLS // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in HALVES[name]:
        # |h| in [2^-10, 2^-2): the weights' sizes, never inf or NaN
        h = rng.uniform(2.0 ** -10, 2.0 ** -2, n_blocks).astype(np.float16)
        h *= np.where(rng.integers(0, 2, n_blocks) == 1, -1, 1).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(ROWS, COLS // block_elems * block_bytes), qt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--seed", type=int, default=20261129)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    w = GGUFWriter(os.path.join(a.out, "quants.gguf"), "llama")
    for name in TYPES:
        raw, qt = random_blocks(rng, name)
        w.add_tensor(name, raw, raw_dtype=qt)  # shape from the bytes: [ROWS, COLS]
        ref = quants.dequantize(raw, qt).astype("<f4")
        assert ref.shape == (ROWS, COLS) and np.isfinite(ref).all(), name
        ref.tofile(os.path.join(a.out, name + ".f32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
