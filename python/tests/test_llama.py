"""entropix.Llama, llama-cpp-python's class: its constructor's keywords, llm(prompt) as
create_completion (./run's greedy text), tokenize/detokenize in bytes against the Tokenizer's
ids and text, n_ctx, the chat call on a chat model, and the keywords it refuses."""
import subprocess

import pytest

from conftest import RUN, model_path


def test_call_is_a_completion_with_runs_text():
    from entropix import Llama
    llm = Llama(model_path=model_path("stories260K.f32.bin"), n_ctx=256, n_threads=1, verbose=False, n_batch=64)
    assert llm.n_ctx() == 256
    out = llm("Once upon a time", max_tokens=30, temperature=0)
    run = subprocess.run([RUN, model_path("stories260K.f32.bin"), "--raw", "-t", "1", "-c", "256", "-p",
                          "Once upon a time", "-n", "30", "--sampler", "greedy"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Once upon a time" + out["choices"][0]["text"] + "\n" == run.stdout
    assert out["usage"]["completion_tokens"] == 30 and out["object"] == "text_completion"


def test_tokenize_detokenize_in_bytes():
    from entropix import Llama
    llm = Llama(model_path("stories260K.f32.bin"), n_threads=1)
    ids = llm.tokenize(b"Once upon a time")
    assert ids == llm.tokenizer.encode("Once upon a time", bos=True, special=False)
    assert ids[0] == llm.token_bos() and llm.token_eos() == llm.tokenizer.eos
    assert llm.tokenize(b"Once upon a time", add_bos=False) == ids[1:]
    assert llm.detokenize(ids) == b"Once upon a time"


def test_chat_completion_and_seed_default():
    from entropix import Llama
    llm = Llama(model_path("qwen3-tiny.f32.bin"), n_ctx=0, n_threads=1, seed=7)
    msgs = [{"role": "user", "content": "Hi"}]
    a = llm.create_chat_completion(msgs, max_tokens=6)
    b = llm.create_chat_completion(msgs, max_tokens=6, seed=7)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert llm.n_ctx() == min(llm.max_seq_len, 4096)


def test_refused_keywords():
    from entropix import Llama
    with pytest.raises(TypeError, match="n_gqa is not supported"):
        Llama(model_path("stories260K.f32.bin"), n_gqa=8)
    with pytest.raises(ValueError, match="chat_format 'chatml'"):
        Llama(model_path("stories260K.f32.bin"), chat_format="chatml")
    with pytest.raises(ValueError, match="n_ctx 100000 exceeds the model's 512 positions"):
        Llama(model_path("stories260K.f32.bin"), n_ctx=100000)
