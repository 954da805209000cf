"""One sequence of eight fails inside one phase of a step; the other seven finish as they do alone.

Each scenario injects an exception for the victim request only, in one phase of ``LLMEngine.step``:
scheduling, the sampling inputs, its mask, the sampling kernel, accepting its token, the stop checks,
detokenizing, logprobs, fast-forward, or making its matcher. The victim must end with
``finish_reason == "error"`` and a message naming the fault; the seven healthy requests (free text
and guided) must produce exactly their solo tokens, and the KV pool must come back full.
"""

from __future__ import annotations

import contextlib

from fault_lib import FORCED, PROMPTS, SCHEMA, FaultResult, make_llm, run_all, solo

from guided.constraints import Choice, JsonSchema, Regex
from guided.engine import llm_engine
from guided.engine.block_manager import BlockManager
from guided.engine.llm_engine import LLMEngine
from guided.engine.request import Completion
from guided.engine.sampler import Sampler
from guided.engine.sampling_params import SamplingParams

VICTIM = "victim"
VICTIM_SEED = 4242  # the victim's seed marks its row in a batch of sampling inputs
MESSAGE = "injected fault"


class InjectedFault(RuntimeError):
    pass


def _is_victim(seq) -> bool:
    return seq.request_id == VICTIM


class FaultyMatcher:
    """A real matcher that raises in ``method`` from its ``after``-th call on."""

    def __init__(self, inner, method: str, after: int):
        self.inner, self.method, self.after, self.calls = inner, method, after, 0

    def _maybe_raise(self, name: str) -> None:
        if name == self.method:
            self.calls += 1
            if self.calls > self.after:
                raise InjectedFault(MESSAGE)

    def fill_bitmask(self, bitmask, row=0):
        self._maybe_raise("fill_bitmask")
        return self.inner.fill_bitmask(bitmask, row)

    def has_cached_mask(self) -> bool:
        return self.method != "fill_bitmask" and self.inner.has_cached_mask()

    def fill_bitmask_if_cached(self, bitmask, row=0) -> bool:
        return self.method != "fill_bitmask" and self.inner.fill_bitmask_if_cached(bitmask, row)

    def accept_token(self, token_id):
        self._maybe_raise("accept_token")
        return self.inner.accept_token(token_id)

    def forced_tokens(self):
        self._maybe_raise("forced_tokens")
        return self.inner.forced_tokens()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class FaultyGrammar:
    """A compiled grammar whose matchers fail in ``method`` (or whose ``matcher()`` itself fails)."""

    def __init__(self, compiled, method: str, after: int = 1):
        self.compiled, self.method, self.after = compiled, method, after

    def matcher(self):
        if self.method == "matcher":
            raise InjectedFault(MESSAGE)
        return FaultyMatcher(self.compiled.matcher(), self.method, self.after)


@contextlib.contextmanager
def _patched(cls, name: str, wrap):
    original = getattr(cls, name)
    setattr(cls, name, wrap(original))
    try:
        yield
    finally:
        setattr(cls, name, original)


def _raise_for_victim(seq_of, when=lambda seq: True):
    """Wrap a method so it raises when ``seq_of(args)`` is the victim's sequence."""

    def wrap(original):
        def method(self, *args, **kwargs):
            seq = seq_of(self, *args)
            if seq is not None and _is_victim(seq) and when(seq):
                raise InjectedFault(MESSAGE)
            return original(self, *args, **kwargs)

        return method

    return wrap


def _sampler_call(original):
    def call(self, logits, batch, *args, **kwargs):
        if VICTIM_SEED in batch.seeds.tolist():  # the kernel fails on the victim's row
            raise InjectedFault(MESSAGE)
        return original(self, logits, batch, *args, **kwargs)

    return call


def _prepare(original):
    def prepare(self, seqs):
        if any(_is_victim(s) for s in seqs):
            raise InjectedFault(MESSAGE)
        return original(self, seqs)

    return prepare


def _top(original):
    def top(row, token_id, k):
        raise InjectedFault(MESSAGE)  # only the victim asks for logprobs

    return top


def _after_two(seq) -> bool:
    return seq.num_output_tokens >= 2


# phase -> (how the victim's request differs, the patch that injects the fault or None)
PHASES = {
    "scheduling": ({}, lambda: _patched(BlockManager, "append", _raise_for_victim(lambda bm, seq, n: seq, _after_two))),
    "sampling inputs": ({}, lambda: _patched(Sampler, "prepare", _prepare)),
    "mask fill": ({"fault": "fill_bitmask"}, None),
    "sampling kernel": ({}, lambda: _patched(Sampler, "__call__", _sampler_call)),
    "accepting the token": ({"fault": "accept_token"}, None),
    "stop checks": ({}, lambda: _patched(LLMEngine, "_stop_reason", _raise_for_victim(lambda e, seq, *a: seq, _after_two))),
    "detokenizing": ({"stop": ["@@@@"]}, lambda: _patched(Completion, "detokenize", _raise_for_victim(
        lambda c: c.seq, lambda seq: seq.num_output_tokens >= 2))),
    "logprobs": ({"logprobs": 2}, lambda: _patched(llm_engine, "_top", lambda original: _top(original))),
    "fast-forward": ({"fault": "forced_tokens"}, None),
    "making its matcher": ({"fault": "matcher"}, None),
}  # fmt: skip


def _healthy_requests(llm) -> dict:
    """Seven healthy requests: four free-text, three guided (JSON Schema, forced regex, choice); greedy."""
    compile_ = llm.compile_service.compile
    grammars = [None, None, None, None, compile_(JsonSchema(SCHEMA)), compile_(FORCED),
                compile_(Choice(["alpha", "beta", "gamma"]))]  # fmt: skip
    requests = {}
    for i, grammar in enumerate(grammars):
        params = SamplingParams(temperature=0.0, max_tokens=8 + 3 * i if grammar is None else 60, ignore_eos=True)
        requests[f"ok{i}"] = (PROMPTS[i % len(PROMPTS)], params, grammar)
    return requests


def one_sequence_fails(phase: str) -> FaultResult:
    """Eight requests in one batch; the victim's fails in ``phase``; seven must finish as they do alone."""
    changes, patch = PHASES[phase]
    llm, result = make_llm(), FaultResult(f"one of 8 sequences fails in {phase}")
    healthy = _healthy_requests(llm)
    refs = {rid: solo(llm, prompt, params, grammar) for rid, (prompt, params, grammar) in healthy.items()}
    compiled = llm.compile_service.compile(Regex("[a-z]{3,40}"))
    fault = changes.get("fault")
    grammar = FaultyGrammar(compiled, fault) if fault else compiled
    params = SamplingParams(temperature=0.7, seed=VICTIM_SEED, max_tokens=30, ignore_eos=True,
                            logprobs=changes.get("logprobs"), stop=changes.get("stop"))  # fmt: skip
    engine = llm.engine
    with patch() if patch is not None else contextlib.nullcontext():
        for i, (rid, (prompt, p, g)) in enumerate(healthy.items()):
            engine.add_request(prompt, p, request_id=rid, grammar=g)
            if i == 3:  # the victim sits in the middle of the batch
                engine.add_request("victim prompt", params, request_id=VICTIM, grammar=grammar)
        final = run_all(engine)
    result.healthy, result.faulted = len(healthy), 1
    for rid, expected in refs.items():
        out = final.get(rid)
        if out is not None and out.token_ids == expected and out.error is None and out.finish_reason != "error":
            result.healthy_ok += 1
        else:
            result.notes.append(f"{rid}: {getattr(out, 'token_ids', None)} != {expected} ({getattr(out, 'error', None)})")
    victim = final.get(VICTIM)
    if victim is not None and victim.finish_reason == "error" and MESSAGE in (victim.error or ""):
        result.faulted_ended = 1
    else:
        result.notes.append(f"victim: {victim}")
    bm = engine.block_manager
    result.blocks_full = bm.num_free_blocks == bm.num_blocks and not engine.requests
    return result
