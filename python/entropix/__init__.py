"""entropix — entropix.c from Python: models, forward steps with logits and attention scores as
numpy views, the entropix metrics, samplers (built-in or a Python function) and generation.

    import entropix
    model = entropix.Model("build/models/stories260K.f32.bin")
    for tok in model.generate("Once upon a time", sampler="combined", seed=42, max_tokens=50):
        print(tok.text, end="")

docs/python.md has the whole of it.
"""
from entropix._base import (ATTN_LAYER_LAST, ATTN_LAYERS_ALL, EntropixArgumentError, EntropixError,
                            EntropixMemoryError, Metrics, cuda_backend, logits_metrics, version)
from entropix.core import Decoder, Model, State, StepOutput, Tokenizer
from entropix.generate import FunctionSampler, Generation, Sampler, TokenRecord, generate
from entropix.llama import Llama

__version__ = "0.1.0"
__all__ = ["ATTN_LAYER_LAST", "ATTN_LAYERS_ALL", "Decoder", "EntropixArgumentError", "EntropixError",
           "EntropixMemoryError", "FunctionSampler", "Generation", "Llama", "Metrics",
           "Model", "Sampler", "State", "StepOutput", "TokenRecord", "Tokenizer", "cuda_backend", "generate", "logits_metrics",
           "version"]
