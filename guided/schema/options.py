"""SchemaOptions: how a JSON Schema is lowered (strictness, whitespace, depth and size bounds)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache

from guided.errors import ConfigError
from guided.limits import Limits

__all__ = ["SchemaOptions"]


@dataclass(slots=True)
class SchemaOptions:
    """Options of the JSON Schema compiler.

    strict: forbid properties a schema does not list when it leaves ``additionalProperties`` unset
        (OpenAI's ``strict: true``); by default the spec's ``true`` applies.
    lenient: relax keywords that cannot be enforced exactly, with a warning naming each, instead of
        raising ``SchemaError``.
    whitespace: "flexible" (up to ``max_ws`` whitespace characters around ``{ } [ ] , :``) or
        "compact" (none). Never before or after the root value.
    max_depth: unroll recursive ``$ref`` cycles to this many levels (a regular language); None
        (default) compiles them exactly to a context-free grammar.
    any_depth: bound the nesting of arrays/objects inside a schema-free value (``true``, ``{}``,
        unset ``additionalProperties``/``items``) to this many levels (a regular language); None
        (default) lets them nest without bound (a context-free grammar).
    max_nodes: lowering budget (schema nodes visited); exceeding it raises ``LimitError``.
    timeout_s: wall-clock bound of the lowering; exceeding it raises ``CompileTimeoutError``.
    limits: size, depth and count bounds checked on the schema's JSON before lowering (``Limits``).
    key_order: "declared" (default: properties in declared order, or required-first; keys are
        forced where the order fixes them) or "any" (any order of up to ``MAX_PERMUTED`` declared
        properties, other properties anywhere; see ``guided.schema.key_order``).
    """

    strict: bool = False
    lenient: bool = False
    whitespace: str = "flexible"
    max_ws: int = 8
    max_depth: int | None = None
    any_depth: int | None = None
    max_nodes: int = 100_000
    timeout_s: float = 10.0
    limits: Limits = field(default_factory=Limits)
    key_order: str = "declared"

    def __post_init__(self):
        if self.whitespace not in ("flexible", "compact"):
            raise ConfigError(f"whitespace must be 'flexible' or 'compact', not {self.whitespace!r}")
        if self.key_order not in ("declared", "any"):
            raise ConfigError(f"key_order must be 'declared' or 'any', not {self.key_order!r}")
        if self.max_ws < 0 or (self.any_depth or 0) < 0 or self.max_nodes <= 0 or self.timeout_s <= 0:
            raise ConfigError("max_ws and any_depth must be >= 0; max_nodes and timeout_s > 0")
        if self.max_depth is not None and self.max_depth < 0:
            raise ConfigError("max_depth must be None or >= 0")

    def key(self) -> dict:
        """The options as plain values (``dataclasses.asdict``, which walks every field of ``limits``
        again at each call: its dict is built once per ``Limits``)."""
        out = {name: getattr(self, name) for name in _FIELDS}
        out["limits"] = dict(_limits_key(self.limits))  # a copy: the cached one stays as built
        return out

    def values(self) -> tuple:
        """The fields' values, as a hashable key (``limits`` is frozen)."""
        return tuple(getattr(self, name) for name in _FIELDS)


_FIELDS = tuple(f.name for f in fields(SchemaOptions))


@lru_cache(maxsize=64)
def _limits_key(limits: Limits) -> dict:
    return asdict(limits)
