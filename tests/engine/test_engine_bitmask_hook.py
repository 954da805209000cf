"""The bitmask hook guided decoding plugs into: per-sequence rows, -1 = unconstrained."""

from __future__ import annotations

import torch
from engine_testlib import PROMPTS, greedy, hf_greedy, make_engine, run_all

from guided.engine.sampling_params import SamplingParams
from guided.kernels.bitmask import allocate_token_bitmask

ALLOWED = [17, 300, 301, 4000]


class AnyToken:
    """A matcher that accepts every token and forces none: marks a sequence as constrained."""

    def accept_token(self, token_id: int) -> bool:
        return True

    def is_terminated(self) -> bool:
        return False

    def forced_tokens(self) -> list[int]:
        return []


def only(ids: list[int], vocab_size: int) -> torch.Tensor:
    row = allocate_token_bitmask(1, vocab_size)
    row.zero_()
    for i in ids:
        row[0, i // 32] |= torch.tensor(1 << (i % 32), dtype=torch.int64).to(torch.int32)
    return row


def test_bitmask_provider_constrains_only_its_sequences():
    engine = make_engine("llama")
    calls = []

    def provider(seqs):
        calls.append(len(seqs))
        rows = [0 if s.constraint is not None else -1 for s in seqs]
        if all(r < 0 for r in rows):
            return None
        return only(ALLOWED, engine.vocab_size), rows

    engine.bitmask_provider = provider
    for i, p in enumerate(PROMPTS[:3]):
        engine.add_request(p, greedy(6), request_id=str(i))
    engine.scheduler.waiting[1].constraint = AnyToken()  # request "1" is constrained
    outs = run_all(engine)
    assert set(outs["1"].token_ids) <= set(ALLOWED)
    for rid in ("0", "2"):
        p = engine.tokenizer.encode(PROMPTS[int(rid)])
        assert outs[rid].token_ids == hf_greedy("llama", p, 6)
    assert calls and max(calls) == 3


def test_bitmask_applies_to_sampled_rows_too():
    engine = make_engine("llama")
    engine.bitmask_provider = lambda seqs: (only(ALLOWED, engine.vocab_size), [0] * len(seqs))
    engine.add_request(PROMPTS[0], SamplingParams(temperature=1.5, seed=3, max_tokens=20, ignore_eos=True), "s")
    assert set(run_all(engine)["s"].token_ids) <= set(ALLOWED)
