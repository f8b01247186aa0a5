"""Generation stepped from the iterator (entropix_generation_*): ./run's text and its stop reasons,
the Python sampler called in the consumer's thread, a failure mid-generation, a sampler's
exception, leaving the loop early (the state free again at once; 1,000 such loops leave no
allocation behind), and closing the state or the model under a running generation."""
import ctypes
import gc
import threading

import numpy as np
import pytest

import entropix
from conftest import model_path, run_python
from test_entropix import golden, run_text


@pytest.mark.parametrize("n,ctx,stop", [(-1, 256, "stop_token"), (-1, 16, "context"), (0, 256, "max_tokens")])
def test_stop_reasons_are_runs(n, ctx, stop):
    m = entropix.Model(model_path("stories260K.f32.bin"), threads=1)
    gen = m.generate("Zoo", ctx=ctx, max_tokens=n)
    records = list(gen)
    flags = ["--sampler", "greedy", "-c", str(ctx)]
    assert "Zoo" + "".join(r.text for r in records) + "\n" == run_text("stories260K.f32.bin", "Zoo", n, flags)
    assert gen.summary.stop == stop
    assert gen.summary.n_generated == len(records) and gen.summary.n_prompt == 4
    if stop == "stop_token":
        assert records[-1].is_stop and len(records) == 231  # ./run: 231 tokens, the last an eos
    if stop == "context":
        assert [r.pos for r in records] == list(range(4, 17))


def test_python_sampler_runs_in_the_consumers_thread(stories):
    threads = set()

    def argmax(logits, metrics, rng):
        threads.add(threading.get_ident())
        return int(np.argmax(logits))

    ids = [r.id for r in stories.generate("Zoo", sampler=argmax, max_tokens=100)]
    assert ids == golden()["prompts"][0]["greedy_ids_numpy"]
    assert threads == {threading.get_ident()}


def test_a_bad_id_fails_mid_generation(stories):
    calls = []

    def bad_at_four(logits, metrics, rng):
        calls.append(1)
        return int(np.argmax(logits)) if len(calls) < 4 else stories.vocab_size  # outside the vocabulary

    state = stories.state(ctx=64)
    gen = state.generate("Zoo", sampler=bad_at_four, max_tokens=10)
    assert "".join(next(gen).text for _ in range(3)) == " was a little"
    with pytest.raises(entropix.EntropixError, match="sampler found no token to choose at position 7"):
        next(gen)
    with pytest.raises(StopIteration):  # ended
        next(gen)
    assert gen.summary.n_generated == 3 and gen.summary.stop is None
    assert state.forward([1, 410]).pos == 1  # the state is free again


def test_a_sampler_exception_is_raised_once(stories):
    calls = []

    def raises_at_two(logits, metrics, rng):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("second step")
        return int(np.argmax(logits))

    smp = entropix.FunctionSampler(raises_at_two)
    state = stories.state(ctx=64)
    gen = state.generate("Zoo", sampler=smp, max_tokens=10)
    assert next(gen).text == " was"
    with pytest.raises(ValueError, match="second step"):
        next(gen)
    with pytest.raises(StopIteration):
        next(gen)
    assert smp.error is None and len(calls) == 2
    assert state.generate("Zoo", sampler=smp, max_tokens=3).text() == " was a little"  # the sampler and state again


def test_leaving_the_loop_frees_the_generation(stories):
    state = stories.state(ctx=64)
    for r in state.generate("Zoo", max_tokens=50):
        break
    # the iterator is unreachable after the loop: CPython collects it at once, ending it
    assert state.forward([1, 410]).pos == 1
    gen = state.generate("Zoo", max_tokens=50)
    next(gen)
    with pytest.raises(entropix.EntropixError, match="a generation runs on this state"):
        state.forward([1])
    gen.close()
    assert gen.summary.stop == "callback" and gen.summary.n_generated == 1
    assert state.generate("Zoo", max_tokens=3).text() == " was a little"


def test_closing_the_state_or_model_ends_the_generation():
    m = entropix.Model(model_path("stories260K.f32.bin"), threads=1)
    s = m.state(ctx=64)
    gen = s.generate("Zoo", max_tokens=50)
    next(gen)
    s.close()
    with pytest.raises(StopIteration):
        next(gen)
    gen = m.generate("Zoo", max_tokens=50)
    next(gen)
    m.close()
    with pytest.raises(StopIteration):
        next(gen)


def test_closing_the_model_stops_its_agent_pool():
    """The agent pool runs on the model in a thread of its own: close() stops it and waits for it
    before the model is freed, and the iterator then ends (in a process of its own: a pool left
    running on the freed model would crash it)."""
    code = f"""if True:
        import entropix
        for path in {[model_path("stories260K.f32.bin"), model_path("qwen3-tiny.f32.bin")]!r}:
            m = entropix.Model(path, threads=1)
            gen = m.generate("Once upon a time", ctx=256, sampler="agents", agents=2, max_tokens=200)
            next(gen)
            m.close()
            rest = list(gen)
            print(len(rest), gen.summary.stop, gen.summary.n_generated < 200)
        """
    p = run_python(code)
    assert p.returncode == 0, f"exit status {p.returncode}:\n{p.stdout}{p.stderr}"
    assert p.stdout.splitlines() == ["0 callback True"] * 2


def test_dropping_an_agent_pool_iterator_stops_its_thread(stories):
    before = threading.active_count()
    gen = stories.generate("Once upon a time", ctx=256, sampler="agents", agents=2, max_tokens=200)
    next(gen)
    assert threading.active_count() == before + 1
    del gen  # unreachable: collected at once, which stops the pool and joins its thread
    assert threading.active_count() == before
    gen = stories.generate("Once upon a time", ctx=256, sampler="agents", agents=2, max_tokens=200)
    next(gen)
    gen.close()
    assert threading.active_count() == before and gen.summary.stop == "callback"

class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_in_use():
    """Bytes malloc has handed out in this thread's arena and as mmaps (glibc's mallinfo2): what
    a leaked generation would hold, without RSS's page-level noise."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd


def test_breaking_out_1000_times_frees_everything(stories):
    state = stories.state(ctx=64)

    def loop(sampler):
        for i, r in enumerate(state.generate("Once upon a time", sampler=sampler, max_tokens=20, n_top=3, metrics=True)):
            if i == 4:
                break

    argmax = entropix.FunctionSampler(lambda logits, m, r: int(np.argmax(logits)))
    for _ in range(100):  # warm-up: allocator pools, ctypes caches
        loop("greedy")
        loop(argmax)
    gc.collect()
    before = malloc_in_use()
    for _ in range(500):
        loop("greedy")
        loop(argmax)
    gc.collect()
    after = malloc_in_use()
    print(f"malloc'd bytes in use after 200 loops {before}, after 1,200: {after}")
    # a generation left unfreed holds about 7.5 KB here (its sampler chain, text buffer and prompt):
    # with entropix_generation_end a no-op, 7,514,880 bytes more (2026-11-29); with it, 976
    assert after - before < 256 * 1024, f"{after - before} bytes more in use after 1,000 loops left early"
