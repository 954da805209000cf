"""Constraint specs: what a request may ask its output to be.

Every form a user may pass (a pydantic model class, a JSON Schema dict or string, ``Regex(...)``,
``Choice([...])``, ``Grammar(...)``, OpenAI-style ``response_format`` dicts) is normalised by
``to_constraint`` into one small frozen spec with a stable ``key`` — the cache key of its compiled
grammar. Specs are cheap to build and hash; compiling them is ``guided.compile_service``'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from guided.errors import ConfigError

__all__ = ["Constraint", "JsonSchema", "Regex", "Choice", "Grammar", "to_constraint"]


class Constraint:
    """Base of constraint specs; ``key`` identifies the language (and options) for caching."""

    __slots__ = ()

    @property
    def key(self) -> tuple:
        raise NotImplementedError


@dataclass(frozen=True)
class JsonSchema(Constraint):
    """Output is a JSON instance of ``schema`` (dict or JSON text), properties in declared order.

    ``model`` keeps the pydantic class the schema came from, so outputs parse back into it.
    """

    schema: Any
    strict: bool = False
    lenient: bool = False
    whitespace: Literal["flexible", "compact"] = "flexible"
    model: Any = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.schema, str):
            try:
                object.__setattr__(self, "schema", json.loads(self.schema))
            except json.JSONDecodeError as e:
                raise ConfigError(f"the JSON Schema is not valid JSON: {e}") from e
        if not isinstance(self.schema, (dict, bool)):
            raise ConfigError(f"a JSON Schema is an object or a boolean, got {type(self.schema).__name__}")
        if self.whitespace not in ("flexible", "compact"):
            raise ConfigError(f"whitespace must be 'flexible' or 'compact', got {self.whitespace!r}")

    @property
    def key(self) -> tuple:
        canonical = json.dumps(self.schema, sort_keys=False, separators=(",", ":"), ensure_ascii=False)
        return ("json", canonical, self.strict, self.lenient, self.whitespace)


@dataclass(frozen=True)
class Regex(Constraint):
    """Output fully matches the regex ``pattern`` (ECMA-262 / Python syntax, no lookaround)."""

    pattern: str

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise ConfigError(f"a regex is a string, got {type(self.pattern).__name__}")

    @property
    def key(self) -> tuple:
        return ("regex", self.pattern)


@dataclass(frozen=True)
class Choice(Constraint):
    """Output is exactly one of ``options``."""

    options: tuple[str, ...]

    def __init__(self, options):
        if isinstance(options, str) or not all(isinstance(o, str) for o in options):
            raise ConfigError("choice takes a list of strings")
        if not options:
            raise ConfigError("choice needs at least one option")
        object.__setattr__(self, "options", tuple(options))

    @property
    def key(self) -> tuple:
        return ("choice", self.options)


@dataclass(frozen=True)
class Grammar(Constraint):
    """Output is a sentence of a context-free grammar in Lark or GBNF syntax.

    ``syntax="auto"`` takes GBNF when the text defines rules with ``::=``, Lark otherwise.
    ``import_paths``: folders searched for a Lark grammar's relative ``%import`` (``%import .csv.start``);
    ``Grammar.from_file`` sets it to the file's folder.
    """

    text: str
    syntax: Literal["auto", "lark", "gbnf"] = "auto"
    import_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ConfigError("a grammar is a non-empty string")
        if self.syntax not in ("auto", "lark", "gbnf"):
            raise ConfigError(f"grammar syntax must be 'lark', 'gbnf' or 'auto', got {self.syntax!r}")
        if self.syntax == "auto":
            object.__setattr__(self, "syntax", "gbnf" if "::=" in self.text else "lark")
        if isinstance(self.import_paths, str) or not all(isinstance(p, str) for p in self.import_paths):
            raise ConfigError(f"import_paths is a sequence of folder paths, got {self.import_paths!r}")
        object.__setattr__(self, "import_paths", tuple(self.import_paths))
        if self.import_paths and self.syntax != "lark":
            raise ConfigError("import_paths apply to Lark grammars only (GBNF has no %import)")

    @classmethod
    def from_file(cls, path, syntax: Literal["auto", "lark", "gbnf"] = "auto") -> Grammar:
        """The grammar in file ``path`` (``.gbnf``: GBNF, ``.lark``: Lark, else by its text); a Lark
        grammar's relative ``%import``s are read from the file's folder."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if syntax == "auto" and path.suffix in (".gbnf", ".lark"):
            syntax = path.suffix[1:]
        grammar = cls(text, syntax)
        return replace(grammar, import_paths=(str(path.resolve().parent),)) if grammar.syntax == "lark" else grammar

    @property
    def key(self) -> tuple:
        return ("grammar", self.syntax, self.text, self.import_paths)


def to_constraint(value: Any, *, strict: bool = False) -> Constraint | None:
    """Normalise what a user passed as ``response_format`` into a Constraint (None = unconstrained).

    Accepts a Constraint, a pydantic model class, a JSON Schema dict (or boolean), or an OpenAI
    ``response_format`` dict (``{"type": "text" | "json_object" | "json_schema", ...}``). A pydantic
    model is compiled strict (no properties beyond its fields) unless it sets ``extra="allow"``.
    """
    if value is None or isinstance(value, Constraint):
        return value
    if isinstance(value, type) and hasattr(value, "model_json_schema"):
        # lazy: constraints stay light; the schema compiler loads when a model is given
        from guided.schema.pydantic_models import json_schema_for

        # A model that does not allow extra fields should not be generated with them: strict unless
        # the model says extra="allow" (OpenAI's parse() sends strict schemas for models too).
        extra = getattr(value, "model_config", {}).get("extra")
        return JsonSchema(json_schema_for(value), strict=strict or extra != "allow", model=value)
    if isinstance(value, dict) and value.get("type") in ("text", "json_object", "json_schema") and (
        "json_schema" in value or set(value) == {"type"}
    ):
        return _from_openai(value)
    if isinstance(value, (dict, bool)):
        return JsonSchema(value, strict=strict)
    raise ConfigError(
        f"cannot use {type(value).__name__} as a constraint: pass a pydantic model class, a JSON Schema "
        "dict, Regex(...), Choice([...]) or Grammar(...)"
    )


def _from_openai(fmt: dict) -> Constraint | None:
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonSchema({"type": "object"})
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise ConfigError("response_format.json_schema must be an object with a 'schema'")
    return JsonSchema(spec["schema"], strict=bool(spec.get("strict", False)))
