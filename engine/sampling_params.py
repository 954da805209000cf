"""SamplingParams: the per-request decoding options, each checked with a clear error."""

from __future__ import annotations

from dataclasses import dataclass, field

from guided.errors import ConfigError


@dataclass(slots=True)
class SamplingParams:
    """How one request is decoded.

    Parameters
    ----------
    temperature : float
        0 means greedy (argmax); otherwise logits are divided by it.
    top_p, top_k, min_p : float, int, float
        Nucleus mass (1 = off), number of top tokens kept (0 or -1 = off), minimum probability
        relative to the most likely token (0 = off).
    repetition_penalty : float
        CTRL-style penalty (> 1 discourages) on tokens of the prompt and the output; 1 = off.
    frequency_penalty, presence_penalty : float
        OpenAI-style penalties in [-2, 2] on output tokens (per occurrence / once).
    seed : int, optional
        Seed of this request's random stream; the same seed gives the same tokens whatever the batch.
    n : int
        Number of completions of the prompt.
    max_tokens : int
        Most tokens generated per completion.
    min_tokens : int
        EOS and stop token ids are masked until this many tokens were generated.
    stop : str or list of str
        Strings that end the completion (not included in the text unless ``include_stop_str_in_output``).
    stop_token_ids : list of int
        Token ids that end the completion (kept in ``token_ids``).
    ignore_eos : bool
        Keep generating past EOS (until ``max_tokens`` or a stop).
    logprobs : int, optional
        None: no logprobs; 0: the sampled token's logprob; k > 0: also the top-k alternatives.
    skip_special_tokens : bool
        Leave special tokens out of the text.
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
        _number("temperature", self.temperature, 0.0, None)
        _number("top_p", self.top_p, 0.0, 1.0)
        if self.top_p == 0.0:
            raise ConfigError("top_p must be in (0, 1], got 0")
        _integer("top_k", self.top_k, -1)
        if self.top_k == -1:
            self.top_k = 0
        _number("min_p", self.min_p, 0.0, 1.0)
        if self.seed is not None:
            _integer("seed", self.seed, 0)
        if self.logprobs is not None:
            _integer("logprobs", self.logprobs, 0)
            if self.logprobs > 20:
                raise ConfigError(f"logprobs must be at most 20, got {self.logprobs}")

    def _check_penalties(self) -> None:
        _number("repetition_penalty", self.repetition_penalty, 0.0, None)
        if self.repetition_penalty == 0.0:
            raise ConfigError("repetition_penalty must be > 0, got 0")
        _number("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _number("presence_penalty", self.presence_penalty, -2.0, 2.0)

    def _check_lengths(self) -> None:
        _integer("n", self.n, 1)
        _integer("max_tokens", self.max_tokens, 1)
        _integer("min_tokens", self.min_tokens, 0)
        if self.min_tokens > self.max_tokens:
            raise ConfigError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")

    def _check_stops(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise ConfigError(f"stop must be non-empty strings, got {s!r}")
        self.stop_token_ids = list(self.stop_token_ids or [])
        for t in self.stop_token_ids:
            _integer("stop_token_ids[]", t, 0)


def _number(name: str, value, low: float | None, high: float | None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        raise ConfigError(f"{name} must be in {bounds}, got {value}")


def _integer(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")
