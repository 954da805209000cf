"""Speculative decoding under a constraint: drafts cut by the grammar, checked in one forward.

Drafts come from prompt lookup (below) or from a draft model (``engine.draft_model``, drafting under
the constraint's masks). After a sequence's tokens of a step are appended, ``propose`` looks up the longest suffix of its
tokens (``prompt_lookup_max`` down to ``prompt_lookup_min`` long) earlier in the prompt and output,
and proposes the up to ``num_speculative_tokens`` tokens that followed it (prompt lookup: no second
model). The draft is cut where the grammar refuses a token (on a copy of the matcher; the real one
never sees a draft) and where the grammar forces tokens (plain decoding would append those, not
sample), so verification never spends a position on a token the constraint forbids.

The next step computes the draft's positions with the sequence's own new tokens, and samples k + 1
rows: the real one, and one per draft prefix (``DraftRow``: the sequence as it would be after the
prefix: its history for penalties, its matcher state for the mask and the budget, its output count
as the sampling offset). Every row is drawn exactly as plain decoding would draw that position (the
same masked logits, seed and offset: the Gumbel noise of that position), so the draft is accepted
while the drawn tokens equal it, and the first token that differs (or the one after a fully
accepted draft) is the next token. The output is therefore token for token that of plain decoding,
greedy or sampled; for a draft that is a single proposal per position this is the rejection rule
(a draft token is kept with the probability the target gives it; a refused one is replaced by a
draw from the rest of the distribution).

Rollback is by construction: rejected tokens never enter the sequence (its ``token_ids``, its
matcher, its block hashes); their KV slots sit past ``num_computed_tokens`` and are overwritten by
the next step. Speculation is per request (``SamplingParams.speculative``) and skipped for a
sequence while the step's budget, the CUDA-graph chunk cap or the KV pool leave no room for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from guided.errors import ConfigError

from .sequence import Sequence

__all__ = ["SpeculativeConfig", "DraftRow", "propose", "grammar_cut", "stops_drafting"]


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """``method`` "ngram" (prompt lookup) or "draft_model" (``model``: a smaller model with the target's
    tokenizer, a local directory or a hub name; ``engine.draft_model``); ``num_speculative_tokens``
    drafted per step at most; the n-gram lengths looked up, longest first."""

    method: str = "ngram"
    num_speculative_tokens: int = 4
    prompt_lookup_max: int = 4
    prompt_lookup_min: int = 1
    model: str | None = None

    @classmethod
    def parse(cls, value) -> SpeculativeConfig | None:
        """From the ``speculative`` setting: None, a dict (vLLM's keys where they fit) or an instance."""
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"speculative must be a dict such as {{'method': 'ngram', 'num_speculative_tokens': 4}}, "
                              f"got {value!r}")  # fmt: skip
        known = {"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "model"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"speculative: unknown keys {unknown} (known: {sorted(known)})")
        method = value.get("method", "draft_model" if value.get("model") is not None else "ngram")
        if method not in ("ngram", "draft_model"):
            raise ConfigError(f"speculative method must be 'ngram' or 'draft_model', got {method!r}")
        if method == "draft_model":
            if not isinstance(value.get("model"), str) or not value["model"]:
                raise ConfigError("speculative method 'draft_model' needs 'model': a local model directory or a hub "
                                  "name of a smaller model with the target's tokenizer")  # fmt: skip
            lookup = sorted({"prompt_lookup_max", "prompt_lookup_min"} & set(value))
            if lookup:
                raise ConfigError(f"speculative {lookup} are prompt lookup's ('ngram'), not the draft model's")
        elif value.get("model") is not None:
            raise ConfigError("speculative 'model' is the draft model's; method 'ngram' drafts without a model")
        config = cls(**{k: value[k] for k in known & set(value)}, **{} if "method" in value else {"method": method})
        for name in ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"):
            n = getattr(config, name)
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
                raise ConfigError(f"speculative {name} must be an integer in [1, 64], got {n!r}")
        if config.prompt_lookup_min > config.prompt_lookup_max:
            raise ConfigError("speculative prompt_lookup_min must not exceed prompt_lookup_max")
        return config


def propose(token_ids: list[int], k: int, longest: int, shortest: int) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the longest suffix of
    ``token_ids`` (``longest`` down to ``shortest`` tokens) found; [] when none recurs."""
    n_tokens = len(token_ids)
    for n in range(min(longest, n_tokens - 1), shortest - 1, -1):
        suffix = token_ids[n_tokens - n :]
        first = suffix[0]
        for start in range(n_tokens - n - 1, -1, -1):  # latest occurrence first
            if token_ids[start] == first and token_ids[start : start + n] == suffix:
                return token_ids[start + n : start + n + k]
    return []


def grammar_cut(matcher, draft: list[int], fast_forward: bool) -> tuple[list[int], list, bool]:
    """(the longest prefix of ``draft`` the grammar takes token by token, the matcher after each kept
    token, whether the position after the kept prefix is one plain decoding samples). A draft stops
    before a position where the grammar forces tokens (with fast-forward, plain decoding appends those
    instead of sampling) or that follows the grammar's end."""
    kept, states = [], []
    state = matcher
    for token in draft:
        if stops_drafting(state, fast_forward):
            break
        nxt = state.copy()
        if not nxt.accept_token(token):
            break
        kept.append(token)
        states.append(nxt)
        state = nxt
    return kept, states, bool(kept) and not stops_drafting(state, fast_forward)


def stops_drafting(state, fast_forward: bool) -> bool:
    """Whether plain decoding samples no token at a position whose matcher is ``state`` (a draft stops
    before it): the grammar ended, or (with fast-forward) forces the tokens next."""
    return state.is_terminated() or bool(fast_forward and state.forced_tokens())


class DraftRow:
    """A sequence as it would be after the first ``i`` tokens of its draft: what sampling, the masks
    and the budget read of it (its tokens, counts, params, seed and the matcher in that state)."""

    __slots__ = ("base", "seq_id", "token_ids", "constraint", "budget", "budget_forced")

    def __init__(self, base: Sequence, prefix: list[int], constraint):
        self.base = base
        self.seq_id = -1 - len(prefix) - base.seq_id * 128  # distinct from every sequence's id and each other
        self.token_ids = base.token_ids + prefix
        self.constraint = constraint
        self.budget = base.budget
        self.budget_forced = False

    def __getattr__(self, name):  # params, seed, index, num_prompt_tokens, request_id, ...
        return getattr(self.base, name)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.base.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.base.num_prompt_tokens :]
