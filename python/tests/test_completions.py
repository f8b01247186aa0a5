"""OpenAI-shaped completions (entropix/completions.py) and the samplers' logit rules: the text
against ./run's for the same flags, stop strings against the uncut text, a stream against the
whole answer, a JSON schema's answer parsed by Python's json."""
import json
import subprocess

import pytest

from conftest import RUN, model_path


def run_text(*flags):
    out = subprocess.run([RUN, model_path("stories260K.f32.bin"), "--raw", "-t", "1", "-c", "256", *flags],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_logit_rules_give_runs_text(stories):
    grammar = 'root ::= " Tom" [a-z ]{1,24} "."'
    got = "".join(t.text for t in stories.generate("Once upon a time", ctx=256, sampler="greedy", max_tokens=60,
                                                   grammar=grammar))
    assert "Once upon a time" + got + "\n" == run_text("-p", "Once upon a time", "-n", "60", "--sampler", "greedy",
                                                       "--grammar", grammar)
    got = "".join(t.text for t in stories.generate("The dog", ctx=256, sampler="combined", seed=4, temperature=0.9,
                                                   max_tokens=40, repeat_penalty=1.3, presence_penalty=0.5,
                                                   logit_bias={13: float("-inf"), 29: 2.5}))
    assert "The dog" + got + "\n" == run_text("-p", "The dog", "-n", "40", "--sampler", "combined", "-s", "4",
                                              "--temp", "0.9", "--repeat-penalty", "1.3", "--presence-penalty", "0.5",
                                              "-l", "13-inf", "-l", "29+2.5")
    with pytest.raises(ValueError, match="grammar: 1:10"):
        stories.generate("x", grammar="root ::= (")
    with pytest.raises(ValueError, match="logit_bias\\[0\\] 101"):
        stories.generate("x", logit_bias={5: 101})


def test_completion_is_greedy_text_cut_at_the_stop(stories):
    whole = stories.create_completion("Once upon a time", max_tokens=40, temperature=0, logprobs=2)
    text = whole["choices"][0]["text"]
    assert whole["object"] == "text_completion" and whole["choices"][0]["finish_reason"] == "length"
    usage = dict(whole["usage"])
    assert usage.pop("prompt_tokens_details")["cached_tokens"] in range(0, 5)  # what an earlier call left
    assert usage == {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45}
    lp = whole["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == text and len(lp["token_logprobs"]) == 40
    assert lp["text_offset"][0] == len("Once upon a time") and all(len(t) <= 2 for t in lp["top_logprobs"])
    assert text == run_text("-p", "Once upon a time", "-n", "40", "--sampler", "greedy")[len("Once upon a time"):-1]
    for stop in (["."], ["named", "Lily"], "little girl"):
        first = min(i for i in (text.find(s) for s in ([stop] if isinstance(stop, str) else stop)) if i >= 0)
        cut = stories.create_completion("Once upon a time", max_tokens=40, temperature=0, stop=stop, logprobs=0)
        assert cut["choices"][0]["text"] == text[:first] and cut["choices"][0]["finish_reason"] == "stop"
        # the tokens whose text starts before the cut keep their logprobs
        kept = cut["choices"][0]["logprobs"]["tokens"]
        assert "".join(kept).startswith(text[:first]) and len("".join(kept[:-1])) < max(first, 1)


def test_stream_joins_to_the_whole_answer(stories):
    kw = dict(max_tokens=30, seed=11, temperature=1.0, stop=[" the"])
    whole = stories.create_completion("The cat", **kw)
    chunks = list(stories.create_completion("The cat", stream=True, **kw))
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert all(" the" not in c["choices"][0]["text"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    same = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert all(chunks[-1]["usage"][k] == whole["usage"][k] for k in same)
    assert all(c["id"] == chunks[0]["id"] for c in chunks)


def test_chat_turn_reuses_the_cache_and_answers_as_a_fresh_state(qwen3):
    """A chat's second turn runs only what the kept state's cache lacks (usage's cached_tokens) and
    answers as a fresh state does the whole conversation; a stream left unread gives the kept
    state back when it is dropped, and a call meanwhile runs on a state of its own."""
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]
    first = qwen3.create_chat_completion(msgs, max_tokens=8, temperature=0)
    msgs += [first["choices"][0]["message"], {"role": "user", "content": "And then?"}]
    second = qwen3.create_chat_completion(msgs, max_tokens=8, temperature=0)
    n_first = first["usage"]["prompt_tokens"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_first
    fresh = "".join(t.text for t in qwen3.generate(messages=msgs, sampler="greedy", max_tokens=8))
    assert second["choices"][0]["message"]["content"] == fresh
    unread = qwen3.create_chat_completion(msgs, max_tokens=8, temperature=0, stream=True)
    meanwhile = qwen3.create_chat_completion(msgs, max_tokens=8, temperature=0)  # the kept state is held
    assert meanwhile["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert meanwhile["choices"][0]["message"]["content"] == fresh
    del unread
    again = qwen3.create_chat_completion(msgs, max_tokens=8, temperature=0)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, "the dropped stream kept the state"


def test_stop_cutter_holds_back_what_may_become_a_stop():
    from entropix.completions import _StopCutter
    c = _StopCutter(["abc", "xy"])
    assert [c.push(p) for p in ("1a", "b", "2ab", "x", "c")] == ["1", "", "ab2", "ab", "xc"]
    assert c.flush() == ""
    c = _StopCutter(["abc"])
    assert [c.push(p) for p in ("za", "bcq", "more")] == ["z", "", ""] and c.stopped and c.flush() == ""
    c = _StopCutter(None)
    assert c.push("abc") == "abc" and c.flush() == ""
    with pytest.raises(TypeError):
        _StopCutter([3])


def test_chat_completion_shapes_and_json_schema(qwen3):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
              "required": ["ok", "n"], "additionalProperties": False}
    r = qwen3.create_chat_completion([{"role": "user", "content": "Answer in JSON."}], max_tokens=200, seed=2,
                                     response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant"
    assert r["choices"][0]["finish_reason"] == "stop", r
    value = json.loads(r["choices"][0]["message"]["content"])
    assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and isinstance(value["n"], int)
    r = qwen3.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=6, temperature=0, logprobs=True,
                                     top_logprobs=3)
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 6 and all(len(e["top_logprobs"]) == 3 for e in content)
    assert content[0]["top_logprobs"][0]["token"] == content[0]["token"]  # greedy: the top one
    chunks = list(qwen3.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=6, temperature=0,
                                               stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"} and chunks[0]["object"] == "chat.completion.chunk"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == r["choices"][0]["message"]["content"]
    with pytest.raises(ValueError, match="response_format type"):
        qwen3.create_chat_completion([{"role": "user", "content": "hi"}], response_format={"type": "xml"})
