"""SamplingParams: the per-request decoding options, each checked with a clear error."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from guided.errors import ConfigError

logger = logging.getLogger(__name__)

# Ranges the sampler can honour exactly in float32 (1 / temperature, logits * penalty stay finite).
MAX_TEMPERATURE = 1e4
MIN_TEMPERATURE = 1e-2  # smaller positive temperatures are clamped up to this, with a warning
MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 1e-4, 1e4
MAX_LOGPROBS = 20


@dataclass(slots=True)
class SamplingParams:
    """How one request is decoded.

    Parameters
    ----------
    temperature : float
        0 means greedy (argmax); otherwise logits are divided by it. In [0, 1e4]; values in
        (0, 0.01) are raised to 0.01 (with a warning), as vLLM does.
    top_p, top_k, min_p : float, int, float
        Nucleus mass in (0, 1] (1 = off), number of top tokens kept (0 or -1 = off; any value past
        the vocabulary keeps all), minimum probability relative to the most likely token (0 = off).
    repetition_penalty : float
        CTRL-style penalty (> 1 discourages) on tokens of the prompt and the output; 1 = off; in
        [1e-4, 1e4].
    frequency_penalty, presence_penalty : float
        OpenAI-style penalties in [-2, 2] on output tokens (per occurrence / once).
    seed : int, optional
        Seed of this request's random stream; the same seed gives the same tokens whatever the batch.
        Any 64-bit integer, signed or not.
    n : int
        Number of completions of the prompt (at most the engine's ``max_num_seqs``).
    max_tokens : int
        Most tokens generated per completion.
    min_tokens : int
        EOS and stop token ids are masked until this many tokens were generated.
    stop : str or list of str
        Strings that end the completion (not included in the text unless ``include_stop_str_in_output``).
    stop_token_ids : list of int
        Token ids that end the completion (kept in ``token_ids``); each inside the vocabulary.
    ignore_eos : bool
        Keep generating past EOS (until ``max_tokens`` or a stop).
    logprobs : int, optional
        None: no logprobs; 0: the sampled token's logprob; k in [1, 20]: also the top-k alternatives.
    skip_special_tokens : bool
        Leave special tokens out of the text.
    logit_bias : dict of int to float, optional
        Added to the token's logit before sampling (OpenAI's ``logit_bias``): -100 all but bans a
        token, 100 all but forces it; values in [-100, 100]. A constraint's mask still applies after.
    budget_aware : bool
        Under a constraint, end the output complete and valid within ``max_tokens``: a budget too
        small for the shortest complete output is refused up front, and near the end only tokens
        after which a completion still fits are sampled (``CompletionOutput.budget_forced`` says
        when that steered the end). False: the output may be cut by ``max_tokens``.
    max_reasoning_tokens : int, optional
        A reasoning model's budget for its reasoning: once this many tokens were generated without
        the end-of-reasoning marker (``reasoning_end_ids``), the marker is appended (forced).
    reasoning_end_ids : list of int, optional
        The token ids of the end-of-reasoning marker (``</think>``), for ``max_reasoning_tokens``.
    speculative : bool
        Let the engine's speculative decoding draft for this request (when it is on; the output is
        the same either way). False: plain decoding. Requests with ``max_reasoning_tokens`` never draft.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    n: int = 1
    max_tokens: int = 16
    min_tokens: int = 0
    stop: list[str] | str | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logit_bias: dict[int, float] | None = None
    budget_aware: bool = True
    max_reasoning_tokens: int | None = None
    reasoning_end_ids: list[int] | None = None
    speculative: bool = True

    def __post_init__(self) -> None:
        self._check_sampling()
        self._check_penalties()
        self._check_lengths()
        self._check_stops()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

    def _check_sampling(self) -> None:
        _number("temperature", self.temperature, 0.0, MAX_TEMPERATURE)
        if 0.0 < self.temperature < MIN_TEMPERATURE:
            # 1 / temperature overflows float32 logits far below this; vLLM clamps the same way
            logger.warning("temperature %g is below %g; using %g", self.temperature, MIN_TEMPERATURE,
                           MIN_TEMPERATURE)  # fmt: skip
            self.temperature = MIN_TEMPERATURE
        _number("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _integer("top_k", self.top_k, -1)
        if self.top_k == -1:
            self.top_k = 0
        _number("min_p", self.min_p, 0.0, 1.0)
        if self.seed is not None:
            _integer("seed", self.seed, -(2**63), 2**64 - 1)
        if self.logprobs is not None:
            _integer("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise ConfigError(f"logit_bias must map token ids to numbers, got {self.logit_bias!r}", "logit_bias")
            for token, bias in self.logit_bias.items():
                _integer("logit_bias key", token, 0)
                _number("logit_bias value", bias, -100.0, 100.0)
            self.logit_bias = {int(t): float(b) for t, b in self.logit_bias.items() if b != 0} or None

    def _check_penalties(self) -> None:
        _number("repetition_penalty", self.repetition_penalty, MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY)
        _number("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _number("presence_penalty", self.presence_penalty, -2.0, 2.0)

    def _check_lengths(self) -> None:
        _integer("n", self.n, 1)
        _integer("max_tokens", self.max_tokens, 1)
        _integer("min_tokens", self.min_tokens, 0)
        if self.max_reasoning_tokens is not None:
            _integer("max_reasoning_tokens", self.max_reasoning_tokens, 0)
            if not self.reasoning_end_ids:
                raise ConfigError("max_reasoning_tokens needs the end-of-reasoning marker's token ids "
                                  "(reasoning_end_ids; the server's reasoning parser sets them)", "max_reasoning_tokens")  # fmt: skip
        if self.min_tokens > self.max_tokens:
            raise ConfigError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})",
                              "min_tokens")  # fmt: skip

    def _check_stops(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise ConfigError(f"stop must be non-empty strings, got {s!r}", "stop")
        self.stop_token_ids = list(self.stop_token_ids or [])
        for t in self.stop_token_ids:
            _integer("stop_token_ids[]", t, 0)

    def check_for_engine(self, vocab_size: int, max_num_seqs: int) -> None:
        """What only the engine knows: token ids inside its vocabulary, ``n`` within one batch."""
        for t in self.stop_token_ids:
            _integer("stop_token_ids[]", t, 0, vocab_size - 1)
        for t in self.logit_bias or ():
            _integer("logit_bias key", t, 0, vocab_size - 1)
        if self.logprobs is not None:
            _integer("logprobs", self.logprobs, 0, vocab_size)
        if self.n > max_num_seqs:
            raise ConfigError(f"n must be at most max_num_seqs ({max_num_seqs}): the n completions of a "
                              f"prompt run in one batch; got {self.n}", "n")  # fmt: skip


def _field(name: str) -> str:
    return name.removesuffix("[]").removesuffix(" key").removesuffix(" value")


def _number(name: str, value, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{name} must be a number, got {value!r}", _field(name))
    if value < low or value > high or (low_open and value == low):
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        raise ConfigError(f"{name} must be in {bounds}, got {value}", _field(name))


def _integer(name: str, value, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}", _field(name))
    if value < low or (high is not None and value > high):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ConfigError(f"{name} must be {'in ' if high is not None else ''}{bounds}, got {value}",
                          _field(name))  # fmt: skip
