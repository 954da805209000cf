"""Where ``uniqueItems`` holds, for the run-time check that enforces it (``unique_runtime``).

"No two items equal" is not a context-free language unless the items come from a small finite set
(``arrays``: exact in the grammar). Otherwise the grammar accepts the arrays without it and the
matcher refuses, token by token, any item equal (as a JSON value) to an earlier one. That is exact
only where uniqueness is decided by the place in the instance, so this module works out, for each
place, which schemas apply there, as a formula over the schema objects:

* a leaf ``("D", key)``: one schema's own keywords (its in-place applicators expanded beside it);
* ``("A", parts)``: all of them apply (``allOf``, ``$ref``, a key matching several patterns);
* ``("O", parts)``: one of them applies, which one is not known from the place (``anyOf``,
  ``oneOf``, ``then``/``else``, ``dependentSchemas``);
* ``T`` (anything) and ``F`` (nothing).

``demand(formula)`` says whether an array there must have unique items: ``Y`` in every way the
place can be valid, ``N`` in none, ``0`` when no array is valid there, and ``X`` (mixed: one branch
of an ``anyOf`` requires it, another accepts the same array without it). The compile walks every
place the schema reaches (declared names, a conservative "any other name", each tuple index and
"any other index") and refuses a schema with a mixed place, with ``uniqueItems`` under ``not``,
``if`` or ``contains`` (the grammar takes complements there), or with items whose prefixes could
all end as duplicates (a dead end for the generation): items must be strings (``minLength`` at
most, or a pattern/format open after every prefix), numbers, integers, any value, objects that take
one more member with a fresh name after any prefix (additional properties of any value, no
``maxProperties``/``propertyNames``/``patternProperties``), closed objects whose declared members
are all of those open kinds ("closed": decided where the last member's value ends, which could
still go on), a mix of those under ``anyOf``/``oneOf``,
or a small finite set the grammar enforces itself; or strings that may run out (``maxLength``,
``uuid``, ``^(a|b)$``, beside the open kinds: "bounded"), where the matcher searches the grammar for
an ending no earlier item has before it lets a string item go on or a new item begin. Undeclared member names are walked once per set of
patterns they can match, so uniqueness under ``patternProperties`` alone is not a mixed place.
"""

from __future__ import annotations

import re
from functools import lru_cache

from guided.errors import GrammarError, LimitError, SchemaError
from guided.grammar import parse_regex
from guided.grammar.languages import to_dfa
from guided.grammar.regex_ast import any_char, any_string, intersect, repeat
from guided.schema.facts import json_value_key
from guided.schema.formats import format_node
from guided.schema.key_order import closes_by_default, closing_names
from guided.schema.keywords import ANNOTATIONS, OLD_DRAFTS
from guided.schema.resolver import SchemaResolver

__all__ = ["UniquePlan", "PlanError", "finite_values", "mentions_unique", "T", "F"]

T, F = ("T",), ("F",)
MAX_PLACES = 4_000  # formulas the compile-time walk may visit
MAX_UNIQUE_VALUES = 64
MAX_PATTERN_SETS_LOG2 = 4  # undeclared names are checked per set of patterns they match, up to 2^4 sets
_DATA = frozenset({"enum", "const", "default", "examples", "example"})
_NOTES = ANNOTATIONS | {"example", "$schema", "$id", "id", "$anchor", "$defs", "definitions", "deprecated",
                        "readOnly", "writeOnly", "markdownDescription", "format_hint", "$comment"}  # fmt: skip
_IN_PLACE = frozenset({"$ref", "allOf", "anyOf", "oneOf", "if", "then", "else", "not", "dependentSchemas",
                       "dependencies", "dependentRequired"})  # fmt: skip
_ARRAY_KEYS = frozenset({"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
                         "contains", "minContains", "maxContains", "unevaluatedItems"})  # fmt: skip
_OBJECT_KEYS = frozenset({"properties", "patternProperties", "additionalProperties", "required",
                          "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties"})  # fmt: skip


class PlanError(SchemaError):
    """uniqueItems cannot be enforced exactly at this place; ``path`` points at the schema (the
    uniqueItems in question, where one is known), ``reason`` says why and names the instance place."""

    def __init__(self, reason: str, path: str = "#"):
        super().__init__(reason, path)
        self.reason = reason


def _and(parts) -> tuple:
    out = set()
    for p in parts:
        if p == T:
            continue
        if p == F:
            return F
        if p[0] == "A":
            out.update(p[1])
        else:
            out.add(p)
    if not out:
        return T
    return next(iter(out)) if len(out) == 1 else ("A", frozenset(out))


def _or(parts) -> tuple:
    out = set()
    for p in parts:
        if p == F:
            continue
        out.update(p[1] if p[0] == "O" else (p,))
    if not out:
        return F
    return next(iter(out)) if len(out) == 1 else ("O", frozenset(out))


def finite_values(resolver: SchemaResolver, schema, base: str) -> list | None:
    """The values of a schema when it names a small finite set directly (``const``, ``enum``,
    ``boolean``, ``null``, or a ``$ref`` to one), else None. The grammar makes such items unique."""
    if schema is False:
        return []
    if not isinstance(schema, dict):
        return None
    schema = resolver.followed(schema, base)
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        kept: dict = {}  # 1 and 1.0 are one value; True and 1 are not
        for v in schema["enum"]:
            kept.setdefault(json_value_key(v), v)
        return list(kept.values())
    t = schema.get("type")
    if t == "boolean":
        return [True, False]
    if t == "null":
        return [None]
    return None


def mentions_unique(schema, resolver: SchemaResolver | None = None, base: str = "", seen=None) -> bool:
    """Whether ``uniqueItems: true`` occurs in the schema (following ``$ref`` when a resolver is given)."""
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        return any(mentions_unique(s, resolver, base, seen) for s in schema)
    if not isinstance(schema, dict) or id(schema) in seen:
        return False
    seen.add(id(schema))
    if schema.get("uniqueItems") is True:
        return True
    if resolver is not None:
        base = resolver.base_of.get(id(schema), base)
        if isinstance(schema.get("$ref"), str):
            try:
                target, tbase, _ = resolver.resolve(schema["$ref"], base, "#")
            except SchemaError:
                target = None
            if target is not None and mentions_unique(target, resolver, tbase, seen):
                return True
    return any(mentions_unique(v, resolver, base, seen) for k, v in schema.items() if k not in _DATA)


class UniquePlan:
    """The places of a schema's instances and whether arrays there must have unique items.

    ``root`` is the formula of the root value; ``child(f, name)``, ``item(f, index)`` the formulas
    of a member and an item; ``demand(f)`` and ``item_kind(f)`` what the matcher checks there.
    Built and validated once per schema (``check()``); the matcher only looks formulas up.
    """

    def __init__(self, root, registry: dict | None = None, strict: bool = False):
        self.resolver = SchemaResolver(root if isinstance(root, dict) else {}, registry)
        uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.old_draft = isinstance(uri, str) and any(d in uri for d in OLD_DRAFTS)
        self.strict = strict
        self.schemas: dict[tuple, tuple] = {}  # leaf key -> (schema, base)
        self.paths: dict[tuple, str] = {}  # leaf key -> the JSON pointer it was first reached at
        self._expanded: dict[tuple, tuple] = {}
        self._children: dict[tuple, tuple] = {}
        self._demands: dict[tuple, str] = {}
        self._formats: dict[tuple, str] = {}  # (formula, format) -> string_format
        self.hosts: tuple[str, ...] = ()  # the formats whose labels the matcher checks at every place (``hostnames``)
        self._kinds: dict[tuple, str | None] = {}
        self._patterns: dict[str, re.Pattern | None] = {}
        self.root = self.expand(root, self.resolver.root_base, "#")

    # ------------------------------------------------------------------ formulas
    def expand(self, schema, base: str, path: str) -> tuple:
        if schema is True or schema == {}:
            return T
        if schema is False:
            return F
        if not isinstance(schema, dict):
            return T
        base = self.resolver.base_of.get(id(schema), base)
        key = (id(schema), base)
        hit = self._expanded.get(key)
        if hit is not None:
            return hit
        self._expanded[key] = T  # an in-place cycle adds nothing to what is being expanded
        self.schemas[key] = (schema, base)
        self.paths.setdefault(key, path)
        for kw in ("not", "if", "contains"):
            if kw in schema and mentions_unique(schema[kw], self.resolver, base):
                raise PlanError(f"uniqueItems under {kw!r} is not supported", f"{path}/{kw}")
        if "$dynamicRef" in schema or "$recursiveRef" in schema:
            raise PlanError("uniqueItems beside $dynamicRef/$recursiveRef is not supported", path)
        parts = [("D", key)]
        if isinstance(schema.get("$ref"), str):
            target, tbase, tpath = self.resolver.resolve(schema["$ref"], base, path)
            if self.old_draft:  # before 2019-09, $ref's siblings are ignored
                self._expanded[key] = out = self.expand(target, tbase, tpath)
                return out
            parts.append(self.expand(target, tbase, tpath))
        for i, sub in enumerate(_list(schema.get("allOf"))):
            parts.append(self.expand(sub, base, f"{path}/allOf/{i}"))
        for kw in ("anyOf", "oneOf"):
            subs = _list(schema.get(kw))
            if subs:
                parts.append(_or(self.expand(s, base, f"{path}/{kw}/{i}") for i, s in enumerate(subs)))
        if "then" in schema or "else" in schema:
            parts.append(_or([self.expand(schema.get("then", True), base, f"{path}/then"),
                              self.expand(schema.get("else", True), base, f"{path}/else")]))  # fmt: skip
        for kw in ("dependentSchemas", "dependencies"):
            deps = schema.get(kw)
            if isinstance(deps, dict):
                for name, sub in deps.items():
                    if isinstance(sub, (dict, bool)):
                        parts.append(_or([T, self.expand(sub, base, f"{path}/{kw}/{name}")]))
        out = _and(parts)
        self._expanded[key] = out
        return out

    def child(self, f: tuple, name: str | None) -> tuple:
        """The formula of member ``name`` (None: any name no schema here declares, conservatively)."""
        memo = (f, "k", name)
        hit = self._children.get(memo)
        if hit is None:
            hit = self._children[memo] = self._map(f, lambda leaf: self._member(leaf, name))
        return hit

    def item(self, f: tuple, index: int) -> tuple:
        memo = (f, "i", index)
        hit = self._children.get(memo)
        if hit is None:
            hit = self._children[memo] = self._map(f, lambda leaf: self._item(leaf, index))
        return hit

    def _map(self, f: tuple, leaf_fn) -> tuple:
        if f in (T, F):
            return f
        if f[0] == "D":
            return leaf_fn(f)
        parts = [self._map(p, leaf_fn) for p in f[1]]
        return _and(parts) if f[0] == "A" else _or(parts)

    def undeclared(self, f: tuple) -> list[tuple]:
        """The formulas a member with a name no schema here declares can have: one per set of the
        patterns here it may match (every set, when there are at most MAX_PATTERN_SETS_LOG2 patterns;
        else one conservative formula for all such names)."""
        patterns = sorted({p for leaf in _leaves(f) for p in _patterns_of(self.schemas[leaf[1]][0])})
        if len(patterns) > MAX_PATTERN_SETS_LOG2:
            return [self.child(f, None)]
        out = []
        for bits in range(1 << len(patterns)):
            matched = frozenset(p for i, p in enumerate(patterns) if bits >> i & 1)
            memo = (f, "m", matched)
            hit = self._children.get(memo)
            if hit is None:
                hit = self._children[memo] = self._map(f, lambda leaf, m=matched: self._member(leaf, None, m))
            out.append(hit)
        return out

    def _member(self, leaf: tuple, name: str | None, matched: frozenset | None = None) -> tuple:
        """The formula of member ``name`` under one leaf; with ``matched`` (and no name), of an
        undeclared name that matches exactly those patterns."""
        schema, base = self.schemas[leaf[1]]
        at = self.paths[leaf[1]]
        if not _admits(schema, "object"):
            return F
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        pats = schema.get("patternProperties") if isinstance(schema.get("patternProperties"), dict) else {}
        addl = schema.get("additionalProperties", not (self.strict and closes_by_default(schema)))
        uneval = schema.get("unevaluatedProperties")
        if name is None and matched is None:  # any undeclared name: one of the patterns or additionalProperties
            opts = [self.expand(s, base, f"{at}/patternProperties/{p}") for p, s in pats.items()]
            opts.append(self.expand(addl, base, f"{at}/additionalProperties"))
            if uneval is not None:
                opts.append(self.expand(uneval, base, f"{at}/unevaluatedProperties"))
            return _or(opts) if len(opts) > 1 else opts[0]
        parts, hit = [], False
        if name in props:
            parts.append(self.expand(props[name], base, f"{at}/properties/{name}"))
            hit = True
        for pat, sub in pats.items():
            rx = self._pattern(pat)
            if rx is None:  # a pattern Python cannot read: it may apply or not
                parts.append(_or([T, self.expand(sub, base, f"{at}/patternProperties/{pat}")]))
            elif pat in matched if name is None else rx.search(name):
                parts.append(self.expand(sub, base, f"{at}/patternProperties/{pat}"))
                hit = True
        if not hit:  # where strict closes the object, a name it speaks of still takes any value (as lowered)
            if addl is False and "additionalProperties" not in schema and uneval is None and name is not None:
                addl = name in closing_names(self.resolver, schema, base)
            parts.append(self.expand(addl, base, f"{at}/additionalProperties"))
            if uneval is not None:
                parts.append(_or([T, self.expand(uneval, base, f"{at}/unevaluatedProperties")]))
        return _and(parts)

    def _item(self, leaf: tuple, index: int) -> tuple:
        schema, base = self.schemas[leaf[1]]
        at = self.paths[leaf[1]]
        if self.demand(leaf) == "0":  # no array here (by type, or an enum/const without one)
            return F
        prefix, rest = schema.get("prefixItems"), schema.get("items", True)
        names = ("prefixItems", "items")
        if isinstance(rest, list):  # draft-07 tuple form
            prefix, rest, names = rest, schema.get("additionalItems", True), ("items", "additionalItems")
        prefix = prefix if isinstance(prefix, list) else []
        if index < len(prefix):
            return self.expand(prefix[index], base, f"{at}/{names[0]}/{index}")
        if "items" not in schema and "unevaluatedItems" in schema:
            return _or([T, self.expand(schema["unevaluatedItems"], base, f"{at}/unevaluatedItems")])
        return self.expand(rest, base, f"{at}/{names[1]}")

    def _pattern(self, pat: str):
        if pat not in self._patterns:
            try:
                self._patterns[pat] = re.compile(pat)
            except (re.error, TypeError):
                self._patterns[pat] = None
        return self._patterns[pat]

    # ------------------------------------------------------------------ questions
    def demand(self, f: tuple) -> str:
        """For an array at a place of formula f: "Y" unique in every way, "N" never, "0" no array
        valid there, "X" depends on which branch applies."""
        hit = self._demands.get(f)
        if hit is None:
            hit = self._demands[f] = self._demand(f)
        return hit

    def _demand(self, f: tuple) -> str:
        return self._fold(f, _array_demand, self.demand)

    def string_format(self, f: tuple, fmt: str) -> str:
        """For a string at a place of formula f: "Y" ``format: fmt`` applies in every way the place
        can be valid, "N" in none, "0" no string valid there, "X" depends on which branch applies."""
        memo = (f, fmt)
        hit = self._formats.get(memo)
        if hit is None:
            hit = self._formats[memo] = self._fold(f, lambda s: _format_demand(s, fmt),
                                                   lambda p: self.string_format(p, fmt))  # fmt: skip
        return hit

    def _fold(self, f: tuple, leaf, part) -> str:
        """A formula's answer ("Y", "N", "0", "X"): T's "N", F's "0", a leaf's ``leaf(schema)``, else
        from its parts' answers (``part(p)``), all of them applying ("A") or one ("O")."""
        if f == T:
            return "N"
        if f == F:
            return "0"
        if f[0] == "D":
            return leaf(self.schemas[f[1]][0])
        got = [part(p) for p in f[1]]
        if f[0] == "A":
            return "0" if "0" in got else "Y" if "Y" in got else "X" if "X" in got else "N"
        live = {g for g in got if g != "0"}
        return "0" if not live else live.pop() if len(live) == 1 else "X"

    def format_checkable(self, fmt: str) -> bool:
        """Whether ``format: fmt`` applies to a string at some place of an instance, and at every
        place in every way the place can be valid or in none (no "X"): the matcher can check it."""
        found = False
        for f, _ in self._places():
            got = self.string_format(f, fmt)
            if got == "X":
                return False
            found = found or got == "Y"
        return found

    def item_kind(self, f: tuple) -> str | None:
        """What an item of formula f is: "any", "string", "number", "integer", "object", "bounded"
        (strings that may run out, beside open kinds), "closed" (``_closed_kind``), "finite", "none"
        (no value), or None when
        its prefixes could all end as duplicates and the matcher cannot tell (not supported)."""
        if f not in self._kinds:
            self._kinds[f] = None  # a formula met again while its kind is asked (recursion): not supported
            self._kinds[f] = self._kind(f)
        return self._kinds[f]

    def _kind(self, f: tuple) -> str | None:
        if f == T:
            return "any"
        if f == F:
            return "none"
        if f[0] == "D":
            kind = _leaf_kind(self.schemas[f[1]][0], self.strict)
            return kind if kind is not None else self._closed_kind(f)
        got = [self.item_kind(p) for p in f[1]]
        if got.count("closed") > 1:
            return None  # which closed schema's names end the item would depend on the branch or part
        if f[0] == "O":  # a prefix alive in one open branch has endless endings in that branch
            live = set(got) - {"none"}
            if not live:
                return "none"
            if "finite" in live and ("any" in live or "string" in live and self._strings_and_literals(f)):
                live.discard("finite")  # each constant's prefixes are alive in the open branch too
            elif "finite" in live and "bounded" in live and self._strings_and_literals(f):
                live.discard("finite")  # string constants beside strings that run out: one search for both
            return _either(live)
        if None in got:
            return None
        kinds = {g for g in got if g != "any"}
        if "closed" in kinds and len(kinds) > 1:
            return None  # a closed object narrowed further: the names it ends at are not the declared ones
        if "bounded" in kinds and kinds <= {"bounded", "string"}:
            return "bounded"  # within a bounded string language: still bounded
        if "none" in kinds:
            return "none"
        if "finite" in kinds:
            return "finite"
        if kinds <= {"integer", "number"} and "integer" in kinds:
            return "integer"
        return kinds.pop() if len(kinds) == 1 else "any" if not kinds else "none"

    def _closed_kind(self, leaf: tuple) -> str | None:
        """"closed" for an object that takes its declared properties only (none past them, no count or
        name keywords, no in-place applicators), each of an open kind: inside such an item every
        member value in progress has endless endings, and once every declared name is written the
        last value's end decides the item (``JsonTrack``: refused there when it makes a duplicate,
        while that value could still go on another way). Else None."""
        schema = self.schemas[leaf[1]][0]
        props = schema.get("properties")
        required = schema.get("required", [])
        addl = schema.get("additionalProperties", not (self.strict and closes_by_default(schema)))
        if (schema.get("type") != "object" or set(schema) - _NOTES - {"type", "properties", "required",
                "additionalProperties"} or addl is not False or not isinstance(props, dict) or not props
                or not isinstance(required, list) or not set(required) <= set(props)):  # fmt: skip
            return None
        for name in props:
            if self.item_kind(self.child(leaf, name)) not in _OPEN:
                return None
        return "closed"

    def closed_names(self, f: tuple) -> frozenset | None:
        """The declared names of a "closed" item formula (its one closed schema's), else None."""
        if self.item_kind(f) != "closed":
            return None
        for leaf in _leaves(f):
            props = self.schemas[leaf[1]][0].get("properties")
            if self._kinds.get(leaf) == "closed" and isinstance(props, dict):
                return frozenset(props)
        return None

    def _strings_and_literals(self, f: tuple) -> bool:
        """Whether every constant the item schemas of formula f name is a string, a boolean or null
        (decided at its first letter), so that strings are the only items that can run out."""
        for leaf in _leaves(f):
            schema = self.schemas[leaf[1]][0]
            values = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
            if "const" in schema:
                values.append(schema["const"])
            if not all(v is None or isinstance(v, (str, bool)) for v in values):
                return False
        return True

    # ------------------------------------------------------------------ the compile-time walk
    def check(self) -> None:
        """Visit every place; raise PlanError where uniqueness is mixed or could dead-end."""
        for f, where in self._places():
            d = self.demand(f)
            if d == "X":
                raise PlanError(f"uniqueItems applies in some branches of the instance's {where} and not in "
                                "others", self._unique_at(f))  # fmt: skip
            if d == "Y":
                leaves = list(_leaves(f))
                self._check_unique_array(f, leaves, _width(self, leaves), where)

    def _places(self):
        """Every place's formula (and its JSON pointer, "*" for other names), each once; PlanError past
        MAX_PLACES of them."""
        todo, seen = [(self.root, "#")], {self.root}
        while todo:
            f, where = todo.pop()
            if len(seen) > MAX_PLACES:
                raise PlanError(f"the schema has more than {MAX_PLACES} places to check uniqueItems at", "#")
            yield f, where
            leaves = list(_leaves(f))
            names, width = set(), _width(self, leaves)
            for leaf in leaves:
                schema = self.schemas[leaf[1]][0]
                if isinstance(schema.get("properties"), dict):
                    names.update(schema["properties"])
            nxt = [(self.child(f, n), f"{where}/{n}") for n in sorted(names)] + [(g, f"{where}/*") for g in self.undeclared(f)]
            nxt += [(self.item(f, i), f"{where}/{i}") for i in range(width + 1)]
            for g, w in nxt:
                if g not in seen and g not in (T, F):
                    seen.add(g)
                    todo.append((g, w))

    def _unique_at(self, f: tuple) -> str:
        """The JSON pointer of a uniqueItems that applies at a place of formula f (else the place's first schema)."""
        leaves = list(_leaves(f))
        for leaf in leaves:
            if self.schemas[leaf[1]][0].get("uniqueItems") is True:
                return f"{self.paths[leaf[1]]}/uniqueItems"
        return self.paths[leaves[0][1]] if leaves else "#"

    def _check_unique_array(self, f: tuple, leaves: list, width: int, where: str) -> None:
        for leaf in leaves:
            schema = self.schemas[leaf[1]][0]
            if self.demand(leaf) == "0":  # a branch with no array (an enum of strings beside the array)
                continue
            if "contains" in schema or "const" in schema or "enum" in schema:
                raise PlanError(f"uniqueItems beside contains/const/enum is not supported (the instance's {where})",
                                self._unique_at(f))  # fmt: skip
        for i in range(width + 1):
            kind = self.item_kind(self.item(f, i))
            if kind is None:
                raise PlanError(
                    "uniqueItems is exact only for items that are strings (with at most minLength, or a "
                    "pattern/format that leaves every prefix infinitely many endings), numbers, integers, "
                    f"any value, or a small finite set of values (the instance's {where}/{i})", self._unique_at(f)
                )  # fmt: skip
            if kind == "finite":  # the grammar enforces it, but only where each unique schema's items are finite
                for leaf in leaves:
                    schema, base = self.schemas[leaf[1]]
                    if schema.get("uniqueItems") is True:
                        values = _all_finite(self.resolver, schema, base)
                        if values is not None and len(values) <= MAX_UNIQUE_VALUES:
                            continue
                        if not self._strings_and_literals(self.item(f, i)):
                            raise PlanError("uniqueItems over items narrowed to a finite set elsewhere, or over "
                                            f"more than {MAX_UNIQUE_VALUES} values, is supported for strings, "
                                            f"booleans and null only (the instance's {where})",
                                            self._unique_at(f))  # fmt: skip
                        # many strings, or strings narrowed elsewhere: the matcher searches (as for maxLength)
                        self._kinds[self.item(f, i)] = "bounded"


def _array_demand(schema: dict) -> str:
    """An array's ``demand`` under one schema: "0" where it admits no array."""
    if not _admits(schema, "array"):
        return "0"
    if "const" in schema and not isinstance(schema["const"], list):
        return "0"
    if isinstance(schema.get("enum"), list) and not any(isinstance(v, list) for v in schema["enum"]):
        return "0"
    return "Y" if schema.get("uniqueItems") is True else "N"


def _format_demand(schema: dict, fmt: str) -> str:
    """A string's ``string_format`` under one schema: "0" where it admits no string."""
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if not _admits(schema, "string") or isinstance(values, list) and not any(isinstance(v, str) for v in values):
        return "0"
    return "Y" if schema.get("format") == fmt else "N"


def _width(plan: UniquePlan, leaves: list) -> int:
    """The most tuple items (``prefixItems``) any schema of ``leaves`` declares."""
    return max((len(_prefix_of(plan.schemas[leaf[1]][0])) for leaf in leaves), default=0)


def _admits(schema: dict, kind: str) -> bool:
    t = schema.get("type")
    return t is None or kind in (t if isinstance(t, list) else [t])


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _leaves(f: tuple):
    if f in (T, F):
        return
    if f[0] == "D":
        yield f
        return
    for p in f[1]:
        yield from _leaves(p)


def _patterns_of(schema: dict) -> list:
    pats = schema.get("patternProperties")
    return list(pats) if isinstance(pats, dict) else []


def _prefix_of(schema: dict) -> list:
    if isinstance(schema.get("items"), list):
        return schema["items"]
    return schema["prefixItems"] if isinstance(schema.get("prefixItems"), list) else []


def _all_finite(resolver, schema: dict, base: str) -> list | None:
    items = schema.get("items", True)
    prefix = _prefix_of(schema)
    if isinstance(items, list):
        items = schema.get("additionalItems", True)
    values = finite_values(resolver, items, base)
    for s in prefix:
        more = finite_values(resolver, s, base)
        values = None if values is None or more is None else values + more
    return values


# item kinds whose every prefix has endlessly many endings of distinct values; "bounded": such kinds or
# strings whose language runs out (maxLength, uuid, ^(a|b)$), where the matcher searches the grammar
# for an ending that is not an earlier item before it lets a string item go on
_OPEN = frozenset({"any", "string", "number", "integer", "object"})
# an object's keywords that never stop one more member with a fresh name (and any value) being added
_OPEN_OBJECT_KEYS = frozenset({"properties", "required", "additionalProperties"})


def _leaf_kind(schema: dict, strict: bool = False) -> str | None:
    if "if" in schema and not _tests_members(schema["if"]):
        return None  # in-place complements may end what the keywords below leave open
    if "not" in schema:  # finitely many values refused: an open kind stays open
        kind = _leaf_kind({k: v for k, v in schema.items() if k != "not"}, strict)
        return kind if _constants_only(schema["not"]) and kind in _OPEN else None
    keys = set(schema) - _NOTES - _IN_PLACE
    if "const" in keys or "enum" in keys:
        return "finite"
    t = schema.get("type")
    keys.discard("type")
    if t is None:
        # keywords of one kind say nothing about values of other kinds: such a leaf is "any" when
        # it has none, and with string keywords only, "any" or "bounded" as its strings are
        if not keys:
            return "any"
        if keys <= _OPEN_OBJECT_KEYS:  # other kinds unconstrained, objects open to a fresh member
            return "any" if _any_value_fits(schema.get("additionalProperties", not strict)) else None
        if keys <= {"minLength", "maxLength", "pattern", "format"}:
            key = tuple(schema.get(k) for k in ("minLength", "maxLength", "pattern", "format"))
            return "any" if _open_everywhere(*key) else "bounded"
        return None
    if isinstance(t, list):  # a string or null: null is decided at its first letter
        if sorted(t) == ["null", "string"] and keys <= {"minLength", "maxLength", "pattern", "format"}:
            return "bounded"
        return _types_kind(schema, t, strict)
    if t in ("boolean", "null"):
        return "finite"
    if t == "string":
        if keys <= {"minLength"}:
            return "string"
        if keys <= {"minLength", "maxLength", "pattern", "format"}:
            key = tuple(schema.get(k) for k in ("minLength", "maxLength", "pattern", "format"))
            return "string" if _open_everywhere(*key) else "bounded"
        return None
    if t in ("number", "integer"):
        return t if not keys else None
    if t == "object" and keys <= _OPEN_OBJECT_KEYS:
        # every prefix of such an object can still take a member with a fresh name, in endlessly many
        # ways: refusing the finitely many earlier items never leaves it without a way on
        addl = schema.get("additionalProperties", not strict)
        return "object" if _any_value_fits(addl) else None
    return None


def _types_kind(schema: dict, types: list, strict: bool) -> str | None:
    """The kind of a leaf of several types: a value's first letter decides its type (no number or
    string begins like another kind), so the leaf is "any" where every type left is an open kind on
    its own (``["string", "object"]``), "bounded" where some are strings that run out beside them;
    ``null`` and ``boolean`` are decided at their first letter and never the only way on."""
    if not types or not all(isinstance(x, str) for x in types):
        return None
    kinds = {_leaf_kind({**schema, "type": x}, strict) for x in dict.fromkeys(types)}
    live = kinds - {"none", "finite"}  # "finite": null or boolean (constants are no leaf of types)
    if not live:
        return "finite" if "finite" in kinds else "none"
    return _either(live)


def _either(live: set) -> str | None:
    """The kind of an item that is one of several kinds (none of them "none"; "finite" ones already
    dropped where the others keep their prefixes alive): the one kind, "any" over open kinds,
    "bounded" beside strings that run out, else None (not supported)."""
    if len(live) == 1:
        return next(iter(live))
    if live <= _OPEN:
        return "any"
    return "bounded" if live <= _OPEN | {"bounded"} else None


def _constants_only(schema) -> bool:
    """Whether a ``not`` refuses finitely many values (an ``enum`` or a ``const``)."""
    return isinstance(schema, dict) and set(schema) - _NOTES in ({"enum"}, {"const"}) and (
        "const" in schema or isinstance(schema.get("enum"), list)
    )


def _tests_members(schema) -> bool:
    """Whether an ``if`` only tests members (``required``, constants or types of ``properties``): its
    complement asks a member to be absent or to hold another value, which ends no object's openness,
    and the ``then``/``else`` the plan reads as branches say the rest (so may its ``not``)."""
    if isinstance(schema, dict) and set(schema) - _NOTES == {"not"}:
        return _tests_members(schema["not"])
    if not isinstance(schema, dict) or set(schema) - _NOTES - {"properties", "required"}:
        return False
    props = schema.get("properties", {})
    return isinstance(props, dict) and all(
        sub is True or isinstance(sub, dict) and set(sub) - _NOTES <= {"const", "enum", "type"} for sub in props.values()
    )


def _any_value_fits(schema) -> bool:
    """Whether the schema surely accepts some value (conservatively: true, {} or a bare type)."""
    if schema is True:
        return True
    return isinstance(schema, dict) and set(schema) - _NOTES <= {"type"} and schema.get("type") != []


@lru_cache(maxsize=1024)
def _open_everywhere(min_len, max_len, pattern, fmt) -> bool:
    """Whether every prefix of the strings a string schema allows still has infinitely many
    completions: then refusing the finitely many earlier items never leaves a prefix with no way
    on (``[a-z]+``, ``^https://``, ``format: uri``; not ``maxLength``, ``uuid``, ``^(a|b)$``)."""
    parts = [any_string()]
    try:
        if isinstance(pattern, str):
            parts.append(parse_regex(pattern, search=True))
        if isinstance(fmt, str):
            node = format_node(fmt)
            if node is not None:
                parts.append(node)
        if isinstance(max_len, int):
            return False
        if isinstance(min_len, int) and min_len > 0:
            parts.append(repeat(any_char(), min_len, None))
        dfa = to_dfa(intersect(*parts), max_states=4000)
    except (GrammarError, LimitError, SchemaError):
        return False
    return _all_reach_a_cycle(dfa.trans)


def _all_reach_a_cycle(trans) -> bool:
    """Over a trimmed DFA (every state live): whether every state reaches a cycle. A state whose
    language is finite reaches only such states, which form an acyclic graph and so end in a state
    with no transition; conversely such a state's language is finite. So: no state without one."""
    return bool((trans >= 0).any(axis=1).all())
