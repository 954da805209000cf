"""Sequence: one completion's tokens, KV blocks and progress through the scheduler.

Every token past ``num_computed_tokens`` is still to be run through the model; a step computes a
chunk of them. A decode is a chunk of one token, a prompt (or tokens a grammar forces, appended with
``append_tokens``) is prefilled in chunks. The sampler runs only when a chunk reaches the end.
"""

from __future__ import annotations

import enum
from itertools import count

from .sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()


class Sequence:
    __slots__ = (
        "seq_id", "request_id", "index", "params", "status", "token_ids", "num_prompt_tokens",
        "num_computed_tokens", "num_cached_tokens", "block_table", "block_hashes", "num_hashed_blocks",
        "finish_reason", "stop_reason", "logprobs", "seed", "constraint", "num_preemptions", "forced",
        "budget", "budget_forced", "reasoning_done", "rope_long", "draft", "draft_states", "draft_bonus",
    )  # fmt: skip
    _ids = count()

    def __init__(self, token_ids: list[int], params: SamplingParams, request_id: str = "", index: int = 0):
        self.seq_id = next(Sequence._ids)
        self.request_id = request_id
        self.index = index  # which of the request's n completions
        self.params = params
        self.status = SequenceStatus.WAITING
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # hash chain of the full blocks of token_ids (never stale)
        self.num_hashed_blocks = 0  # blocks of block_table registered in the prefix cache
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.logprobs: list | None = [] if params.logprobs is not None else None
        self.seed = 0
        self.constraint = None  # per-sequence grammar matcher (guided decoding fills this)
        self.forced: list[bool] = []  # per output token: appended because the grammar forced it
        self.num_preemptions = 0
        self.budget = False  # steered to end complete within its budget (see engine.budget)
        self.budget_forced = False  # the budget refused a draw or ended the output
        self.reasoning_done = False  # the end-of-reasoning marker is in the output (max_reasoning_tokens)
        self.rope_long = False  # LongRoPE: its KV is computed with the long factors (see Scheduler)
        # speculative decoding (engine.speculative): tokens proposed after token_ids, computed with them by
        # the next step and never part of them until verified; the matcher after each; whether the
        # position after the whole draft is sampled too
        self.draft: list[int] = []
        self.draft_states: list = []
        self.draft_bonus = False

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return f"Sequence({self.seq_id}, {self.status.name}, {self.num_computed_tokens}/{len(self)} computed)"

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        """Append a sampled token (its KV is computed by the next step)."""
        self.token_ids.append(token_id)

    def append_tokens(self, token_ids: list[int]) -> None:
        """Append known tokens (e.g. forced by a grammar); they are prefilled as a chunk, then sampled on."""
        self.token_ids.extend(token_ids)

    def reset_for_recompute(self) -> None:
        """After preemption: the KV is gone, every token (prompt and output so far) is recomputed."""
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.block_table = []
        self.num_hashed_blocks = 0
        self.num_preemptions += 1
        self.drop_draft()

    def drop_draft(self) -> None:
        self.draft, self.draft_states, self.draft_bonus = [], [], False
