"""Budget steering: a constrained output always ends complete and valid within its token budget.

The room of a sequence is the tokens it may still generate (``max_tokens`` minus those generated, and
what the model length leaves). From a matcher state the *need* is the tokens that end the output for
sure: the grammar's shortest completion spelled in the fewest tokens (``Matcher.shortest_completion``,
memoised per state like masks), plus EOS. The engine keeps ``need <= room`` from the first token:

* Up front, a budget smaller than the need of the start (with the text the grammar forces from its
  start) is refused, naming the need.
* After each step's sampling, a steered row's token is checked: it is kept when the room left after
  it, and after the tokens fast-forward appends at once, still holds the need of the state reached.
  A token that fails is cleared from the row's bitmask and the row is sampled again from the same
  logits with the same seed and offset. The draw is Gumbel-max, so this is the next token in the
  same perturbed order: sampling from the mask intersected with "a completion still fits", exactly
  (greedy rows take the best token that fits). With top-k, top-p or min-p, the filters apply to the
  mask less the refused draws (not less every token that does not fit).
* After ``max_tries`` refused draws the row ends with the shortest completion of its state (which
  fits, by the invariant) and EOS, appended as forced tokens.

A state whose shortest completion the bounded search cannot find counts as not fitting (the
guarantee is kept); a start state without one leaves that sequence unsteered (it may end by length
as without steering), and so does, while it lasts, a state without one that a row entered because
no ending could be found either (a search past its bound). Inside an array of unique items the
ending is one that repeats no item (``UniqueMatcher.shortest_completion``). Rows of the rest of the
batch are never resampled.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from .sampler import SampledTokens
from .sequence import Sequence

__all__ = ["BudgetSteering"]

logger = logging.getLogger(__name__)

MAX_TRIES = 8  # draws refused per row and step before the row is ended by its shortest completion


class BudgetSteering:
    """The budget checks of one engine (``fast_forward``: whether forced runs are appended at once)."""

    def __init__(self, eos_ids: list[int], fast_forward: bool, max_tries: int = MAX_TRIES):
        self.eos_ids = eos_ids  # shared with the engine
        self.fast_forward = fast_forward
        self.max_tries = max_tries
        self.tokens_checked = self.tokens_refused = self.rows_ended = 0  # statistics
        self.steer_s = 0.0  # time spent in steer (checks, resampling, endings)

    # ------------------------------------------------------------------ needs
    @staticmethod
    def need(matcher) -> int | None:
        """Tokens that surely end the output from the matcher's state: its shortest completion spelled,
        then EOS (0 once terminated); None when the bounded search gives up."""
        if matcher.is_terminated():
            return 0
        completion = matcher.shortest_completion()
        return None if completion is None else len(completion.tokens) + 1

    @classmethod
    def start_need(cls, matcher, fast_forward: bool = True) -> tuple[int | None, bytes]:
        """``(tokens, text)`` for a fresh matcher: at most how many tokens a complete output takes (the
        forced start as fast-forward appends it, then ``need``; None: unknown) and the shortest output
        (for messages). The matcher is left as it was."""
        shortest = matcher.shortest_completion()
        n = matcher.accept_tokens(matcher.forced_tokens()) if fast_forward else 0
        try:
            need = cls.need(matcher)
            return (None if need is None else n + need), (b"" if shortest is None else shortest.text)
        finally:
            matcher.rollback(n)

    def fits(self, matcher, token_id: int, room: int) -> bool:
        """Whether ``token_id`` keeps a complete output within ``room`` tokens (it included): the
        token, the forced run fast-forward appends after it, then the need of the state reached."""
        if not matcher.accept_token(token_id):
            return False
        n = 1
        try:
            if self.fast_forward and not matcher.is_terminated():
                n += matcher.accept_tokens(matcher.forced_tokens())
            need = self.need(matcher)
            return need is not None and n + need <= room
        finally:
            matcher.rollback(n)

    def ending(self, matcher) -> list[int] | None:
        """The shortest completion's tokens and an EOS the grammar takes after them, or None."""
        completion = matcher.shortest_completion()
        if completion is None:
            return None
        probe = matcher.copy()
        if probe.accept_tokens(completion.tokens) != len(completion.tokens):
            return None
        eos = next((e for e in self.eos_ids if probe.is_allowed(e)), None)
        return completion.tokens + ([eos] if eos is not None else [])

    # ------------------------------------------------------------------ one step
    def steer(self, sampled: SampledTokens, seqs: list[Sequence], logits: torch.Tensor, bitmask: torch.Tensor,
              rows: list[int], sample, room) -> None:  # fmt: skip
        """Check the steered rows of ``sampled`` (drawn from ``logits`` under ``bitmask`` rows ``rows``,
        one per ``seqs``); resample those whose token does not fit (``sample(seqs, logits, bitmask,
        rows)`` -> SampledTokens), and move the rows still refused after ``max_tries`` draws to
        ``sampled.endings``. ``room(seq)``: the tokens it may still generate. Edits ``bitmask``."""
        start = time.perf_counter()
        try:
            self._steer(sampled, seqs, logits, bitmask, rows, sample, room)
        finally:
            self.steer_s += time.perf_counter() - start

    def _steer(self, sampled, seqs, logits, bitmask, rows, sample, room) -> None:
        where = {seq.seq_id: i for i, seq in enumerate(seqs)}
        at = {seq.seq_id: j for j, seq in enumerate(sampled.seqs)}
        pending = [seq for seq in sampled.seqs if seq.budget and rows[where[seq.seq_id]] >= 0 and self._known(seq)]
        first = {seq.seq_id: (sampled.token_ids[at[seq.seq_id]], sampled.logprobs[at[seq.seq_id]]) for seq in pending}
        words = bitmask.numpy().view(np.uint32)
        for attempt in range(self.max_tries + 1):
            refused = []
            for seq in pending:
                j = at[seq.seq_id]
                token = sampled.token_ids[j]
                self.tokens_checked += 1
                try:
                    if self.fits(seq.constraint, token, room(seq)):
                        continue
                except Exception:  # noqa: BLE001 - a matcher that raises is left to the engine (it ends that row)
                    logger.exception("budget check failed for sequence %s", seq.seq_id)
                    continue
                self.tokens_refused += 1
                seq.budget_forced = True
                row = rows[where[seq.seq_id]]
                if 0 <= token < words.shape[1] * 32:
                    words[row, token >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (token & 31)))
                refused.append(seq)
            if not refused or attempt == self.max_tries:
                break
            idx = [where[s.seq_id] for s in refused]
            again = sample(refused, logits[torch.tensor(idx, dtype=torch.long, device=logits.device)], bitmask,
                           [rows[i] for i in idx])  # fmt: skip
            for seq, token, lp in zip(again.seqs, again.token_ids, again.logprobs, strict=True):
                j = at[seq.seq_id]
                sampled.token_ids[j], sampled.logprobs[j] = token, lp
            failed = {s.seq_id for s, _ in again.failed}
            if failed:  # sampling this row failed: it ends with the error, as in the first draw
                sampled.failed += again.failed
                _drop(sampled, failed)
                at = {seq.seq_id: j for j, seq in enumerate(sampled.seqs)}
            pending = [s for s in refused if s.seq_id not in failed]
        endings = [(seq, ending) for seq in refused if (ending := self._ending(seq)) is not None]
        ended = {seq.seq_id for seq, _ in endings}
        for seq in refused:  # no ending found (never, by the invariant, unless a search gave up):
            if seq.seq_id not in ended:  # its first draw, unsteered
                j = at[seq.seq_id]
                sampled.token_ids[j], sampled.logprobs[j] = first[seq.seq_id]
        _drop(sampled, ended)
        sampled.endings += endings
        self.rows_ended += len(endings)

    def _known(self, seq: Sequence) -> bool:
        """Whether the need of ``seq``'s state is known: where it is not (a row that entered such a
        state when no ending could be found, a search past its bound), no draw can be
        steered, and each would be refused: the row samples as without steering until it is known."""
        try:
            return self.need(seq.constraint) is not None
        except Exception:  # noqa: BLE001 - as in steer: the engine reports a matcher that raises
            return False

    def _ending(self, seq: Sequence) -> list[int] | None:
        try:
            return self.ending(seq.constraint)
        except Exception:  # noqa: BLE001 - as in steer: the row keeps its draw
            logger.exception("budget ending failed for sequence %s", seq.seq_id)
            return None


def _drop(sampled: SampledTokens, ids: set[int]) -> None:
    keep = [j for j, s in enumerate(sampled.seqs) if s.seq_id not in ids]
    sampled.seqs = [sampled.seqs[j] for j in keep]
    sampled.token_ids = [sampled.token_ids[j] for j in keep]
    sampled.logprobs = [sampled.logprobs[j] for j in keep]
