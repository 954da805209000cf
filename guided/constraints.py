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

__all__ = ["Constraint", "JsonSchema", "Regex", "Choice", "Grammar", "Tag", "StructuralTag", "Reasoning", "to_constraint"]


class Constraint:
    """Base of constraint specs; ``key`` identifies the language (and options) for caching."""

    __slots__ = ()

    @property
    def key(self) -> tuple:
        raise NotImplementedError


@dataclass(frozen=True)
class JsonSchema(Constraint):
    """Output is a JSON instance of ``schema`` (dict or JSON text), properties in declared order.

    ``strict`` (the default) generates objects closed where the schema leaves
    ``additionalProperties`` unset: no member the schema does not declare (vLLM's and OpenAI's
    strict behaviour). It restricts what is generated only; every output is still an instance of
    the schema. ``strict=False`` keeps the schema's literal meaning (undeclared members allowed).
    An explicit ``additionalProperties: true`` (pydantic's ``dict``, ``extra="allow"``) keeps an
    object open either way.

    ``model`` keeps the pydantic class the schema came from, so outputs parse back into it.
    """

    schema: Any
    strict: bool = True
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


@dataclass(frozen=True)
class Tag:
    """One constrained segment: ``begin``, then text in ``content``'s language, then ``end``.

    ``content``: a ``JsonSchema``, ``Regex`` or ``Choice`` (or what ``to_constraint`` takes: a JSON
    Schema dict, a pydantic model class); None is free text that holds no trigger.
    """

    begin: str
    content: Any = None
    end: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.begin, str) or not self.begin:
            raise ConfigError("a tag's begin is a non-empty string")
        if not isinstance(self.end, str):
            raise ConfigError("a tag's end is a string")
        content = to_constraint(self.content) if not isinstance(self.content, Constraint) else self.content
        if content is not None and not isinstance(content, (JsonSchema, Regex, Choice)):
            raise ConfigError(f"a tag's content is a JSON Schema, a regex or a choice; got {type(content).__name__} "
                              "(context-free grammars inside tags are not supported)")  # fmt: skip
        object.__setattr__(self, "content", content)

    @property
    def key(self) -> tuple:
        return (self.begin, None if self.content is None else self.content.key, self.end)


@dataclass(frozen=True)
class StructuralTag(Constraint):
    """Free text where each trigger opens one of ``tags``: the language ``F (T F)*``, ``F`` free text
    in which no trigger occurs, ``T`` a tag (each tag's ``begin`` starts with a trigger), matched on
    bytes. ``at_least_one``: at least one tag; ``stop_after_first``: nothing after the first tag.
    Compiled by ``guided.structural``; ``triggers`` default to the tags' beginnings."""

    tags: tuple[Tag, ...]
    triggers: tuple[str, ...]
    at_least_one: bool = False
    stop_after_first: bool = False

    def __init__(self, tags, triggers=None, at_least_one: bool = False, stop_after_first: bool = False):
        tags = tuple(t if isinstance(t, Tag) else Tag(**t) for t in tags)
        if not tags:
            raise ConfigError("a structural tag needs at least one tag")
        if triggers is None:  # each tag's begin is its own trigger
            triggers = sorted({t.begin for t in tags})
        if isinstance(triggers, str) or not all(isinstance(x, str) and x for x in triggers) or not triggers:
            raise ConfigError("triggers are a non-empty list of non-empty strings")
        for t in tags:
            if not any(t.begin.startswith(x) for x in triggers):
                raise ConfigError(f"the tag beginning {t.begin!r} starts with none of the triggers {list(triggers)}")
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "triggers", tuple(triggers))
        object.__setattr__(self, "at_least_one", bool(at_least_one))
        object.__setattr__(self, "stop_after_first", bool(stop_after_first))

    @classmethod
    def from_openai(cls, fmt: dict, strict: bool = True) -> StructuralTag:
        """From ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers"}``;
        ``strict``: each schema's as in ``JsonSchema``."""
        structures = fmt.get("structures")
        if not isinstance(structures, list) or not structures:
            raise ConfigError("response_format.structures must be a non-empty list of {begin, schema, end}")
        tags = []
        for i, s in enumerate(structures):
            if not isinstance(s, dict) or not isinstance(s.get("begin"), str) or "schema" not in s:
                raise ConfigError(f"response_format.structures[{i}] must be an object with 'begin', 'schema', 'end'")
            unknown = set(s) - {"begin", "schema", "end"}
            if unknown:
                raise ConfigError(f"response_format.structures[{i}] has unknown fields {sorted(unknown)}")
            tags.append(Tag(s["begin"], JsonSchema(s["schema"], strict=strict), s.get("end", "")))
        triggers = fmt.get("triggers")
        if not isinstance(triggers, list):
            raise ConfigError("response_format.triggers must be a list of strings")
        return cls(tags, triggers)

    @property
    def key(self) -> tuple:
        return ("structural", tuple(t.key for t in self.tags), self.triggers, self.at_least_one,
                self.stop_after_first)  # fmt: skip


@dataclass(frozen=True)
class Reasoning(Constraint):
    """A reasoning model's reply: free reasoning text up to the end-of-reasoning marker ``end``,
    then optional whitespace and ``answer`` (a JSON Schema, Regex, Choice, tool calls; None: free
    text). The reasoning may hold ``start`` (the template or the model opens it) but never ``end``."""

    answer: Any = None
    start: str = "<think>"
    end: str = "</think>"

    def __post_init__(self) -> None:
        if not isinstance(self.end, str) or not self.end or not isinstance(self.start, str):
            raise ConfigError("a reasoning marker is a non-empty string")
        if self.answer is not None and not isinstance(self.answer, Constraint):
            object.__setattr__(self, "answer", to_constraint(self.answer))
        if isinstance(self.answer, (Grammar, Reasoning, StructuralTag)):
            raise ConfigError(f"with a reasoning model, a {type(self.answer).__name__} answer is not supported "
                              "(JSON Schema, regex, choice and tool calls are)")  # fmt: skip

    @property
    def key(self) -> tuple:
        return ("reasoning", self.start, self.end, None if self.answer is None else self.answer.key)


# ``json_object``: any JSON object, open (closing it would leave only ``{}``)
JSON_OBJECT = JsonSchema({"type": "object"}, strict=False)


def to_constraint(value: Any, *, strict: bool = True) -> Constraint | None:
    """Normalise what a user passed as ``response_format`` into a Constraint (None = unconstrained).

    Accepts a Constraint, a pydantic model class, a JSON Schema dict (or boolean), or an OpenAI
    ``response_format`` dict (``{"type": "text" | "json_object" | "json_schema", ...}``, or vLLM's
    ``{"type": "structural_tag", "structures": [...], "triggers": [...]}``). JSON Schemas are
    ``strict`` as in ``JsonSchema`` (objects closed where ``additionalProperties`` is unset; an
    OpenAI ``response_format``'s own ``strict`` flag changes nothing: unset or false, the output is
    exact and closed); ``strict=False`` keeps their literal meaning. A pydantic model is closed
    unless it sets ``extra="allow"`` (whose schema then says ``additionalProperties: true``).
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
    if isinstance(value, dict) and value.get("type") == "structural_tag":
        return StructuralTag.from_openai(value, strict)
    if isinstance(value, dict) and value.get("type") in ("text", "json_object", "json_schema") and (
        "json_schema" in value or set(value) == {"type"}
    ):
        return _from_openai(value, strict)
    if isinstance(value, (dict, bool)):
        return JsonSchema(value, strict=strict)
    raise ConfigError(
        f"cannot use {type(value).__name__} as a constraint: pass a pydantic model class, a JSON Schema "
        "dict, Regex(...), Choice([...]) or Grammar(...)"
    )


def _from_openai(fmt: dict, strict: bool) -> Constraint | None:
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise ConfigError("response_format.json_schema must be an object with a 'schema'")
    return JsonSchema(spec["schema"], strict=strict)
