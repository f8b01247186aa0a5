"""core.py — models, tokenizers and states over the C API (include/entropix.h).

Arrays the runtime returns are numpy views of its memory, not copies: a State's logits and
attention scores hold its latest forward's values until its next forward or generate rewrites them
(copy them to keep them). Each view holds that memory: the C state (and its model after it) is
freed when the State is closed or collected and no view of it is left.
"""
import ctypes
import os
import threading
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from dataclasses import dataclass

import numpy as np

from entropix._base import (ATTN_LAYER_LAST, EntropixError, Metrics, _c_int, _Handle, _ids_array, _messages, _take_ids,
                            _text_bytes, _view, check)
from entropix._lib import (Attention, ChatParams, Metrics as _CMetrics, ModelInfo, ModelParams, StateParams, Step,
                           c_int_p, lib)
from entropix.completions import create_chat_completion, create_completion
from entropix.generate import generate


class Decoder:
    """The streaming detokeniser: push(id) returns the complete UTF-8 text it releases (valid while
    its model is open: then EntropixError "the model is closed")."""

    def __init__(self, tokenizer, skip_control=True):
        self._h = c_void_p()
        self._tk = tokenizer
        check(lib.entropix_decoder_new(tokenizer._handle(), int(skip_control), byref(self._h)))
        self._buf = ctypes.create_string_buffer(lib.entropix_decoder_max_out(self._h))

    def push(self, token_id):
        self._tk._handle()  # the decoder reads the model's tokenizer
        n = c_size_t()
        check(lib.entropix_decoder_push(self._h, _c_int(token_id, "token id"), self._buf, len(self._buf), byref(n)))
        return self._buf.raw[:n.value].decode("utf-8")

    def flush(self):
        self._tk._handle()
        n = c_size_t()
        check(lib.entropix_decoder_flush(self._h, self._buf, len(self._buf), byref(n)))
        return self._buf.raw[:n.value].decode("utf-8")

    def __del__(self):
        if getattr(self, "_h", None):
            lib.entropix_decoder_free(self._h)  # its own memory only: safe after the model is closed
            self._h = None


class Tokenizer:
    """The model's tokenizer (valid while its Model is open: then EntropixError "the model is closed")."""

    def __init__(self, model):
        self._model = model  # keeps the model open
        self._h = lib.entropix_model_tokenizer(model._h)

    def _handle(self):
        """The C tokenizer, which is the model's: refused once the model is closed."""
        self._model._handle()
        return self._h

    def encode(self, text, bos=True, special=True):
        """Token ids of text: a str (encoded as UTF-8) or bytes, as llama-cpp-python's tokenize takes."""
        data = _text_bytes(text, "text")
        flags = (1 if bos else 0) | (2 if special else 0)
        n = c_size_t()
        cap = 3 * len(data) + 2
        buf = (c_int * cap)()
        check(lib.entropix_tokenize(self._handle(), data, len(data), flags, buf, cap, byref(n)))
        return list(buf[:n.value])

    def decode(self, ids, skip_control=True):
        d = Decoder(self, skip_control)
        return "".join(d.push(i) for i in ids) + d.flush()

    def piece(self, token_id):
        token_id, n = _c_int(token_id, "token id"), c_size_t()
        check(lib.entropix_token_piece(self._handle(), token_id, None, 0, byref(n)))
        buf = ctypes.create_string_buffer(max(n.value, 1))
        check(lib.entropix_token_piece(self._h, token_id, buf, n.value, byref(n)))
        return buf.raw[:n.value]

    def decoder(self, skip_control=True):
        return Decoder(self, skip_control)

    @property
    def vocab_size(self):
        return lib.entropix_tokenizer_vocab_size(self._handle())

    @property
    def bos(self):
        return lib.entropix_token_bos(self._handle())

    @property
    def eos(self):
        return lib.entropix_token_eos(self._handle())

    @property
    def stop_ids(self):
        buf = (c_int * 64)()
        n = lib.entropix_token_stops(self._handle(), buf, 64)
        return list(buf[:min(n, 64)])

    def is_stop(self, token_id):
        return bool(lib.entropix_token_is_stop(self._handle(), _c_int(token_id, "token id")))

    def find(self, text):
        """The id of an exact token text ("<|im_end|>", "Ġthe"), or -1."""
        data = _text_bytes(text, "text")
        if b"\0" in data:
            raise ValueError("text holds a NUL character, which would end it in C")
        return lib.entropix_token_find(self._handle(), data)


class Model:
    """A model file opened for use: a .bin from the converter, or a GGUF, converted once into the
    folder gguf_cache (None: $EMX_CACHE, else $XDG_CACHE_HOME/entropix, else ~/.cache/entropix) and
    reused while it is unchanged.
    device: "cpu", "cuda:N" or "auto"; threads <= 0: all cores."""

    def __init__(self, path, device="cpu", threads=0, mmap=False, gguf_cache=None):
        self._h = self._owner = None
        self.path = os.fspath(path) if isinstance(path, (str, bytes, os.PathLike)) else path
        self._device = device.encode() if device else None
        cache = os.fsencode(gguf_cache) if gguf_cache is not None else None
        p = ModelParams(size=ctypes.sizeof(ModelParams), device=self._device, threads=_c_int(threads, "threads"),
                        mmap=int(mmap), gguf_cache=cache)
        h = c_void_p()
        check(lib.entropix_model_open(os.fsencode(path), byref(p), byref(h)))  # TypeError for None
        self._owner = _Handle(h, lib.entropix_model_close)  # held by its states' handles too
        self._h = h
        info = ModelInfo(size=ctypes.sizeof(ModelInfo))
        check(lib.entropix_model_get_info(self._h, byref(info)))
        self.vocab_size, self.dim, self.n_layers = info.vocab_size, info.dim, info.n_layers
        self.n_heads, self.n_kv_heads, self.head_dim = info.n_heads, info.n_kv_heads, info.head_dim
        self.max_seq_len = info.max_seq_len
        self.chat_template = info.chat_template.decode() if info.chat_template else None
        self.tokenizer = Tokenizer(self)
        self._states = weakref.WeakSet()  # closed first by close()
        self._pools = weakref.WeakSet()  # the agent pools running on it: stopped before all else
        self._kept, self._kept_lock = None, threading.Lock()  # the completions' state (_completion_state)
        self._completion_ctx = 0  # its context (0: the model's, up to 4,096)

    def _handle(self):
        if not self._h:
            raise EntropixError(-1, "the model is closed")
        return self._h

    def close(self):
        """Closes the model now (else when it is collected): its agent pools stopped and its states
        closed (their generations ended) before it. Its memory is freed then, or once the last
        numpy view of a state's memory is gone."""
        for pool in list(getattr(self, "_pools", ())):
            pool.stop()
        for s in list(getattr(self, "_states", ())):
            s.close()
        self._h = self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def state(self, ctx=0, cache_type="auto", device=None):
        return State(self, ctx=ctx, cache_type=cache_type, device=device)

    def _completion_state(self):
        """(state, done, reuse) for one completion: the model's kept state, whose cache the next
        call reuses where its prompt begins the same (reuse True), or a new state while another
        call (a stream not read to its end, another thread) holds the kept one. done() ends the use."""
        if self._kept_lock.acquire(blocking=False):
            if self._kept is None or not self._kept._h:
                self._kept = self.state(ctx=self._completion_ctx)
            return self._kept, self._kept_lock.release, True
        s = self.state(ctx=self._completion_ctx)
        return s, s.close, False

    def chat_render(self, messages, add_generation_prompt=True, enable_thinking=True):
        """The messages ([{"role", "content"}, ...]) through the model's chat template."""
        p = ChatParams(size=ctypes.sizeof(ChatParams), add_generation_prompt=int(add_generation_prompt),
                       enable_thinking=int(enable_thinking))
        out, (arr, n) = c_void_p(), _messages(messages)
        check(lib.entropix_chat_render(self._handle(), arr, n, byref(p), byref(out)))
        try:
            return ctypes.string_at(out).decode("utf-8")
        finally:
            lib.entropix_free(out)

    def prompt_ids(self, prompt=None, messages=None, chat=False, system=None, enable_thinking=True):
        """The ids ./run gives a prompt (raw, or chat=True as one user message), or messages."""
        ids, n = c_int_p(), c_int()
        if messages is not None:
            p = ChatParams(size=ctypes.sizeof(ChatParams), add_generation_prompt=1, enable_thinking=int(enable_thinking))
            arr, n_msgs = _messages(messages)
            check(lib.entropix_chat_tokens(self._handle(), arr, n_msgs, byref(p), byref(ids), byref(n)))
        else:
            data = (prompt or "").encode("utf-8")
            check(lib.entropix_prompt_tokens(self._handle(), data, len(data), int(chat),
                                             system.encode() if system else None, byref(ids), byref(n)))
        return _take_ids(ids, n.value)

    def generate(self, prompt=None, messages=None, ctx=0, **kwargs):
        """A fresh state's State.generate (the state lives as long as the iterator)."""
        return self.state(ctx=ctx).generate(prompt, messages=messages, **kwargs)

    def create_completion(self, prompt, **kwargs):
        """OpenAI's /v1/completions answer for prompt, as llama-cpp-python's Llama.create_completion
        (entropix/completions.py has the keywords)."""
        return create_completion(self, prompt, **kwargs)

    def create_chat_completion(self, messages, **kwargs):
        """OpenAI's /v1/chat/completions answer for messages, as llama-cpp-python's
        Llama.create_chat_completion (entropix/completions.py has the keywords)."""
        return create_chat_completion(self, messages, **kwargs)


@dataclass
class StepOutput:
    """One forward step: logits [vocab] (a view of the state's memory) and the attention scores
    [heads, keys] of each requested layer (views too). The state's next forward or generate
    rewrites them; each keeps the state's memory alive, closed or not, until it is gone itself."""
    logits: np.ndarray
    pos: int
    attention: dict


class State:
    """One sequence of a model: its KV cache. forward() returns views of its memory, which the next
    forward or generate rewrites."""

    def __init__(self, model, ctx=0, cache_type="auto", device=None):
        self.model = model  # keeps the model open
        self._h = self._owner = None
        self._generation = None  # a weak reference to the step-wise generation running on it
        self._keep = (cache_type.encode() if cache_type else None, device.encode() if device else None)
        p = StateParams(size=ctypes.sizeof(StateParams), ctx=_c_int(ctx, "ctx"), cache_type=self._keep[0],
                        device=self._keep[1])
        h = c_void_p()
        check(lib.entropix_state_new(model._handle(), byref(p), byref(h)))
        self._owner = _Handle(h, lib.entropix_state_free, parent=model._owner)  # and by its views
        self._h = h
        self.ctx = lib.entropix_state_ctx(self._h)
        self.device = lib.entropix_state_device(self._h).decode()
        model._states.add(self)

    def close(self):
        """Closes the state now (else when it is collected), ending a generation on it first. Its
        memory is freed then, or once the last numpy view of it is gone (which reads the values
        of the last forward until then)."""
        gen = self._generation() if getattr(self, "_generation", None) else None
        if gen is not None:
            gen.close()
        self._h = self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _handle(self):
        if not self._h:
            raise EntropixError(-1, "the state is closed (or its model was)")
        return self._h

    def forward(self, ids, pos=0, attention=()):
        """Runs ids at positions pos.. as one batch; returns the last position's logits and the
        attention scores of the layers in `attention` (a list of indices)."""
        arr, n = _ids_array(ids)
        st = Step(size=ctypes.sizeof(Step))
        check(lib.entropix_forward(self._handle(), arr, n, _c_int(pos, "pos"), byref(st)))
        logits = _view(st.logits, (st.n_vocab,), self._owner)
        return StepOutput(logits=logits, pos=st.pos, attention={l: self.attention(l) for l in attention})

    def attention(self, layer):
        """Layer `layer`'s scores of the last position fed: [heads, keys], a strided view."""
        a = Attention(size=ctypes.sizeof(Attention))
        check(lib.entropix_attention_scores(self._handle(), _c_int(layer, "layer"), byref(a)))
        f32 = ctypes.sizeof(ctypes.c_float)
        return _view(a.scores, (a.n_heads, a.n_keys), self._owner, strides=(a.row_stride * f32, f32))

    def metrics(self, attn_layer=ATTN_LAYER_LAST):
        """The entropix metrics of the latest forward (attention of the last layer by default)."""
        m = _CMetrics(size=ctypes.sizeof(_CMetrics))
        check(lib.entropix_state_metrics(self._handle(), _c_int(attn_layer, "attn_layer"), byref(m)))
        return Metrics.from_c(m)

    def generate(self, prompt=None, messages=None, **kwargs):
        return generate(self, prompt, messages=messages, **kwargs)
