"""Draft-model speculation: a second, smaller model that shares the target's tokenizer proposes the draft.

``DraftModel`` holds the draft model (its own ``ModelRunner``: weights and a paged KV pool of its own,
eager steps) and, per sequence, the KV blocks of the tokens it has seen. After a step's tokens are
appended, ``propose`` drafts for a batch of sequences at once:

1. one forward over each sequence's tokens the draft model has not computed yet (the whole prompt the
   first time, then the one to few tokens the last step appended), whose last rows pick the first
   draft tokens;
2. then one decode forward per further draft token, each feeding the token just picked.

Each token is the draft model's most likely one under the sequence's constraint (the grammar's mask of
a copy of the matcher, advanced along the draft; the real matcher never sees a draft), so the draft
never holds a token the constraint forbids. Drafting stops where ``grammar_cut`` stops an n-gram draft:
at the grammar's end and before tokens the grammar forces (fast-forward appends those), and after an
end of sequence. The draft is then checked by the target exactly as an n-gram draft is
(``engine.speculative``): a draft is one deterministic proposal per position, for which drawing each
position with plain decoding's own noise is the rejection rule, so the output is plain decoding's.

Rollback needs nothing: the draft tokens the target rejected sit in the draft model's KV past the
prefix of tokens that the sequence really has, which ``_Slot.valid`` finds; the next catch-up
overwrites them. A sequence's draft blocks are released when its request ends (``forget``) or, when
the pool runs short, once it is no longer running. A sequence too long for the draft model, or with
no room left in its pool, gets no draft; its output is unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from guided.errors import ConfigError, ModelLoadError
from guided.kernels.bitmask import unpack_bitmask

from .config import Config
from .loader import load_hf_tokenizer
from .model_runner import ModelRunner
from .sequence import Sequence, SequenceStatus
from .speculative import stops_drafting

logger = logging.getLogger(__name__)

__all__ = ["DraftModel"]

# On CUDA the draft model is loaded before the target, with this share of the GPU for its weights,
# activations and KV pool (the target's share is then measured on what is left).
DRAFT_GPU_FRACTION = 0.1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class _Slot:
    """One sequence's place in the draft model's KV pool: its blocks, the number of its tokens computed
    when it was last drafted for (``base``) and the draft tokens computed after them (``fed``)."""

    __slots__ = ("seq", "blocks", "base", "fed")

    def __init__(self, seq: Sequence):
        self.seq = seq
        self.blocks: list[int] = []
        self.base = 0
        self.fed: list[int] = []

    def valid(self) -> int:
        """How many of the sequence's tokens have their KV in the pool: the ones before ``base``, and the
        fed draft tokens that became the sequence's own (the rest were rejected)."""
        tokens, n = self.seq.token_ids, self.base
        for token in self.fed:
            if n >= len(tokens) or tokens[n] != token:
                break
            n += 1
        return n


class _Row:
    """A sequence being drafted for: its slot, its most tokens, the draft so far, the matcher after each
    draft token and the latest (None: unconstrained), and whether it drafts on."""

    __slots__ = ("slot", "limit", "draft", "states", "state", "open")

    def __init__(self, slot: _Slot, limit: int, constraint):
        self.slot, self.limit, self.state, self.open = slot, limit, constraint, True
        self.draft: list[int] = []
        self.states: list = []


class DraftModel:
    """The draft model of ``speculative`` (its ``model``: a local directory or a hub name), on the
    target's device and dtype, with one sequence per target sequence."""

    def __init__(self, speculative, target: Config, tokenizer, eos_ids: list[int]):
        self.eos_ids = set(eos_ids)
        self.num_text_tokens = len(tokenizer)
        try:
            draft = self._config(speculative, target)
        except ModelLoadError as e:
            raise ModelLoadError(f"speculative draft model: {e}") from e
        _check_tokenizer(draft, tokenizer)
        self.config = draft
        self.runner = ModelRunner(draft, eos_ids, self.num_text_tokens)
        if self.runner.vocab_size < self.num_text_tokens:
            raise ConfigError(f"the draft model {draft.model} has {self.runner.vocab_size} token embeddings, fewer "
                              f"than the target tokenizer's {self.num_text_tokens} tokens")  # fmt: skip
        self.block_size = draft.block_size
        self.max_len = min(draft.max_model_len, self.runner.num_blocks * self.block_size)
        self.free = list(range(self.runner.num_blocks))
        self.slots: dict[int, _Slot] = {}

    @staticmethod
    def _config(speculative, target: Config) -> Config:
        draft = Config(
            model=speculative.model, dtype=target.dtype, device=target.device,
            block_size=target.block_size, max_num_seqs=target.max_num_seqs,
            max_num_batched_tokens=target.max_num_batched_tokens, enable_prefix_caching=False, enforce_eager=True,
            gpu_memory_utilization=DRAFT_GPU_FRACTION, seed=target.seed,
        )  # fmt: skip
        return replace(draft, max_model_len=min(draft.max_model_len, target.max_model_len))

    # ------------------------------------------------------------------ the pool
    def forget(self, seq: Sequence) -> None:
        """Release ``seq``'s blocks (its request ended)."""
        slot = self.slots.pop(seq.seq_id, None)
        if slot is not None:
            self.free.extend(slot.blocks)

    def _room(self, slot: _Slot, length: int) -> bool:
        """Blocks for the first ``length`` positions of ``slot``; when the pool runs short, the blocks of
        sequences no longer running are released first."""
        need = -(-length // self.block_size) - len(slot.blocks)
        if need > len(self.free):
            for other in [s for s in self.slots.values() if s.seq.status is not SequenceStatus.RUNNING]:
                self.forget(other.seq)
        if need > len(self.free):
            return False
        for _ in range(max(need, 0)):
            slot.blocks.append(self.free.pop())
        return True

    # ------------------------------------------------------------------ drafting
    @torch.inference_mode()
    def propose(self, items: list[tuple[Sequence, int]], fast_forward: bool,
                words: int) -> dict[int, tuple[list, list, bool]]:  # fmt: skip
        """Drafts for ``(sequence, most tokens)`` pairs, by sequence id (sequences with an empty draft left
        out): (the draft, the matcher after each of its tokens (None when unconstrained), whether the
        position after it is one plain decoding samples). ``words``: the matchers' bitmask width."""
        rows = []
        for seq, k in items:
            slot = self.slots.get(seq.seq_id)
            if slot is None:
                slot = self.slots[seq.seq_id] = _Slot(seq)
            # positions up to num_tokens + k - 2 are computed: the tokens, then every draft token but the last
            if seq.num_tokens + k - 1 <= self.max_len and self._room(slot, seq.num_tokens + k - 1):
                rows.append(_Row(slot, k, seq.constraint))
        if not rows:
            return {}
        starts = [row.slot.valid() for row in rows]
        logits = self._forward([(row.slot, s, row.slot.seq.token_ids[s:]) for row, s in zip(rows, starts, strict=True)])
        for row in rows:
            row.slot.base, row.slot.fed = row.slot.seq.num_tokens, []
        active = rows
        while True:
            self._pick(active, logits, fast_forward, words)
            active = [row for row in active if row.open and len(row.draft) < row.limit]
            if not active:
                break
            # the token each row just picked is computed, for the next one
            logits = self._forward([(r.slot, r.slot.base + len(r.draft) - 1, r.draft[-1:]) for r in active])
            for row in active:
                row.slot.fed = row.draft[:]
        out = {}
        for row in rows:
            if row.draft:
                ends = row.draft[-1] in self.eos_ids if row.state is None else stops_drafting(row.state, fast_forward)
                out[row.slot.seq.seq_id] = (row.draft, row.states, not ends)
        return out

    def _pick(self, rows: list[_Row], logits: torch.Tensor, fast_forward: bool, words: int) -> None:
        """Each row's next draft token: the draft model's most likely one under the row's constraint. A
        row whose grammar ends or forces tokens next, whose mask or matcher fails, or that picked an end
        of sequence, closes."""
        text = logits[:, : self.num_text_tokens]
        masks = np.zeros((len(rows), words), dtype=np.int32)
        constrained = False
        for i, row in enumerate(rows):
            if row.state is None:
                masks[i] = -1
                continue
            constrained = True
            if stops_drafting(row.state, fast_forward):
                row.open = False
                continue
            try:
                row.state.fill_bitmask(masks, i)
            except Exception:
                logger.exception("request %s: a draft mask failed", row.slot.seq.request_id)
                row.open = False
        if constrained:
            allowed = unpack_bitmask(torch.from_numpy(masks).to(text.device), self.num_text_tokens)
            text = text.masked_fill(~allowed, float("-inf"))
        picked = text.argmax(dim=-1).tolist()
        for row, token in zip(rows, picked, strict=True):
            if not row.open:
                continue
            state = None
            if row.state is not None:
                state = row.state.copy()
                try:
                    ok = state.accept_token(token)
                except Exception:
                    logger.exception("request %s: a draft token failed", row.slot.seq.request_id)
                    ok = False
                if not ok:  # (nothing allowed among the text tokens)
                    row.open = False
                    continue
                row.state = state
            row.draft.append(token)
            row.states.append(state)
            if state is None and token in self.eos_ids:
                row.open = False

    def _forward(self, chunks: list[tuple[_Slot, int, list[int]]]) -> torch.Tensor:
        """One eager forward of ``(slot, first position, tokens)`` chunks: the logits of each chunk's
        last token (float32 ``[chunks, vocab]``)."""
        ids, positions, slots, cu, seq_lens, tables, rows = [], [], [], [0], [], [], []
        bs = self.block_size
        for slot, start, tokens in chunks:
            end = start + len(tokens)
            ids.extend(tokens)
            positions.extend(range(start, end))
            slots.extend(slot.blocks[p // bs] * bs + p % bs for p in range(start, end))
            cu.append(cu[-1] + len(tokens))
            seq_lens.append(end)
            tables.append(slot.blocks)
            rows.append(cu[-1] - 1)
        step = (ids, positions, slots, cu, seq_lens, tables, max(len(t) for *_, t in chunks), None, rows)
        return self.runner.replay(step)


def _check_tokenizer(draft: Config, tokenizer) -> None:
    """A draft model must share the target's tokenizer: the same vocabulary when its directory has a
    tokenizer; otherwise at least as many embeddings as the target's tokens (checked after loading)."""
    if not any((Path(draft.model) / name).is_file() for name in TOKENIZER_FILES):
        logger.warning("the draft model %s has no tokenizer files; it is taken to share the target's", draft.model)
        return
    theirs = load_hf_tokenizer(draft.model)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"the draft model {draft.model} has a tokenizer different from the target's; speculative "
                          "decoding with a draft model needs the target's tokenizer")  # fmt: skip

