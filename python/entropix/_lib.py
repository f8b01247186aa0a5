"""_lib.py — the ctypes declarations of include/entropix.h and where libentropix.so.0 is found.

ctypes, not cffi or a C extension: importing the package needs no compiler and no build step
beyond the shared library itself, which make builds; the arrays the runtime returns become numpy
views of its memory through numpy's __array_interface__ on the returned pointer (core._view,
docs/python.md).
"""
import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int, c_size_t, c_uint64,
                    c_void_p)

c_int_p = POINTER(c_int)
c_float_p = POINTER(c_float)


class ModelParams(Structure):
    _fields_ = [("size", c_size_t), ("device", c_char_p), ("threads", c_int), ("mmap", c_int), ("gguf_cache", c_char_p)]


class ModelInfo(Structure):
    _fields_ = [("size", c_size_t), ("vocab_size", c_int), ("dim", c_int), ("hidden_dim", c_int), ("n_layers", c_int),
                ("n_heads", c_int), ("n_kv_heads", c_int), ("head_dim", c_int), ("max_seq_len", c_int),
                ("chat_template", c_char_p)]


class Message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class ChatParams(Structure):
    _fields_ = [("size", c_size_t), ("add_generation_prompt", c_int), ("enable_thinking", c_int)]


class StateParams(Structure):
    _fields_ = [("size", c_size_t), ("ctx", c_int), ("cache_type", c_char_p), ("device", c_char_p), ("threads", c_int)]


class Step(Structure):
    _fields_ = [("size", c_size_t), ("logits", c_float_p), ("n_vocab", c_int), ("pos", c_int)]


class Attention(Structure):
    _fields_ = [("size", c_size_t), ("scores", c_float_p), ("n_heads", c_int), ("n_keys", c_int), ("row_stride", c_int)]


class Metrics(Structure):
    _fields_ = [("size", c_size_t), ("logits_entropy", c_double), ("logits_varentropy", c_double),
                ("attn_entropy", c_double), ("attn_varentropy", c_double), ("attn_agreement", c_double),
                ("attn_interaction_strength", c_double)]


class SamplerParams(Structure):
    _fields_ = [("size", c_size_t), ("kind", c_int), ("temperature", c_float), ("top_k", c_int), ("top_p", c_float),
                ("min_p", c_float), ("seed", c_uint64), ("profile", c_char_p), ("grammar", c_char_p),
                ("json_schema", c_char_p), ("repeat_penalty", c_float), ("repeat_last_n", c_int),
                ("presence_penalty", c_float), ("frequency_penalty", c_float), ("logit_bias_ids", c_int_p),
                ("logit_bias", c_float_p), ("n_logit_bias", c_int)]


class Token(Structure):
    _fields_ = [("size", c_size_t), ("index", c_int), ("id", c_int), ("pos", c_int), ("text", c_void_p),
                ("text_len", c_size_t), ("is_stop", c_int), ("logprob", c_double), ("n_top", c_int),
                ("top_ids", c_int_p), ("top_logprobs", c_float_p), ("metrics", POINTER(Metrics)),
                ("entropix_case", c_int), ("case_name", c_char_p)]


TOKEN_FN = CFUNCTYPE(c_int, c_void_p, POINTER(Token))
CHOOSE_FN = CFUNCTYPE(c_int, c_void_p, c_float_p, c_int, POINTER(Metrics), c_int)


class GenerateParams(Structure):
    _fields_ = [("size", c_size_t), ("max_tokens", c_int), ("n_top", c_int), ("metrics", c_int), ("ignore_stop", c_int),
                ("print_control", c_int), ("on_token", TOKEN_FN), ("user", c_void_p), ("reuse_prefix", c_int)]


class AgentsParams(Structure):
    _fields_ = [("size", c_size_t), ("n_agents", c_int), ("lookahead", c_int), ("workers", c_int), ("threads", c_int),
                ("ctx", c_int), ("seed", c_uint64)]


class GenerateResult(Structure):
    _fields_ = [("size", c_size_t), ("n_prompt", c_int), ("n_generated", c_int), ("stop", c_int),
                ("prefill_s", c_double), ("decode_s", c_double), ("n_cached", c_int)]


# name: (restype, argtypes)
_SIGNATURES = {
    "entropix_version": (c_char_p, []),
    "entropix_cuda_backend": (c_char_p, []),
    "entropix_error_last": (c_char_p, []),
    "entropix_free": (None, [c_void_p]),
    "entropix_model_open": (c_int, [c_char_p, POINTER(ModelParams), POINTER(c_void_p)]),
    "entropix_model_close": (None, [c_void_p]),
    "entropix_model_get_info": (c_int, [c_void_p, POINTER(ModelInfo)]),
    "entropix_model_tokenizer": (c_void_p, [c_void_p]),
    "entropix_tokenize": (c_int, [c_void_p, c_char_p, c_size_t, c_int, c_int_p, c_size_t, POINTER(c_size_t)]),
    "entropix_token_piece": (c_int, [c_void_p, c_int, c_char_p, c_size_t, POINTER(c_size_t)]),
    "entropix_tokenizer_vocab_size": (c_int, [c_void_p]),
    "entropix_token_bos": (c_int, [c_void_p]),
    "entropix_token_eos": (c_int, [c_void_p]),
    "entropix_token_stops": (c_int, [c_void_p, c_int_p, c_int]),
    "entropix_token_is_stop": (c_int, [c_void_p, c_int]),
    "entropix_token_find": (c_int, [c_void_p, c_char_p]),
    "entropix_decoder_new": (c_int, [c_void_p, c_int, POINTER(c_void_p)]),
    "entropix_decoder_free": (None, [c_void_p]),
    "entropix_decoder_max_out": (c_size_t, [c_void_p]),
    "entropix_decoder_push": (c_int, [c_void_p, c_int, c_char_p, c_size_t, POINTER(c_size_t)]),
    "entropix_decoder_flush": (c_int, [c_void_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "entropix_chat_render": (c_int, [c_void_p, POINTER(Message), c_int, POINTER(ChatParams), POINTER(c_void_p)]),
    "entropix_chat_tokens": (c_int, [c_void_p, POINTER(Message), c_int, POINTER(ChatParams), POINTER(c_int_p),
                                     c_int_p]),
    "entropix_prompt_tokens": (c_int, [c_void_p, c_char_p, c_size_t, c_int, c_char_p, POINTER(c_int_p), c_int_p]),
    "entropix_state_new": (c_int, [c_void_p, POINTER(StateParams), POINTER(c_void_p)]),
    "entropix_state_free": (None, [c_void_p]),
    "entropix_state_ctx": (c_int, [c_void_p]),
    "entropix_state_device": (c_char_p, [c_void_p]),
    "entropix_forward": (c_int, [c_void_p, c_int_p, c_int, c_int, POINTER(Step)]),
    "entropix_attention_scores": (c_int, [c_void_p, c_int, POINTER(Attention)]),
    "entropix_state_metrics": (c_int, [c_void_p, c_int, POINTER(Metrics)]),
    "entropix_logits_metrics": (c_int, [c_float_p, c_int, POINTER(Metrics)]),
    "entropix_sampler_new": (c_int, [POINTER(SamplerParams), POINTER(c_void_p)]),
    "entropix_sampler_new_custom": (c_int, [CHOOSE_FN, c_void_p, POINTER(c_void_p)]),
    "entropix_sampler_free": (None, [c_void_p]),
    "entropix_generate": (c_int, [c_void_p, c_void_p, c_int_p, c_int, POINTER(GenerateParams),
                                  POINTER(GenerateResult)]),
    "entropix_generation_begin": (c_int, [c_void_p, c_void_p, c_int_p, c_int, POINTER(GenerateParams),
                                          POINTER(c_void_p)]),
    "entropix_generation_next": (c_int, [c_void_p, POINTER(POINTER(Token))]),
    "entropix_generation_result": (c_int, [c_void_p, POINTER(GenerateResult)]),
    "entropix_generation_end": (None, [c_void_p]),
    "entropix_generate_agents": (c_int, [c_void_p, POINTER(AgentsParams), c_int_p, c_int, POINTER(GenerateParams),
                                         POINTER(GenerateResult)]),
}


def _candidates():
    env = os.environ.get("ENTROPIX_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libentropix.so.0")                       # shipped by pip install ./python
    root = os.path.dirname(os.path.dirname(here))                      # a checkout: python/entropix/..
    yield os.path.join(root, os.environ.get("ENTROPIX_BUILD", "build"), "lib", "libentropix.so.0")
    yield "libentropix.so.0"                                           # installed by make install


def load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib
    raise ImportError("entropix: libentropix.so.0 not found (" + "; ".join(errors) +
                      "); pip install ./python builds it, or set ENTROPIX_LIBRARY")


lib = load()
