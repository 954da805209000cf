"""Fault scenarios on the engine: each injects one fault among healthy requests and reports whether
every healthy request completed exactly as it does alone and whether the KV block pool came back full.

A scenario returns a ``FaultResult``; tests assert on it and the reliability report prints it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import jsonschema
from engine_testlib import greedy, run_all

from guided.constraints import Constraint, JsonSchema, Regex
from guided.engine.sampling_params import SamplingParams
from guided.llm import LLM

PROMPTS = [
    "import os",
    "def main(argv):\n    parser = argparse.ArgumentParser()\n",
    "x = [1, 2,",
    "Once upon",
]
SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99},
          "tag": {"enum": ["red", "green"]}}, "required": ["id", "tag"], "additionalProperties": False}  # fmt: skip
FORCED = Regex("(a|b)= the quick brown fox jumps over the lazy dog [0-9]")


@dataclass
class FaultResult:
    name: str
    healthy: int = 0  # requests that should complete
    healthy_ok: int = 0  # ... and did, with the output they have alone (or a valid one)
    faulted: int = 0  # requests the fault hit
    faulted_ended: int = 0  # ... that ended as expected (aborted, or failed with the expected error)
    preemptions: int = 0
    blocks_full: bool = False
    notes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.healthy_ok == self.healthy and self.faulted_ended == self.faulted and self.blocks_full


def make_llm(**config) -> LLM:
    config.setdefault("device", "cpu")
    config.setdefault("block_size", 4)
    config.setdefault("max_model_len", 512)
    return LLM(**config)


def solo(llm, prompt, params, grammar=None) -> list[int]:
    """The request's tokens when it runs alone (the reference for healthy requests)."""
    llm.engine.add_request(prompt, params, request_id="solo", grammar=grammar)
    return run_all(llm.engine)["solo"].token_ids


def _blocks_full(engine) -> bool:
    bm = engine.block_manager
    return bm.num_free_blocks == bm.num_blocks and not engine.requests


def _healthy(llm, result: FaultResult, count: int = 3) -> dict:
    """Add ``count`` healthy free-text requests; their reference outputs by id."""
    refs = {}
    for i in range(count):
        prompt, params = PROMPTS[i % len(PROMPTS)], greedy(10 + 2 * i)
        refs[f"ok{i}"] = (prompt, params, solo(llm, prompt, params))
    for rid, (prompt, params, _) in refs.items():
        llm.engine.add_request(prompt, params, request_id=rid)
    result.healthy += count
    return refs


def _check_healthy(refs: dict, final: dict, result: FaultResult) -> None:
    for rid, (_, _, expected) in refs.items():
        out = final.get(rid)
        if out is not None and out.token_ids == expected and out.error is None:
            result.healthy_ok += 1
        else:
            result.notes.append(f"{rid}: {getattr(out, 'token_ids', None)} != {expected}")


def abort_during_prefill() -> FaultResult:
    """A long prompt is aborted after its first prefill chunk, before its prefill completes."""
    llm, result = make_llm(max_num_batched_tokens=16), FaultResult("abort during chunked prefill")
    refs = _healthy(llm, result)
    engine = llm.engine
    engine.add_request(list(range(100, 180)), greedy(8), request_id="victim")
    engine.step()
    seq = engine.requests["victim"].seqs[0]
    result.faulted = 1
    if 0 < seq.num_computed_tokens < seq.num_prompt_tokens and engine.abort("victim"):
        result.faulted_ended = 1
    _check_healthy(refs, run_all(engine), result)
    result.blocks_full = _blocks_full(engine)
    return result


def abort_during_fast_forward() -> FaultResult:
    """A guided request is aborted while the tokens its grammar forced wait to be prefilled."""
    llm, result = make_llm(), FaultResult("abort during fast-forward")
    refs = _healthy(llm, result)
    engine = llm.engine
    engine.add_request("say:", greedy(40), request_id="victim", grammar=llm.compile_service.compile(FORCED))
    result.faulted = 1
    for _ in range(20):
        engine.step()
        seq = engine.requests["victim"].seqs[0] if "victim" in engine.requests else None
        if seq is not None and seq.num_output_tokens > 1 and seq.num_computed_tokens < seq.num_tokens - 1:
            result.faulted_ended = int(engine.abort("victim"))  # forced tokens are pending here
            break
    _check_healthy(refs, run_all(engine), result)
    result.blocks_full = _blocks_full(engine)
    return result


def kv_exhaustion() -> FaultResult:
    """More sequences than KV blocks: the scheduler preempts, and every output is still exact."""
    llm, result = make_llm(num_kv_blocks=16), FaultResult("KV exhaustion forces preemption")
    engine = llm.engine
    refs = {f"r{i}": (PROMPTS[i % 4], greedy(16), None) for i in range(6)}
    refs = {rid: (p, sp, solo(llm, p, sp)) for rid, (p, sp, _) in refs.items()}
    before = engine.scheduler.num_preemptions
    for rid, (prompt, params, _) in refs.items():
        engine.add_request(prompt, params, request_id=rid)
    result.healthy = len(refs)
    _check_healthy(refs, run_all(engine), result)
    result.preemptions = engine.scheduler.num_preemptions - before
    result.blocks_full = _blocks_full(engine) and result.preemptions > 0
    return result


class SlowConstraint(Constraint):
    """A constraint whose compile takes ``seconds`` (it compiles itself, like tool calls do)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds

    @property
    def key(self) -> tuple:
        return ("slow", self.seconds, id(self))

    def compile(self, compiler, limits=None):
        time.sleep(self.seconds)
        return compiler.compile_regex("slow")


def compile_timeout_among_others() -> FaultResult:
    """One request's compile outlives its bound while free and guided requests run."""
    llm, result = make_llm(compile_timeout=0.3), FaultResult("compile timeout while others run")
    refs = _healthy(llm, result)
    engine = llm.engine
    engine.add_request("x", greedy(8), request_id="slow", grammar=llm.compile_service.submit(SlowConstraint(1.5)))
    engine.add_request(
        "json:",
        greedy(40),
        request_id="json",
        grammar=llm.compile_service.submit(JsonSchema(SCHEMA, whitespace="compact")),
    )
    result.faulted, result.healthy = 1, result.healthy + 1
    final = run_all(engine)
    _check_healthy(refs, final, result)
    slow = final.get("slow")
    if slow is not None and slow.finish_reason == "error" and "time bound" in (slow.error or ""):
        result.faulted_ended = 1
    result.healthy_ok += int(_valid_json(final.get("json")))
    result.blocks_full = _blocks_full(engine)
    return result


def identical_schemas(count: int = 8) -> FaultResult:
    """``count`` requests submit the same new schema at once: one compile, every output valid."""
    llm, result = make_llm(), FaultResult(f"{count} concurrent identical schemas")
    schema = {
        **SCHEMA,
        "properties": {**SCHEMA["properties"], "n": {"type": "integer", "minimum": 0, "maximum": 5}},
    }
    engine, service = llm.engine, llm.compile_service
    compiles, shared, pendings = service.compiles, service.shared, []
    for i in range(count):
        params = SamplingParams(temperature=1.0, seed=i, max_tokens=40)
        constraint = JsonSchema(schema, whitespace="compact")
        pendings.append(service.submit(constraint))
        engine.add_request("json:", params, request_id=f"s{i}", grammar=pendings[-1])
    final = run_all(engine)
    result.healthy = count
    result.healthy_ok = sum(_valid_json(final.get(f"s{i}"), schema) for i in range(count))
    grammars = {id(p.result()) for p in pendings}
    one_compile = len(grammars) == 1  # the same CompiledGrammar: shared in flight or from the cache
    result.notes.append(
        f"compile jobs {service.compiles - compiles}, joined in flight {service.shared - shared}"
    )
    result.notes += [
        f"s{i}: {final[f's{i}'].text!r}" for i in range(count) if not _valid_json(final.get(f"s{i}"), schema)
    ]
    result.blocks_full = _blocks_full(engine) and one_compile
    return result


def _valid_json(out, schema=SCHEMA) -> bool:
    if out is None or out.finish_reason != "stop":
        return False
    try:
        jsonschema.validate(json.loads(out.text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


SCENARIOS = [abort_during_prefill, abort_during_fast_forward, kv_exhaustion, compile_timeout_among_others,
             identical_schemas]  # fmt: skip
