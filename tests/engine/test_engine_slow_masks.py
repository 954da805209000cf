"""A slow mask never stalls the batch: the sequence whose mask is late is held back and samples later
from the same logits, so its output is that of an unhurried run, and the others step on as before."""

from __future__ import annotations

import re
import statistics
import time

import pytest
from engine_testlib import PROMPTS, SlowGrammar, greedy

from guided.constraints import Regex
from guided.engine.sampling_params import SamplingParams
from guided.llm import LLM

SLOW_S = 0.5
PATTERN = "[a-z]{4,9}"


@pytest.fixture(scope="module")
def llm():
    return LLM(device="cpu", block_size=4, max_model_len=256, max_num_seqs=32)


def _normal(llm) -> dict:
    """15 normal requests: 11 free-text, 4 under a fast regex; greedy."""
    fast = llm.compile_service.compile(Regex("[0-9]{2,5}-[a-z]{2,6}"))
    requests = {}
    for i in range(15):
        params = greedy(24) if i % 4 else SamplingParams(temperature=0.0, max_tokens=24)
        requests[f"n{i}"] = (PROMPTS[i % len(PROMPTS)], params, None if i % 4 else fast)
    return requests


def _run(engine, requests: dict) -> tuple[dict, list[float]]:
    for rid, (prompt, params, grammar) in requests.items():
        engine.add_request(prompt, params, request_id=rid, grammar=grammar)
    final, steps = {}, []
    while engine.has_unfinished():
        t0 = time.perf_counter()
        outs = engine.step()
        steps.append(time.perf_counter() - t0)
        final.update({o.request_id: o for o in outs if o.finished})
    return final, steps


def test_a_slow_mask_is_held_back_and_the_batch_steps_on(llm):
    engine = llm.engine
    normal = _normal(llm)
    alone, base_steps = _run(engine, normal)
    slow_params = SamplingParams(temperature=0.9, seed=7, max_tokens=8)
    grammar = SlowGrammar(llm.compile_service.compile(Regex(PATTERN)), SLOW_S)
    with_slow, steps = _run(engine, {**normal, "slow": ("A word:", slow_params, grammar)})

    for rid in normal:  # the normal requests: the same tokens, and steps as quick as without it
        assert with_slow[rid].token_ids == alone[rid].token_ids, rid
    busy = steps[: len(base_steps)]
    assert statistics.median(busy) <= statistics.median(base_steps) + 0.005, (busy, base_steps)
    assert max(busy) < SLOW_S / 2, f"a step waited for the slow mask: {max(busy):.3f} s"
    assert engine.grammar_masks.rows_held > 0

    slow = with_slow["slow"]
    assert slow.finish_reason == "stop" and re.fullmatch(PATTERN, slow.text), slow
    engine.grammar_masks.wait_s, threads = 60.0, engine.grammar_masks._pool
    engine.grammar_masks._pool = None  # unhurried: every mask computed inline, waited for
    try:
        unhurried, _ = _run(engine, {"slow": ("A word:", slow_params, grammar)})
    finally:
        engine.grammar_masks._pool, engine.grammar_masks.wait_s = threads, 0.005
    assert unhurried["slow"].token_ids == slow.token_ids
    bm = engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not engine.grammar_masks.held
