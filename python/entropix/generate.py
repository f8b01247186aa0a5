"""generate.py — samplers and generation: an iterator of token records.

A generation with a built-in or a Python sampler steps the C loop from the iterator itself
(entropix_generation_next, one token per next(), in the calling thread: ctypes releases the GIL
for the call), so the iterator is lazy and leaving the loop early frees the generation at once.
The agent pool, which the C API runs with a callback only (entropix_generate_agents), runs in a
worker thread that hands each record over a queue of one.
"""
import ctypes
import json
import queue
import threading
import weakref
from ctypes import POINTER, byref, c_void_p
from dataclasses import dataclass, field

import numpy as np

from entropix._lib import (CHOOSE_FN, TOKEN_FN, AgentsParams, GenerateParams, GenerateResult, SamplerParams, Token,
                           lib)
from entropix._base import Metrics, _c_int, _ids_array, check, error

KINDS = {"greedy": 0, "combined": 1, "entropix": 2}
STOPS = {1: "stop_token", 2: "max_tokens", 3: "context", 4: "callback"}


class Sampler:
    """A built-in sampler: "greedy", "combined" (top-k, top-p, min-p, temperature; ./run's
    defaults) or "entropix" (profile None: the default; a built-in name or a profile file),
    behind the logit rules ./run's flags of the same names set: a grammar (GBNF text) or a JSON
    schema (a dict or its JSON text) the text must follow, the repeat, presence and frequency
    penalties, and logit_bias ({token id: bias in [-100, 100] or -inf})."""

    def __init__(self, kind="greedy", temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=0, profile=None,
                 grammar=None, json_schema=None, repeat_penalty=1.0, repeat_last_n=64, presence_penalty=0.0,
                 frequency_penalty=0.0, logit_bias=None):
        if kind not in KINDS:
            raise ValueError(f"sampler {kind!r}: expected one of {', '.join(KINDS)}")
        self._h = c_void_p()
        self.seed = seed
        schema = json.dumps(json_schema) if isinstance(json_schema, dict) else json_schema
        bias = dict(logit_bias or {})
        ids = (ctypes.c_int * max(len(bias), 1))(*[_c_int(i, "a logit_bias id") for i in bias])
        values = (ctypes.c_float * max(len(bias), 1))(*[float(v) for v in bias.values()])
        p = SamplerParams(size=ctypes.sizeof(SamplerParams), kind=KINDS[kind], temperature=temperature,
                          top_k=_c_int(top_k, "top_k"), top_p=top_p, min_p=min_p, seed=seed & (2**64 - 1),
                          profile=_text_arg(profile, "profile"), grammar=_text_arg(grammar, "grammar"),
                          json_schema=_text_arg(schema, "json_schema"), repeat_penalty=repeat_penalty,
                          repeat_last_n=_c_int(repeat_last_n, "repeat_last_n"), presence_penalty=presence_penalty,
                          frequency_penalty=frequency_penalty, logit_bias_ids=ids, logit_bias=values,
                          n_logit_bias=len(bias))
        check(lib.entropix_sampler_new(byref(p), byref(self._h)))  # copies what it keeps

    def __del__(self):
        if getattr(self, "_h", None):
            lib.entropix_sampler_free(self._h)
            self._h = None


class FunctionSampler:
    """A Python function (logits, metrics, rng) -> token id as the sampler: logits a numpy view
    [vocab] of the step, metrics a Metrics, rng a numpy Generator seeded with seed."""

    def __init__(self, fn, seed=0):
        self.fn, self.rng, self.error = fn, np.random.default_rng(seed), None
        self._cb = CHOOSE_FN(self._choose)  # kept alive as long as the sampler
        self._h = c_void_p()
        check(lib.entropix_sampler_new_custom(self._cb, None, byref(self._h)))

    def _choose(self, user, logits, n_vocab, metrics, pos):
        try:
            row = np.ctypeslib.as_array(logits, shape=(n_vocab,))
            return _c_int(self.fn(row, Metrics.from_c(metrics.contents), self.rng), "the sampler's id")
        except BaseException as e:  # raised again by the iterator; -1 stops the C loop
            self.error = e
            return -1

    def __del__(self):
        if getattr(self, "_h", None):
            lib.entropix_sampler_free(self._h)
            self._h = None


@dataclass
class TokenRecord:
    """One generated token: id (-1: the final flush of held-back bytes), its text, its log-probability,
    the most likely alternatives [(id, logprob)], the step's metrics, the entropix case."""
    id: int
    text: str
    logprob: float
    pos: int
    is_stop: bool
    top: list = field(default_factory=list)
    metrics: Metrics = None
    case: str = None


@dataclass
class GenerateSummary:
    n_prompt: int = 0
    n_generated: int = 0
    stop: str = None
    n_cached: int = 0  # reuse_prefix: the prompt's leading tokens the state's cache held already


def _text_arg(text, what):
    """A str as the NUL-terminated UTF-8 bytes C reads (None stays None); a NUL inside is refused."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"{what}: a str is needed, not {type(text).__name__}")
    if "\0" in text:
        raise ValueError(f"{what}: a NUL character would end the text there")
    return text.encode()


def make_sampler(sampler, seed, **params):
    if isinstance(sampler, (Sampler, FunctionSampler)):
        return sampler
    if callable(sampler):
        return FunctionSampler(sampler, seed=seed)
    return Sampler(sampler, seed=seed, **params)


def _generate_params(max_tokens, n_top, metrics, reuse_prefix=False):
    return GenerateParams(size=ctypes.sizeof(GenerateParams), max_tokens=_c_int(max_tokens, "max_tokens"),
                          n_top=_c_int(n_top, "n_top"), metrics=int(metrics), reuse_prefix=int(bool(reuse_prefix)))


def _record(t):
    """A TokenRecord of the C record t (entropix_token): its text and alternatives copied out."""
    text = ctypes.string_at(t.text, t.text_len).decode("utf-8", "replace") if t.text_len else ""
    n_top = t.n_top
    return TokenRecord(id=t.id, text=text, logprob=t.logprob, pos=t.pos, is_stop=bool(t.is_stop),
                       top=[(t.top_ids[i], float(t.top_logprobs[i])) for i in range(n_top)] if n_top else [],
                       metrics=Metrics.from_c(t.metrics.contents) if t.metrics else None,
                       case=t.case_name.decode() if t.case_name else None)


class Generation:
    """The iterator generate() returns: each next() runs one step of the C loop (the prefill and
    the first token on the first), in the calling thread. .summary is filled when it ends;
    close() (or dropping the iterator, or closing its state or model) ends it where it is."""

    def __init__(self, state, ids, sampler, max_tokens, n_top, metrics, reuse_prefix=False):
        self.state, self.sampler, self.summary = state, sampler, GenerateSummary()
        arr, n = _ids_array(ids)
        params = _generate_params(max_tokens, n_top, metrics, reuse_prefix)
        self._g, self._tok = c_void_p(), POINTER(Token)()
        self._next = lib.entropix_generation_next
        check(lib.entropix_generation_begin(state._handle(), sampler._h, arr, n, byref(params), byref(self._g)))
        state._generation = weakref.ref(self)  # the state ends it before it is freed

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __next__(self):
        if not self._g:
            raise StopIteration
        rc = self._next(self._g, byref(self._tok))
        if rc:
            msg = lib.entropix_error_last().decode("utf-8", "replace")
            self.close(failed=True)
            err = getattr(self.sampler, "error", None)
            if err is not None:  # the Python sampler raised: its exception, once
                self.sampler.error = None
                raise err
            raise error(rc, msg)
        if not self._tok:
            self.close()
            raise StopIteration
        return _record(self._tok.contents)

    def close(self, failed=False):
        """Ends the generation wherever it is and frees it (left early: summary.stop "callback")."""
        g, self._g = getattr(self, "_g", None), None
        if not g:
            return
        res = GenerateResult(size=ctypes.sizeof(GenerateResult))
        lib.entropix_generation_result(g, byref(res))
        lib.entropix_generation_end(g)
        stop = STOPS.get(res.stop) if res.stop else (None if failed else "callback")
        self.summary = GenerateSummary(res.n_prompt, res.n_generated, stop, res.n_cached)

    def __del__(self):
        self.close()

    def text(self):
        """Runs to the end and returns the whole generated text."""
        return "".join(r.text for r in self)


class _Pool:
    """The agent pool's run (entropix_generate_agents) in a worker thread, each record handed over a
    queue of one. The thread holds this object, not the iterator, so that dropping the iterator
    stops the pool; the model holds it weakly and stops it before it is freed."""

    def __init__(self, model, ids, agents, params):
        self.model, self.summary = model, GenerateSummary()
        self._agents, self._ids, self._params = agents, _ids_array(ids), params
        self._cb = TOKEN_FN(self._on_token)
        self._params.on_token = self._cb
        self._queue, self._stopped = queue.Queue(maxsize=1), threading.Event()
        self._h = model._handle()
        model._pools.add(self)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _put(self, item):
        """Hands item to the iterator; False when the pool was stopped first."""
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _on_token(self, user, tok_p):
        return 0 if self._put(("token", _record(tok_p.contents))) else 1  # 1: stopped, the C loop ends

    def _run(self):
        res = GenerateResult(size=ctypes.sizeof(GenerateResult))
        arr, n = self._ids
        rc, msg = -6, "the agent pool's thread failed"  # ENTROPIX_ERR_RUNTIME, unless the call returns
        try:
            rc = lib.entropix_generate_agents(self._h, byref(self._agents), arr, n, byref(self._params), byref(res))
            msg = lib.entropix_error_last().decode("utf-8", "replace") if rc else None  # this thread's message
        finally:
            self.summary = GenerateSummary(res.n_prompt, res.n_generated, STOPS.get(res.stop))
            self._put(("end", (rc, msg)))

    def get(self):
        """The next ("token", record), or ("end", (status, message)): the end of the run, or
        (0, None) once the pool is stopped."""
        while not self._stopped.is_set():
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
        return "end", (0, None)

    def stop(self):
        """Stops the run (its next token's callback returns 1: the pool ends after its round) and
        waits for its thread, after which the model may be freed."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class PoolGeneration:
    """The iterator generate(sampler="agents") returns: the agent pool in a worker thread, each
    record handed over a queue of one; .summary is filled when it ends. close() (or dropping the
    iterator, or closing its model) stops the pool after its round; next() then ends."""

    def __init__(self, state, ids, agents, max_tokens, n_top, metrics):
        self.state, self.sampler, self.summary, self._done = state, None, GenerateSummary(), False
        params = _generate_params(max_tokens, n_top, metrics)
        self._pool = _Pool(state.model, ids, agents, params)

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __next__(self):
        if self._done:
            raise StopIteration
        kind, value = self._pool.get()
        if kind == "token":
            return value
        self.close()
        rc, msg = value
        if rc:
            raise error(rc, msg)
        raise StopIteration

    def close(self):
        """Stops the generation (after the pool's round) and waits for it."""
        pool = getattr(self, "_pool", None)
        if self._done or pool is None:
            return
        pool.stop()
        self._done, self.summary = True, pool.summary

    def __del__(self):
        self.close()

    def text(self):
        """Runs to the end and returns the whole generated text."""
        return "".join(r.text for r in self)


def generate(state, prompt=None, messages=None, sampler="greedy", max_tokens=256, seed=0, n_top=0, metrics=False,
             chat=False, system=None, agents=8, lookahead=1, workers=1, threads=0, reuse_prefix=False,
             **sampler_params):
    """Generates from prompt (raw text; chat=True: one user message through the chat template) or
    messages ([{"role", "content"}, ...]) on state, from position 0; reuse_prefix=True runs only
    the prompt's tokens after those the state's cache holds already (a chat's next turn on the
    same state: summary.n_cached says how many were kept). sampler: "greedy",
    "combined", "entropix", a Sampler, a function (logits, metrics, rng) -> id, or "agents" (the
    agent pool on the CPU: agents, lookahead, workers, threads; its own replicas of the model, of
    the state's context). Returns an iterator of TokenRecord."""
    if prompt is None and messages is None:
        prompt = ""
    ids = state.model.prompt_ids(prompt, messages=messages, chat=chat, system=system)
    if isinstance(sampler, str) and sampler == "agents":
        ap = AgentsParams(size=ctypes.sizeof(AgentsParams), n_agents=_c_int(agents, "agents"),
                          lookahead=_c_int(lookahead, "lookahead"), workers=_c_int(workers, "workers"),
                          threads=_c_int(threads, "threads"), ctx=state.ctx, seed=seed & (2**64 - 1))
        return PoolGeneration(state, ids, ap, max_tokens, n_top, metrics)
    smp = make_sampler(sampler, seed, **sampler_params)
    return Generation(state, ids, smp, max_tokens, n_top, metrics, reuse_prefix)
