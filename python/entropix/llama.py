"""llama.py — Llama, llama-cpp-python's class of that name over Model, so that a script written
against llama-cpp-python runs here with its import changed:

    from entropix import Llama
    llm = Llama(model_path="weights/smollm2-135m-instruct.q8.bin", n_ctx=2048, verbose=False)
    out = llm("Q: Name the planets. A:", max_tokens=32, stop=["Q:"])
    print(out["choices"][0]["text"])

The keywords it shares with llama-cpp-python mean what they mean there; the ones that tune
llama.cpp's own machinery (batch sizes, memory locking) are accepted and have nothing to tune
here; any other is a TypeError naming it.
"""
from entropix.core import Model

# llama-cpp-python keywords with nothing to set here: the runtime sizes its batches itself, keeps
# every position's logits only when asked, and renders chats with the template the model file names.
_ACCEPTED = {"n_batch", "n_ubatch", "use_mlock", "verbose", "logits_all", "last_n_tokens_size", "offload_kqv",
             "flash_attn", "numa", "main_gpu", "tensor_split", "vocab_only", "n_threads_batch"}


class Llama(Model):
    """Model with llama-cpp-python's constructor and calls: llm(prompt, ...) is create_completion,
    tokenize() and detokenize() take and give bytes, n_ctx(), token_bos(), token_eos().

    n_ctx: the context of the completion calls (0: the model's, up to 4,096; default 512 as
    llama-cpp-python's); n_threads: CPU threads (None: all cores); n_gpu_layers: 0 runs on the
    CPU, any other value on GPU 0 when this build has the CUDA backend and sees one (the whole
    model: layers are not split between devices); seed: the seed of calls that give none (None:
    each call draws one); use_mmap: map the file instead of copying it; chat_format: None (the
    model file's template) only."""

    def __init__(self, model_path, n_ctx=512, n_threads=None, n_gpu_layers=0, seed=None, use_mmap=False,
                 chat_format=None, **kwargs):
        unknown = sorted(set(kwargs) - _ACCEPTED)
        if unknown:
            raise TypeError(f"Llama: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not supported")
        if chat_format is not None:
            raise ValueError(f"Llama: chat_format {chat_format!r}: the chat template is the model file's (None)")
        super().__init__(model_path, device="auto" if n_gpu_layers else "cpu", threads=n_threads or 0,
                         mmap=use_mmap)
        if n_ctx > self.max_seq_len:
            self.close()
            raise ValueError(f"Llama: n_ctx {n_ctx} exceeds the model's {self.max_seq_len} positions")
        self._completion_ctx, self._seed = n_ctx, seed

    def __call__(self, prompt, **kwargs):
        return self.create_completion(prompt, **kwargs)

    def create_completion(self, prompt, **kwargs):
        if kwargs.get("seed") is None and self._seed is not None:
            kwargs["seed"] = self._seed
        return super().create_completion(prompt, **kwargs)

    def create_chat_completion(self, messages, **kwargs):
        if kwargs.get("seed") is None and self._seed is not None:
            kwargs["seed"] = self._seed
        return super().create_chat_completion(messages, **kwargs)

    def tokenize(self, text, add_bos=True, special=False):
        """Token ids of text (bytes, as llama-cpp-python takes; a str is encoded as UTF-8)."""
        return self.tokenizer.encode(text, bos=add_bos, special=special)

    def detokenize(self, tokens, special=False):
        """The bytes of tokens; control tokens' text only with special=True."""
        return self.tokenizer.decode(tokens, skip_control=not special).encode("utf-8")

    def n_ctx(self):
        return self._completion_ctx if self._completion_ctx > 0 else min(self.max_seq_len, 4096)

    def token_bos(self):
        return self.tokenizer.bos

    def token_eos(self):
        return self.tokenizer.eos
