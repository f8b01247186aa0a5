"""The Python package against independent references: ./run's text for the same flags and seed,
llama2.c's greedy text and numpy's logits (../shared/testdata), a Python greedy sampler against
the built-in one, errors as exceptions with the runtime's message, bounded memory over 1,000
open/close cycles."""
import json
import os
import subprocess
import weakref

import numpy as np
import pytest

import entropix
from conftest import RUN, SHARED, model_path, run_python


def run_text(model, prompt, n, flags):
    out = subprocess.run([RUN, model_path(model), "--raw", "-p", prompt, "-n", str(n), "-t", "1", "-c", "256", *flags],
                         capture_output=True, check=True)
    return out.stdout.decode("utf-8")


def golden():
    with open(os.path.join(SHARED, "testdata/stories260K/golden.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("model,prompt,n,sampler,kwargs,flags", [
    ("stories260K.f32.bin", "Once upon a time", 60, "greedy", {}, ["--sampler", "greedy"]),
    ("stories260K.f32.bin", "Once upon a time", 60, "combined", {"seed": 42, "temperature": 1.0},
     ["--sampler", "combined", "-s", "42", "--temp", "1.0"]),
    ("stories260K.f32.bin", "The dog", 60, "entropix", {"seed": 7}, ["--sampler", "entropix", "-s", "7"]),
    ("qwen3-tiny.f32.bin", "The capital of France is", 24, "combined", {"seed": 3, "temperature": 0.9, "top_k": 20},
     ["--sampler", "combined", "-s", "3", "--temp", "0.9", "--top-k", "20"]),
    ("qwen3-tiny.f32.bin", "Hello", 24, "greedy", {}, ["--sampler", "greedy"]),
])
def test_generate_is_runs_text(model, prompt, n, sampler, kwargs, flags):
    m = entropix.Model(model_path(model), threads=1)
    gen = m.generate(prompt, ctx=256, sampler=sampler, max_tokens=n, n_top=3, **kwargs)
    records = list(gen)
    text = "".join(r.text for r in records)
    assert prompt + text + "\n" == run_text(model, prompt, n, flags)
    assert gen.summary.n_generated == len([r for r in records if r.id >= 0])
    for r in records:
        assert r.logprob <= 1e-9 and len(r.top) == 3 and r.top[0][1] >= r.logprob - 1e-5
        if sampler == "entropix":
            assert r.case in ("LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE") and r.metrics is not None


def test_messages_are_runs_chat_text(qwen3):
    out = subprocess.run([RUN, model_path("qwen3-tiny.f32.bin"), "--chat", "--system", "Be brief.", "-p", "What is 2+2?",
                          "-n", "16", "-t", "1", "-c", "256", "--sampler", "combined", "-s", "11"],
                         capture_output=True, check=True).stdout.decode()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    text = qwen3.generate(messages=msgs, ctx=256, sampler="combined", seed=11, max_tokens=16).text()
    assert text + "\n" == out


def test_agents_are_runs_text(stories):
    want = run_text("stories260K.f32.bin", "Once upon a time", 40,
                    ["--sampler", "agents", "--agents", "4", "--lookahead", "2", "-s", "13"])
    gen = stories.generate("Once upon a time", ctx=256, sampler="agents", agents=4, lookahead=2, seed=13, max_tokens=40)
    assert "Once upon a time" + gen.text() + "\n" == want
    assert gen.summary.n_generated == 40


def test_greedy_is_llama2c_text(stories):
    p = golden()["prompts"][0]
    text = stories.generate(p["prompt"], max_tokens=100).text()
    assert p["prompt"] + text == p["runc_stdout"]


def test_python_greedy_sampler_is_builtin_greedy(stories, qwen3):
    seen = []

    def argmax(logits, metrics, rng):
        assert isinstance(logits, np.ndarray) and logits.shape == (stories.vocab_size,) or logits.shape == (qwen3.vocab_size,)
        assert metrics.logits_entropy >= 0 and metrics.attn_entropy > 0
        seen.append(1)
        return int(np.argmax(logits))

    for m, prompt in ((stories, "Zoo"), (qwen3, "The capital of France is")):
        builtin = [r.id for r in m.generate(prompt, max_tokens=30)]
        mine = [r.id for r in m.generate(prompt, sampler=argmax, max_tokens=30)]
        assert mine == builtin
    assert len(seen) == 60
    p = golden()["prompts"][0]
    assert [r.id for r in stories.generate("Zoo", sampler=argmax, max_tokens=100)] == p["greedy_ids_numpy"]


def test_python_sampler_gets_a_seeded_rng(stories):
    def draw(logits, metrics, rng):
        p = np.exp(logits - logits.max())
        return int(rng.choice(len(p), p=p / p.sum()))

    a = [r.id for r in stories.generate("Zoo", sampler=draw, seed=5, max_tokens=20)]
    b = [r.id for r in stories.generate("Zoo", sampler=draw, seed=5, max_tokens=20)]
    assert a == b


def test_forward_logits_view_and_numpy_reference(stories):
    s = stories.state(ctx=64)
    for p in golden()["prompts"]:
        out = s.forward(p["prompt_ids"], attention=[0, stories.n_layers - 1])
        assert not out.logits.flags.owndata  # a view of the runtime's memory
        assert np.max(np.abs(out.logits - np.array(p["step0_logits_numpy"]))) <= 1e-4
        n = len(p["prompt_ids"])
        for layer, a in out.attention.items():
            assert a.shape == (stories.n_heads, n)
    # the same memory is rewritten by the next forward (documented: copy to keep)
    first = s.forward([1], pos=0).logits
    kept = first.copy()
    s.forward([1, 410], pos=0)
    assert not np.array_equal(first, kept)


def test_views_keep_their_states_memory(stories):
    """A logits or attention view holds its state's memory: a state dropped or closed under a live
    view is freed once the view is gone, and the view reads the state's last forward until then."""
    ids = [1, 410, 469, 347]
    ref = stories.state(ctx=64).forward(ids, attention=[0])
    ref_logits, ref_scores = ref.logits.copy(), ref.attention[0].copy()
    out = stories.state(ctx=64).forward(ids, attention=[0])  # the state is dropped at once
    logits, scores = out.logits, out.attention[0]
    del out
    closed = stories.state(ctx=64)
    head = closed.forward(ids).logits[:8]  # a slice holds it too
    closed.close()
    others = [stories.state(ctx=64) for _ in range(4)]  # what would reuse the freed memory
    for s in others:
        s.forward([5, 6, 7], attention=[0])
    assert np.array_equal(logits, ref_logits) and np.array_equal(scores, ref_scores)
    assert np.array_equal(head, ref_logits[:8])


def test_a_view_holds_a_closed_models_memory_until_it_is_gone():
    m = entropix.Model(model_path("stories260K.f32.bin"), threads=1)
    s = m.state(ctx=64)
    logits = s.forward([1, 410, 469, 347]).logits
    want = logits.copy()
    model_memory = weakref.ref(m._owner)
    m.close()
    with pytest.raises(entropix.EntropixError, match="closed"):
        s.forward([1])
    other = entropix.Model(model_path("stories260K.f32.bin"), threads=1)
    other.state(ctx=64).forward([5, 6, 7])
    assert np.array_equal(logits, want) and model_memory() is not None
    del logits
    assert model_memory() is None  # the state's memory and then the model's, freed with the last view

def test_metrics_match_definitions(stories):
    s = stories.state(ctx=64)
    out = s.forward([1, 410, 469, 347])
    m = s.metrics()
    x = out.logits.astype(np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    h = -(p * np.log2(p)).sum()
    v = (p * (-np.log2(p) - h) ** 2).sum()
    assert abs(m.logits_entropy - h) < 1e-9 and abs(m.logits_varentropy - v) < 1e-8
    assert abs(entropix.logits_metrics(out.logits).logits_entropy - h) < 1e-9


def test_errors_raise_with_the_runtime_message(stories):
    with pytest.raises(entropix.EntropixError, match="/nonexistent/m.bin"):
        entropix.Model("/nonexistent/m.bin")
    with pytest.raises(entropix.EntropixError, match="tpu:1"):
        entropix.Model(model_path("stories260K.f32.bin"), device="tpu:1")
    s = stories.state(ctx=16)
    with pytest.raises(entropix.EntropixError, match="id 9999") as bad_id:
        s.forward([1, 9999])
    assert bad_id.value.status == -1 and isinstance(bad_id.value, (entropix.EntropixArgumentError, ValueError))
    with pytest.raises(ValueError, match="context of 16"):  # a bad argument is a ValueError too
        s.forward([1], pos=16)
    with pytest.raises(entropix.EntropixError) as bad_file:  # not an argument error: not a ValueError
        entropix.Model("/nonexistent/m.bin")
    assert bad_file.value.status == -2 and not isinstance(bad_file.value, ValueError)
    with pytest.raises(entropix.EntropixError, match="/nonexistent/p.profile"):
        entropix.Sampler("entropix", profile="/nonexistent/p.profile")

    def bad(logits, metrics, rng):
        raise KeyError("from the sampler")

    with pytest.raises(KeyError, match="from the sampler"):
        stories.generate("Zoo", sampler=bad, max_tokens=5).text()


def test_ids_positions_and_counts_are_c_ints(stories):
    """An integer beyond a C int raises OverflowError naming it and a non-integer TypeError, where
    ctypes would wrap it to 32 bits or truncate it; numpy integers and 1-D integer arrays are ids
    as a list of ints is."""
    s, tk = stories.state(ctx=64), stories.tokenizer
    want = s.forward([1, 410, 469]).logits.copy()
    for ids in (np.array([1, 410, 469]), np.array([1, 410, 469], dtype=np.uint16), [np.int64(1), np.int32(410), 469]):
        assert np.array_equal(s.forward(ids).logits, want)
    too_big = [lambda: s.forward([1, 2**32 + 300]), lambda: s.forward(np.array([1, 2**40])),
               lambda: s.forward([1], pos=2**32 + 1), lambda: stories.state(ctx=2**32 + 8),
               lambda: tk.decode([2**32 + 300]), lambda: tk.piece(2**32 + 300), lambda: s.attention(2**32),
               lambda: stories.generate("Zoo", max_tokens=2**32 + 2),
               lambda: stories.generate("Zoo", sampler=lambda logits, m, rng: 2**32 + 5, max_tokens=3).text()]
    for call in too_big:
        with pytest.raises(OverflowError, match="does not fit a C int"):
            call()
    not_ints = [lambda: s.forward([1.7, 2.2]), lambda: s.forward(np.array([1.7, 2.2])), lambda: s.forward([1], pos=1.0),
                lambda: s.forward(np.array([[1, 410]])), lambda: tk.decode([300.0]),
                lambda: stories.generate("Zoo", sampler=lambda logits, m, rng: 5.5, max_tokens=3).text()]
    for call in not_ints:
        with pytest.raises(TypeError):
            call()
    assert s.forward([1, 410, 469]).pos == 2  # the state is usable after them


def test_bad_paths_and_messages_name_what_is_wrong(qwen3):
    with pytest.raises(TypeError, match="NoneType"):
        entropix.Model(None)
    cases = [([{"role": "user"}], r"messages\[0\] has no 'content'"),
             ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": None}],
              r"messages\[1\]\['content'\] is NoneType None, not a str"),
             ([{"content": "Hi"}], r"messages\[0\] has no 'role'"),
             ([{"role": "user", "content": b"Hi"}], r"messages\[0\]\['content'\] is bytes"),
             ([{"role": "user", "content": "Hi\0there"}], r"messages\[0\]\['content'\] holds a NUL"),
             (["Hi"], r"messages\[0\] is a str, not a dict")]
    for messages, match in cases:
        with pytest.raises(ValueError, match=match):
            qwen3.chat_render(messages)
        with pytest.raises(ValueError, match=match):
            qwen3.generate(messages=messages, max_tokens=2)


def test_state_and_generations_are_context_managers(stories):
    with stories.state(ctx=64) as s:
        with s.generate("Zoo", max_tokens=50) as gen:
            assert next(gen).text == " was"
        assert gen.summary.stop == "callback" and s.forward([1, 410]).pos == 1  # the state free again
    with pytest.raises(entropix.EntropixError, match="closed"):
        s.forward([1])
    with stories.generate("Zoo", ctx=64, sampler="agents", agents=2, max_tokens=50) as pool:
        next(pool)
    assert pool.summary.stop == "callback" and list(pool) == []


def test_text_and_rows_of_the_wrong_kind_are_refused(stories):
    """encode takes str or bytes (as llama-cpp-python's tokenize), find refuses a NUL, and
    logits_metrics a row that is not one non-empty 1-D array."""
    tk = stories.tokenizer
    assert tk.encode(b"Once upon") == tk.encode("Once upon")
    with pytest.raises(TypeError, match="a str or bytes is needed, not int"):
        tk.encode(5)
    with pytest.raises(ValueError, match="NUL"):
        tk.find("a\0b")
    for row in ([], [[1.0, 2.0], [3.0, 4.0]]):
        with pytest.raises(ValueError, match="a non-empty 1-D row"):
            entropix.logits_metrics(row)
    assert entropix.logits_metrics([0.0, 0.0]).logits_entropy == pytest.approx(1.0)


def test_cuda_device_gives_the_cpus_text_or_names_what_is_missing(stories):
    """A CPU-only library refuses cuda:0 for want of the backend; one with the CUDA backend
    (CUDA=1, or the emulated twin) generates the CPU's text there, or names the missing device."""
    path = model_path("stories260K.f32.bin")
    if entropix.cuda_backend() is None:
        with pytest.raises(entropix.EntropixError, match="cuda:0: this build has no CUDA backend"):
            entropix.Model(path, device="cuda:0")
        return
    try:
        gpu = entropix.Model(path, device="cuda:0", threads=1)
    except entropix.EntropixError as e:  # a CUDA build on a machine without a GPU
        assert os.environ.get("ENTROPIX_TEST_CUDA") != "1", f"cuda:0 must run here (ENTROPIX_TEST_CUDA=1): {e}"
        assert e.status == -3 and "cuda" in str(e), str(e)
        return
    state = gpu.state(ctx=128)
    assert state.device == "cuda:0"
    want = stories.generate("Once upon a time", ctx=128, max_tokens=24).text()
    assert state.generate("Once upon a time", max_tokens=24).text() == want


def test_closing_the_model_closes_its_states():
    m = entropix.Model(model_path("stories260K.f32.bin"), threads=1)
    s = m.state(ctx=16)
    s.forward([1])
    m.close()
    with pytest.raises(entropix.EntropixError, match="closed"):
        s.forward([1])


def test_tokenizer_and_decoder_refuse_a_closed_model():
    """The tokenizer and a decoder read the model's memory: once it is closed they raise as a
    closed state does (in a process of its own: reaching freed memory would crash it)."""
    code = f"""if True:
        import entropix
        m = entropix.Model({model_path("stories260K.f32.bin")!r}, threads=1)
        tk = m.tokenizer
        d = tk.decoder()
        d.push(300)
        m.close()
        calls = [lambda: tk.encode("hello"), lambda: tk.decode([300]), lambda: tk.piece(300), lambda: tk.vocab_size,
                 lambda: tk.is_stop(2), lambda: tk.decoder(), lambda: d.push(300), lambda: d.flush(),
                 lambda: m.state(), lambda: m.prompt_ids("hello")]
        for call in calls:
            try:
                print("returned", call())
            except entropix.EntropixError as e:
                print(e)
        """
    p = run_python(code)
    assert p.returncode == 0, f"exit status {p.returncode}:\n{p.stdout}{p.stderr}"
    assert p.stdout.splitlines() == ["the model is closed"] * 10

def test_early_break_stops_generation(stories):
    gen = stories.generate("Zoo", max_tokens=50)
    got = [next(gen).text for _ in range(3)]
    gen.close()
    assert "".join(got) == " was a little"
    assert gen.summary.stop == "callback"


def test_tokenizer(stories, qwen3):
    tk = stories.tokenizer
    assert tk.encode("Zoo") == [1, 410, 469, 347] and tk.bos == 1
    assert tk.decode([1, 410, 469, 347]) == "Zoo"
    assert qwen3.tokenizer.find("<|im_end|>") == 151645 and qwen3.tokenizer.is_stop(151645)
    assert qwen3.chat_render([{"role": "user", "content": "Hi"}]) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert qwen3.prompt_ids(messages=[{"role": "user", "content": "Hi"}])[0] == 151644


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def test_open_close_cycles_keep_rss_bounded():
    path = model_path("stories260K.f32.bin")

    def cycle():
        m = entropix.Model(path, threads=1)
        s = m.state(ctx=32)
        s.forward([1, 410, 469])
        s.close()
        m.close()

    for _ in range(100):  # warm-up: allocator pools, numpy, ctypes caches
        cycle()
    before = rss_kib()
    for _ in range(1000):
        cycle()
    after = rss_kib()
    print(f"RSS after 100 cycles {before} KiB, after 1,100: {after} KiB")
    assert after - before < 4096, f"RSS grew by {after - before} KiB over 1,000 open/close cycles"
