"""completions.py — OpenAI-shaped completions from a Model, as llama-cpp-python's
Llama.create_completion and create_chat_completion return them: the same dicts, or with
stream=True an iterator of the same chunks, so code written against those calls runs here.

The sampler is the server's choice (docs/server.md): "combined" (top-k, top-p, min-p and the
temperature), greedy at temperature 0, or "entropix" when asked for. Stop strings end the text
where they begin; text that could still grow into one is held back until it cannot, so a stream
never shows part of a stop string. Logprobs cover the tokens whose text starts before the end of
the returned text (the server's rule). A call runs on the model's kept state and skips the
prompt's tokens its cache holds from the call before (a chat's earlier turns; usage's
prompt_tokens_details.cached_tokens counts them), or on a new state while another call holds it.
"""
import secrets
import time
import uuid
import weakref

from entropix.generate import generate

FINISH = {"stop_token": "stop", "max_tokens": "length", "context": "length"}


class _StopCutter:
    """The generated text with the stop strings cut: push() returns what is safe to release."""

    def __init__(self, stop):
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if not all(isinstance(s, str) for s in stops):
            raise TypeError("stop: a str or a list of str is needed")
        self.stops, self.held, self.stopped = [s for s in stops if s], "", False

    def push(self, text):
        if self.stopped:
            return ""
        buf = self.held + text
        cuts = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if cuts:
            self.stopped, self.held = True, ""
            return buf[:min(cuts)]
        keep = max((k for s in self.stops for k in range(1, min(len(s), len(buf) + 1)) if buf.endswith(s[:k])),
                   default=0)  # the longest end of buf that begins a stop string
        self.held = buf[len(buf) - keep:]
        return buf[:len(buf) - keep]

    def flush(self):
        held, self.held = self.held, ""
        return "" if self.stopped else held


def _sampler_args(temperature, top_p, top_k, min_p, seed, sampler, response_format, **rules):
    """generate()'s sampler keywords for an OpenAI request's fields."""
    kind = sampler or ("greedy" if temperature == 0 else "combined")
    args = dict(sampler=kind, seed=secrets.randbits(63) if seed is None else seed, **rules)
    if kind == "combined":
        args.update(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
    if response_format is not None:
        kind_rf = response_format.get("type")
        if kind_rf == "json_object":  # llama-cpp-python's form may carry a schema
            args["json_schema"] = response_format.get("schema") or {"type": "object"}
        elif kind_rf == "json_schema":
            args["json_schema"] = (response_format.get("json_schema") or {}).get("schema")
            if args["json_schema"] is None:
                raise ValueError("response_format: json_schema.schema is missing")
        elif kind_rf != "text":
            raise ValueError(f"response_format type {kind_rf!r}: expected text, json_object or json_schema")
    return args


def _end_run(gen, done):
    gen.close()
    done()


class _Run:
    """One generation through the stop cutter: chunks of (text, logprob entries) as they may be
    released, then .finish_reason and .usage."""

    def __init__(self, model, prompt, messages, max_tokens, stop, n_top, **sampler_args):
        self.model, self.cutter, self.n_top = model, _StopCutter(stop), n_top
        self.state, done, reuse = model._completion_state()
        try:
            self.gen = generate(self.state, prompt, messages=messages, chat=messages is not None,
                                max_tokens=-1 if max_tokens is None else max_tokens, n_top=n_top or 0,
                                reuse_prefix=reuse, **sampler_args)
        except BaseException:
            done()
            raise
        # Ends the generation and gives the state back: when the chunks are read to their end, or
        # when this run is dropped unread (a stream never iterated).
        self._end = weakref.finalize(self, _end_run, self.gen, done)
        self.finish_reason, self.usage = None, None
        self.generated, self.released, self.n_tokens = "", 0, 0
        self.pending = []  # (offset in the generated text, entry) not yet released

    def _entry(self, rec, offset):
        piece = self.model.tokenizer.piece(rec.id)
        top = [(self.model.tokenizer.piece(i), lp) for i, lp in rec.top]
        return offset, {"id": rec.id, "token": piece.decode("utf-8", "replace"), "bytes": list(piece),
                        "logprob": rec.logprob, "top": [(p.decode("utf-8", "replace"), list(p), lp) for p, lp in top]}

    def _release(self, text):
        self.released += len(text)
        done = [e for off, e in self.pending if off < self.released]
        self.pending = [(off, e) for off, e in self.pending if off >= self.released]
        return text, done

    def chunks(self):
        try:
            for rec in self.gen:
                if rec.id >= 0 and not rec.is_stop:
                    self.n_tokens += 1
                    if self.n_top is not None:
                        self.pending.append(self._entry(rec, len(self.generated)))
                self.generated += rec.text
                out = self.cutter.push(rec.text)
                if out or self.cutter.stopped:
                    yield self._release(out)
                if self.cutter.stopped:
                    break
            yield self._release(self.cutter.flush())
            stopped = self.cutter.stopped
            self.gen.close()
            self.finish_reason = "stop" if stopped else FINISH.get(self.gen.summary.stop, "stop")
            n_prompt = self.gen.summary.n_prompt
            self.usage = {"prompt_tokens": n_prompt, "completion_tokens": self.n_tokens,
                          "total_tokens": n_prompt + self.n_tokens,
                          "prompt_tokens_details": {"cached_tokens": self.gen.summary.n_cached}}
        finally:
            self._end()


def _completion_logprobs(entries, start):
    """The legacy completions' logprobs object of entries, text_offset counted from start."""
    lp = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    for e in entries:
        lp["tokens"].append(e["token"])
        lp["text_offset"].append(start)
        lp["token_logprobs"].append(e["logprob"])
        lp["top_logprobs"].append({t: v for t, _, v in e["top"]})
        start += len(e["token"])
    return lp


def _chat_logprobs(entries):
    return {"content": [{"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"],
                         "top_logprobs": [{"token": t, "logprob": v, "bytes": b} for t, b, v in e["top"]]}
                        for e in entries]}


def create_completion(model, prompt, max_tokens=16, temperature=0.8, top_p=0.95, top_k=40, min_p=0.05, stop=None,
                      seed=None, stream=False, logprobs=None, echo=False, sampler=None, response_format=None,
                      grammar=None, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                      logit_bias=None):
    """A text completion of prompt (raw text: no chat template), shaped as OpenAI's /v1/completions
    answer; logprobs=N (0..20) adds the N most likely alternatives of each token."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: a str is needed, not {type(prompt).__name__}")
    args = _sampler_args(temperature, top_p, top_k, min_p, seed, sampler, response_format, grammar=grammar,
                         repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                         frequency_penalty=frequency_penalty, logit_bias=logit_bias)
    run = _Run(model, prompt, None, max_tokens, stop, logprobs, **args)
    head = {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
            "model": model.path}
    if stream:
        return _stream_completion(run, head, prompt if echo else "", logprobs is not None)
    text, entries = prompt if echo else "", []
    for piece, done in run.chunks():
        text, entries = text + piece, entries + done
    choice = {"text": text, "index": 0,
              "logprobs": _completion_logprobs(entries, len(prompt)) if logprobs is not None else None,
              "finish_reason": run.finish_reason}
    return {**head, "choices": [choice], "usage": run.usage}


def _stream_completion(run, head, echoed, want_logprobs):
    offset = len(echoed)
    if echoed:
        yield {**head, "choices": [{"text": echoed, "index": 0, "logprobs": None, "finish_reason": None}]}
    for piece, done in run.chunks():
        if piece or done:
            lp = _completion_logprobs(done, offset) if want_logprobs else None
            yield {**head, "choices": [{"text": piece, "index": 0, "logprobs": lp, "finish_reason": None}]}
            offset += len(piece)
    yield {**head, "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": run.finish_reason}],
           "usage": run.usage}


def create_chat_completion(model, messages, max_tokens=None, temperature=0.8, top_p=0.95, top_k=40, min_p=0.05,
                           stop=None, seed=None, stream=False, logprobs=False, top_logprobs=None, sampler=None,
                           response_format=None, grammar=None, repeat_penalty=1.0, presence_penalty=0.0,
                           frequency_penalty=0.0, logit_bias=None):
    """A chat completion of messages through the model's chat template, shaped as OpenAI's
    /v1/chat/completions answer; logprobs=True with top_logprobs=N (0..20) adds them."""
    if top_logprobs is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    n_top = (top_logprobs or 0) if logprobs else None
    args = _sampler_args(temperature, top_p, top_k, min_p, seed, sampler, response_format, grammar=grammar,
                         repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                         frequency_penalty=frequency_penalty, logit_bias=logit_bias)
    run = _Run(model, None, messages, max_tokens, stop, n_top, **args)
    head = {"id": f"chatcmpl-{uuid.uuid4()}", "created": int(time.time()), "model": model.path}
    if stream:
        return _stream_chat(run, head, n_top is not None)
    text, entries = "", []
    for piece, done in run.chunks():
        text, entries = text + piece, entries + done
    choice = {"index": 0, "message": {"role": "assistant", "content": text},
              "logprobs": _chat_logprobs(entries) if n_top is not None else None, "finish_reason": run.finish_reason}
    return {**head, "object": "chat.completion", "choices": [choice], "usage": run.usage}


def _stream_chat(run, head, want_logprobs):
    head = {**head, "object": "chat.completion.chunk"}
    yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}]}
    for piece, done in run.chunks():
        if piece or done:
            lp = _chat_logprobs(done) if want_logprobs else None
            yield {**head, "choices": [{"index": 0, "delta": {"content": piece}, "logprobs": lp, "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": run.finish_reason}],
           "usage": run.usage}
