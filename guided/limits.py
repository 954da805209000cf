"""Limits: every size, count and time bound on untrusted input, in one flat, checked dataclass.

A request that exceeds a limit fails alone with ``LimitError`` (a 400 or 413 from the server) whose
message names the limit (its field name here) and where the input exceeded it (a JSON pointer into
the schema, or the request field). Defaults admit every MaskBench schema; all are configurable.

``check_schema(schema, limits)`` is the pre-pass the JSON Schema compiler runs before lowering: an
iterative walk (deep nesting cannot overflow the stack) over the schema's JSON.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from guided.errors import ConfigError, LimitError

__all__ = ["Limits", "check_schema", "check_text", "LIMIT_DOCS"]

# The keywords whose integer value counts characters, items or properties.
LOWER_COUNTS = frozenset({"minLength", "minItems", "minProperties", "minContains"})
UPPER_COUNTS = frozenset({"maxLength", "maxItems", "maxProperties", "maxContains"})
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})


@dataclass(slots=True, frozen=True)
class Limits:
    """Bounds on constraints and requests. Every field is a positive number.

    Constraints (any way in): ``schema_bytes``, ``schema_nodes``, ``schema_depth``, ``enum_values``,
    ``min_count``, ``max_count``, ``grammar_bytes``, ``regex_bytes``, ``choice_options``,
    ``compile_timeout_s``, ``automaton_states``, ``mask_cache_bytes``.
    Server requests: ``body_bytes``, ``max_tokens``, ``n``, ``tools``, ``stop_strings``, ``queue_len``.
    """

    schema_bytes: int = 4 << 20
    schema_nodes: int = 200_000
    schema_depth: int = 64
    enum_values: int = 10_000
    min_count: int = 100_000
    max_count: int = 2**63 - 1
    grammar_bytes: int = 1 << 20
    regex_bytes: int = 64 << 10
    choice_options: int = 10_000
    compile_timeout_s: float = 10.0
    automaton_states: int = 500_000
    mask_cache_bytes: int = 256 << 20
    body_bytes: int = 8 << 20
    max_tokens: int = 32_768
    n: int = 16
    tools: int = 128
    stop_strings: int = 16
    queue_len: int = 256

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            kind = float if f.type == "float" else int
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or (kind is int and not isinstance(value, int))
            ):
                raise ConfigError(f"Limits.{f.name} must be a positive {kind.__name__}, got {value!r}")
            if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
                raise ConfigError(f"Limits.{f.name} must be positive and finite, got {value!r}")

    def key(self) -> dict:
        return asdict(self)

    def exceeded(self, name: str, value, where: str) -> LimitError:
        """The error for ``value`` over the limit ``name`` at ``where`` (a JSON pointer or a field)."""
        return LimitError(
            f"{name} limit exceeded at {where}: {value} > {getattr(self, name)} (Limits.{name})"
        )


LIMIT_DOCS = {
    "schema_bytes": "JSON Schema size (bytes of compact JSON, estimated while walking it)",
    "schema_nodes": "JSON values in a schema (objects, arrays, scalars)",
    "schema_depth": "nesting of objects/arrays in a schema's JSON",
    "enum_values": "values of one `enum`",
    "min_count": "value of minLength/minItems/minProperties/minContains",
    "max_count": "value of maxLength/maxItems/maxProperties/maxContains",
    "grammar_bytes": "Lark/GBNF grammar text (bytes)",
    "regex_bytes": "regex text, also each schema `pattern` (bytes)",
    "choice_options": "options of a choice constraint",
    "compile_timeout_s": "wall-clock bound of one constraint compile (s)",
    "automaton_states": "DFA states per compiled grammar",
    "mask_cache_bytes": "cached token masks per compiled grammar (bytes)",
    "body_bytes": "HTTP request body (bytes; 413 past it)",
    "max_tokens": "max_tokens / max_completion_tokens of a request",
    "n": "completions per request (`n`)",
    "tools": "tools in one chat request",
    "stop_strings": "stop strings in one request",
    "queue_len": "requests waiting beyond the engine's batch (503 past it)",
}


def check_text(limits: Limits, name: str, text: str | bytes, where: str) -> None:
    """``LimitError`` when ``text`` is longer (in UTF-8 bytes) than the limit ``name``."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > getattr(limits, name):
        raise limits.exceeded(name, f"{size} bytes", where)


def check_schema(schema, limits: Limits) -> None:
    """Check a schema's JSON against the limits before it is lowered; raises ``LimitError``.

    Walks every JSON value once, iteratively: nesting depth, value count, size, ``enum`` length,
    counting keywords' magnitudes and ``pattern`` sizes, each reported with its JSON pointer (spelled
    only for the error: a value's place is kept as its parent's and its key, ``_pointer``).
    """
    stack = [(schema, None, 1, False)]  # (value, place: None or (parent's place, key), depth, inside data)
    nodes = size = 0
    while stack:
        value, place, depth, data = stack.pop()
        nodes += 1
        if depth > limits.schema_depth:
            raise limits.exceeded("schema_depth", depth, _pointer(place))
        if nodes > limits.schema_nodes:
            raise limits.exceeded("schema_nodes", nodes, _pointer(place))
        if isinstance(value, dict):
            size += 2
            for key, item in value.items():
                key = str(key)
                size += len(key) + 4
                if not data:
                    _check_keyword(limits, key, item, place)
                stack.append((item, (place, key), depth + 1, data or key in DATA_KEYWORDS))
        elif isinstance(value, list):
            size += 2
            stack.extend((item, (place, i), depth + 1, data) for i, item in enumerate(value))
        else:
            size += len(value) + 2 if isinstance(value, str) else 8
        if size > limits.schema_bytes:
            raise limits.exceeded("schema_bytes", f"more than {size} bytes", _pointer(place))


def _pointer(place) -> str:
    """The JSON pointer of a place of ``check_schema``'s walk (None: the root, "#")."""
    parts = []
    while place is not None:
        place, key = place
        parts.append(str(key) if isinstance(key, int) else _escape(key))
    return "/".join(["#", *reversed(parts)])


def _check_keyword(limits: Limits, key: str, value, parent) -> None:
    if key == "enum" and isinstance(value, list) and len(value) > limits.enum_values:
        raise limits.exceeded("enum_values", len(value), _pointer((parent, key)))
    if key == "pattern" and isinstance(value, str):
        _check_regex(limits, value, (parent, key))
    if key == "patternProperties" and isinstance(value, dict):
        for regex in value:
            _check_regex(limits, str(regex), ((parent, key), str(regex)))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if key in LOWER_COUNTS and value > limits.min_count:
        raise limits.exceeded("min_count", value, _pointer((parent, key)))
    if key in UPPER_COUNTS and value > limits.max_count:
        raise limits.exceeded("max_count", value, _pointer((parent, key)))


def _check_regex(limits: Limits, regex: str, place) -> None:
    """``check_text`` of a pattern, its pointer spelled only for the error."""
    if len(regex) * 4 > limits.regex_bytes:  # (a character is at most 4 bytes: else nothing to count)
        check_text(limits, "regex_bytes", regex, _pointer(place))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
