"""SchemaOptions: how a JSON Schema is lowered (strictness, whitespace, depth and size bounds)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from guided.errors import ConfigError

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
    max_depth: unroll recursive ``$ref`` cycles to this many levels; None (default) makes a
        recursive schema a ``SchemaError``.
    any_depth: nesting levels of arrays/objects allowed inside a schema-free value (``true``, ``{}``,
        unset ``additionalProperties``/``items``).
    max_nodes: lowering budget (schema nodes visited); exceeding it raises ``LimitError``.
    timeout_s: wall-clock bound of the lowering; exceeding it raises ``CompileTimeoutError``.
    """

    strict: bool = False
    lenient: bool = False
    whitespace: str = "flexible"
    max_ws: int = 8
    max_depth: int | None = None
    any_depth: int = 10
    max_nodes: int = 100_000
    timeout_s: float = 10.0

    def __post_init__(self):
        if self.whitespace not in ("flexible", "compact"):
            raise ConfigError(f"whitespace must be 'flexible' or 'compact', not {self.whitespace!r}")
        if self.max_ws < 0 or self.any_depth < 0 or self.max_nodes <= 0 or self.timeout_s <= 0:
            raise ConfigError("max_ws and any_depth must be >= 0; max_nodes and timeout_s > 0")
        if self.max_depth is not None and self.max_depth < 0:
            raise ConfigError("max_depth must be None or >= 0")

    def key(self) -> dict:
        return asdict(self)
