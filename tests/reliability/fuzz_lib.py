"""Fuzzing helpers: generators of JSON Schemas, regexes and grammars, and the soundness oracles.

A fuzz case compiles a constraint through the real ``CompileService`` (builtin tokenizer) and sorts
the outcome into ``compiled`` or one of our errors; any other exception, or a compile past its bound,
is a failure. Whatever compiled is then sampled two ways, and every sample the compiled grammar
accepts must satisfy the independent oracle (``jsonschema``, Python ``re``, Lark's own parser):

* a random walk over the token masks (what generation does): each step picks an allowed token,
  which ``accept_token`` must take; each accepting prefix is a sample;
* candidate values (for schemas): random and schema-shaped JSON, serialized with the schema's key
  order, offered to the matcher token by token.

``GUIDED_LONG_TESTS=1`` scales every count up (``scaled``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import resource
import time
from dataclasses import dataclass, field

import jsonschema
import numpy as np
from hypothesis import strategies as st

from guided.errors import CompileTimeoutError, GuidedError

LONG = os.environ.get("GUIDED_LONG_TESTS") == "1"


def scaled(ci: int, long: int) -> int:
    return long if LONG else ci


def rss_bytes() -> int:
    """Resident memory of this process now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------------- outcomes
@dataclass
class Tally:
    """Counts of one fuzz run: outcomes by kind, samples checked, violations found."""

    outcomes: dict = field(default_factory=dict)
    samples: int = 0
    violations: list = field(default_factory=list)
    slowest_s: float = 0.0
    mask_errors: list = field(default_factory=list)  # our errors while masking (the engine ends that request)
    timeouts: list = field(default_factory=list)  # constraints whose compile hit the bound
    unchecked: int = 0  # accepted samples the oracle cannot judge (numbers beyond float range, $ref loops)

    def add(self, kind: str) -> None:
        self.outcomes[kind] = self.outcomes.get(kind, 0) + 1

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())


def compile_case(service, constraint, tally: Tally, bound_s: float):
    """Compile ``constraint``; tally the outcome; the compiled grammar or None. Raises on a foreign
    exception or a compile that outran ``bound_s`` (plus scheduling slack)."""
    t0 = time.perf_counter()
    try:
        compiled = service.compile(constraint)
        kind = "compiled"
    except CompileTimeoutError:
        compiled, kind = None, "CompileTimeoutError"
        tally.timeouts.append(repr(constraint)[:300])
    except GuidedError as e:
        compiled, kind = None, type(e).__name__
    elapsed = time.perf_counter() - t0
    tally.slowest_s = max(tally.slowest_s, elapsed)
    tally.add(kind)
    assert elapsed < bound_s + 5.0, f"compile took {elapsed:.1f} s, past its {bound_s} s bound"
    return compiled


# ---------------------------------------------------------------------- sampling
def walk(
    compiled, vocab, rng: random.Random, steps: int = 40, tally: Tally | None = None, label=""
) -> list[bytes]:
    """Accepting prefixes of a random walk over the token masks; checks mask/accept agreement.

    A ``GuidedError`` while masking (a mask-time bound) ends the walk; it is tallied, as the engine
    would end that one request with the error."""
    try:
        return _walk(compiled, vocab, rng, steps)
    except GuidedError as e:
        if tally is None:
            raise
        tally.mask_errors.append(f"{label}: {e}")
        return []


def _walk(compiled, vocab, rng: random.Random, steps: int) -> list[bytes]:
    matcher = compiled.matcher()
    bitmask = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    eos = set(vocab.eos_ids)
    text, found = b"", []
    for _ in range(steps):
        if matcher.is_accepting():
            found.append(text)
        matcher.fill_bitmask(bitmask, 0)
        allowed = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: vocab.size].nonzero()[0]
        choices = [int(t) for t in allowed if int(t) not in eos]
        if not choices:
            break
        short = [t for t in choices if len(vocab.tokens[t]) == 1]
        token = rng.choice(short if short and rng.random() < 0.7 else choices)
        assert matcher.accept_token(token), f"the mask allowed token {token} but accept_token refused it"
        text += vocab.tokens[token]
    if matcher.is_accepting():
        found.append(text)
    return list(dict.fromkeys(found))


def accepts(compiled, tokenizer, text: str) -> bool:
    """Whether the compiled grammar takes ``text`` (as the tokenizer splits it) and may stop there."""
    matcher = compiled.matcher()
    return all(matcher.accept_token(t) for t in tokenizer.encode(text, add_special_tokens=False)) and (
        matcher.is_accepting()
    )


# ---------------------------------------------------------------------- JSON Schemas
# Minimal reproducers the fuzzers found in the JSON Schema compiler: (schema, what goes wrong). Each
# should be a SchemaError; test_fuzz.py pins them as strict xfails, the report re-runs them.
# Malformed or contradictory schemas that must be a SchemaError (each once compiled or raised a bare
# ValueError / TypeError; found by the fuzzers).
BAD_SCHEMAS = [
    {"type": "string", "minLength": 1, "maxLength": 0},
    {"required": 3},
    {"multipleOf": None},
    {"pattern": None},
    {"properties": []},
    {"format": 3},
    {"type": "array", "minItems": 3, "maxItems": 1},
]
# (schema, text): the compiled schema once accepted ``text``, an instance the schema refuses (equal
# values spelled otherwise escaped complements; fixed by taking complements within canonical values).
SOUNDNESS_BUGS = [
    ({"not": {"type": "integer"}}, "1e0"),  # an integer-valued number is an integer
    ({"not": {"const": 1}}, "1.0"),  # equal numbers, other spelling (also 1e0, 10e-1; enum likewise)
    ({"not": {"type": "number", "minimum": 0}}, "1e0"),  # exponent forms escaped the bounded range
    ({"if": {"const": 0}, "then": False}, "0.0"),  # `else` negates `if`: the same, through if/then
    ({"not": {"type": "object", "required": ["a", "b"]}}, '{"b":1,"a":1}'),  # members in another order
]
_WORDS = st.sampled_from(["a", "b", "id", "name", "x1", "tags", "n"])
_FORMATS = st.sampled_from(["date", "time", "date-time", "email", "uuid", "ipv4", "hostname", "uri"])
_PATTERNS = st.sampled_from(["^[a-z]+$", "^a.*z$", "^[0-9]{2,4}$", "x|yy", "^(ab)*$", "[A-Z]", "^\\w{1,3}$"])
_SMALL = st.integers(min_value=-3, max_value=12)


def _string():
    return st.fixed_dictionaries(
        {"type": st.just("string")},
        optional={"minLength": st.integers(0, 4), "maxLength": st.integers(0, 8), "pattern": _PATTERNS,
                  "format": _FORMATS},
    )  # fmt: skip


def _number():
    return st.fixed_dictionaries(
        {"type": st.sampled_from(["integer", "number"])},
        optional={"minimum": _SMALL, "maximum": _SMALL, "exclusiveMinimum": _SMALL, "exclusiveMaximum": _SMALL,
                  "multipleOf": st.sampled_from([1, 2, 5, 0.5, 0.1])},
    )  # fmt: skip


_SCALAR_VALUES = st.one_of(st.none(), st.booleans(), _SMALL, st.sampled_from(["a", "b", "", "é", '"q"']))
_LEAVES = st.one_of(
    _string(),
    _number(),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}, {}, True, False, {"type": ["string", "null"]}]),
    st.lists(_SCALAR_VALUES, min_size=1, max_size=4).map(lambda v: {"enum": v}),
    _SCALAR_VALUES.map(lambda v: {"const": v}),
)


def _composite(children):
    props = st.dictionaries(_WORDS, children, max_size=3)
    obj = st.builds(
        lambda p, req, add, extra: {"type": "object", "properties": p,
                                    "required": [k for k in p if k in req], **add, **extra},
        props, st.sets(_WORDS), st.sampled_from([{}, {"additionalProperties": False}]),
        st.fixed_dictionaries({}, optional={"additionalProperties": children, "minProperties": st.integers(0, 3),
                                            "maxProperties": st.integers(0, 4),
                                            "patternProperties": st.dictionaries(_PATTERNS, children, max_size=1)}),
    )  # fmt: skip
    arr = st.fixed_dictionaries(
        {"type": st.just("array")},
        optional={"items": children, "prefixItems": st.lists(children, max_size=2), "minItems": st.integers(0, 3),
                  "maxItems": st.integers(0, 4), "uniqueItems": st.booleans(), "contains": children},
    )  # fmt: skip
    many = st.lists(children, min_size=1, max_size=3)
    logic = st.one_of(
        many.map(lambda s: {"anyOf": s}),
        many.map(lambda s: {"oneOf": s}),
        many.map(lambda s: {"allOf": s}),
        children.map(lambda s: {"not": s}),
        st.tuples(children, children, children).map(
            lambda t: {"if": t[0], "then": t[1], "else": t[2]}
        ),
        children.map(lambda s: {"$defs": {"d": s}, "$ref": "#/$defs/d"}),
    )
    return st.one_of(obj, arr, logic)


def json_schemas():
    """Random JSON Schemas over the keywords the compiler claims (and some it refuses)."""
    return st.recursive(_LEAVES, _composite, max_leaves=6)


def malformed_schemas():
    """Schemas with keyword values of the wrong kind, unknown keywords, and random JSON."""
    bad_values = st.one_of(st.text(max_size=3), st.integers(-5, 5), st.floats(allow_nan=False), st.none(),
                           st.lists(st.integers(), max_size=2), st.booleans())  # fmt: skip
    # not "required": a non-list value raises TypeError (a known bug, pinned in test_fuzz.py)
    keyword = st.sampled_from(["type", "minLength", "maxItems", "enum", "properties", "items", "pattern",
                               "$ref", "anyOf", "multipleOf", "format", "not", "x-custom"])  # fmt: skip
    json_value = st.recursive(
        _SCALAR_VALUES, lambda c: st.lists(c, max_size=3) | st.dictionaries(_WORDS, c, max_size=3)
    )
    return st.one_of(st.dictionaries(keyword, bad_values, min_size=1, max_size=3), json_value)


def declared_order(value, schema):
    """``value`` with object keys in the order the schema declares them (the compiler's key order)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        order = _declared_keys(schema)
        keys = [k for k in order if k in value] + [k for k in value if k not in order]
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        return {k: declared_order(value[k], props.get(k, {})) for k in keys}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [declared_order(v, schema["items"]) for v in value]
    return value


def _declared_keys(schema) -> list:
    keys = list(schema.get("properties") or {}) if isinstance(schema.get("properties"), dict) else []
    for word in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(word) or []:
            if isinstance(sub, dict):
                keys += [k for k in _declared_keys(sub) if k not in keys]
    return keys + [k for k in schema.get("required") or [] if isinstance(k, str) and k not in keys]


def schema_candidates(schema, rng: random.Random, count: int) -> list:
    """JSON values near the schema's shape (valid or not), for the acceptance check."""
    return [declared_order(_candidate(schema, rng, 3), schema) for _ in range(count)]


def _candidate(schema, rng: random.Random, depth: int):
    if not isinstance(schema, dict) or rng.random() < 0.1 or depth <= 0:
        return rng.choice([None, True, 0, 1, -1, 2.5, "a", "", [], {}, "2024-01-02", "a@b.co"])
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    for word in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(word), list) and schema[word]:
            return _candidate(rng.choice(schema[word]), rng, depth - 1)
    kind = schema.get("type")
    kind = rng.choice(kind) if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        return {k: _candidate(s, rng, depth - 1) for k, s in props.items() if rng.random() < 0.8}
    if kind == "array":
        return [_candidate(schema.get("items", {}), rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", -3), schema.get("maximum", 12)
        return rng.choice([low, high, 0, 1, 3, 0.5, -2]) if rng.random() < 0.5 else rng.randint(-4, 13)
    if kind == "string":
        return "".join(rng.choice("abz09_-@.") for _ in range(rng.randint(0, 6)))
    return rng.choice([None, True, False, 0, "x"])


def _loads(text: str):
    """The JSON value and whether a number in it is past a float (``1E-990`` -> 0.0, 17 digits)."""
    lossy = []

    def parse_float(s: str) -> float:
        f = float(s)
        mantissa = s.lower().split("e")[0]
        digits = mantissa.lstrip("-").replace(".", "").lstrip("0").rstrip("0")
        if not math.isfinite(f) or (f == 0.0 and digits) or len(digits) > 15:  # past a double's precision
            lossy.append(s)
        return f

    return json.loads(text, parse_float=parse_float), bool(lossy)


def meta_valid(schema) -> bool:
    """Whether the schema itself is valid against its draft's meta-schema."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


NEGATING = re.compile(r'"(not|oneOf|if|contains)":')


def unknown_formats(schema) -> set[str]:
    """``format`` values in the schema that ``jsonschema``'s checker cannot assert (without its optional
    packages it knows no ``hostname``, ``time``, ``date-time`` or ``uri``)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    known, found, stack = set(cls.FORMAT_CHECKER.checkers), set(), [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("format"), str) and node["format"] not in known:
                found.add(node["format"])
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return found


def is_valid(schema, value) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)


def check_schema_samples(
    compiled, schema, vocab, tokenizer, rng: random.Random, tally: Tally, count: int
) -> None:
    """Every sample the compiled schema accepts is valid for ``jsonschema``; violations are tallied.

    A schema the meta-schema refuses cannot be checked (``jsonschema`` has no semantics for it); that
    it compiled at all is tallied as ``compiled though malformed``."""
    if not meta_valid(schema):
        tally.add("compiled though malformed")
        return
    if re.search(r'"multipleOf": -?[0-9]*\.', json.dumps(schema)):  # the oracle divides floats: 16.9 / 0.1
        tally.add("compiled, fractional multipleOf (unchecked)")
        return
    if unknown_formats(schema) and NEGATING.search(json.dumps(schema)):
        # the oracle takes these formats as annotations where guided asserts them: under a complement
        # (``not``, ``oneOf`` exclusivity, ``if``, counted ``contains``) its verdict would be wrong
        tally.add("compiled, complement of a format the oracle cannot check (unchecked)")
        return
    texts = [
        t.decode("utf-8", "replace")
        for t in walk(compiled, vocab, rng, tally=tally, label=json.dumps(schema))
    ]
    for value in schema_candidates(schema, rng, count):
        for seps in ((",", ":"), (", ", ": ")):
            text = json.dumps(value, ensure_ascii=False, separators=seps)
            try:
                if accepts(compiled, tokenizer, text):
                    texts.append(text)
            except GuidedError as e:
                tally.mask_errors.append(f"{json.dumps(schema)}: {e}")
    for text in texts:
        try:
            value, lossy = _loads(text)
        except ValueError:
            tally.violations.append((schema, text, "not JSON"))
            continue
        if lossy:  # the oracle works on floats: it cannot judge a number that under/overflows one
            tally.unchecked += 1
            continue
        try:
            valid = is_valid(schema, value)
        except RecursionError:  # the oracle loops on a $ref cycle that consumes nothing (d: anyOf[$ref d])
            tally.unchecked += 1
            continue
        tally.samples += 1
        if not valid:
            tally.violations.append((schema, text, "invalid instance accepted"))


# ---------------------------------------------------------------------- regexes and grammars
def _regex_atoms():
    return st.sampled_from(["a", "b", "c", "[ab]", "[^a-y]", "[0-9]", "\\d", "\\.", "x", "(?:ab)", "[a-c]"])


def regexes():
    """Random regexes from atoms, concatenation, alternation, groups and (bounded) repeats."""

    def extend(children):
        rep = st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{3,}"])
        return st.one_of(
            st.tuples(children, children).map("".join),
            st.tuples(children, children).map(lambda t: f"{t[0]}|{t[1]}"),
            st.tuples(children, rep).map(lambda t: f"({t[0]}){t[1]}"),
        )

    return st.recursive(_regex_atoms(), extend, max_leaves=8)


def junk_regexes():
    """Arbitrary short text over regex metacharacters: must compile or raise GrammarError."""
    # no \s: ECMA-262's (guided's) includes U+FEFF, Python's does not
    return st.text(alphabet="ab()[]{}*+?|^$.\\-,0123456789dw", max_size=12)


def check_regex_samples(compiled, pattern: str, vocab, rng: random.Random, tally: Tally) -> None:
    try:
        oracle = re.compile(pattern)
    except re.error:  # e.g. stacked quantifiers ``a**``, which guided accepts (pinned in test_fuzz.py)
        tally.add("compiled, Python re refuses")
        return
    for text in walk(compiled, vocab, rng, tally=tally):
        tally.samples += 1
        s = text.decode("utf-8", "replace")
        if oracle.fullmatch(s) is None:
            tally.violations.append((pattern, s, "re.fullmatch refuses an accepted string"))


def lark_grammars():
    """Small random Lark grammars (possibly recursive) over a few literals."""
    lit = st.sampled_from(['"a"', '"b"', '"(" start ")"', '"x"', "item", '"," item', "NUM"])
    seq = st.lists(lit, min_size=1, max_size=3).map(" ".join)
    alts = st.lists(seq, min_size=1, max_size=3).map(" | ".join)
    return st.tuples(alts, alts).map(lambda t: f"start: {t[0]}\nitem: {t[1]}\nNUM: /[0-9]{{1,2}}/\n")


def check_lark_samples(compiled, text: str, vocab, rng: random.Random, tally: Tally) -> None:
    import lark

    parser = lark.Lark(text, start="start", parser="earley", lexer="dynamic_complete")  # guided's semantics
    for sample in walk(compiled, vocab, rng, tally=tally):
        tally.samples += 1
        s = sample.decode("utf-8", "replace")
        try:
            parser.parse(s)
        except lark.exceptions.LarkError:
            tally.violations.append((text, s, "Lark refuses an accepted string"))


# ---------------------------------------------------------------------- mutations of real schemas
MUTATIONS = ("drop", "number", "type", "not", "nest", "huge")


def mutate(schema, rng: random.Random):
    """One random edit somewhere in a copy of ``schema``."""
    schema = copy.deepcopy(schema)
    spots = [schema]
    stack = [schema]
    while stack:
        node = stack.pop()
        for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
            if isinstance(value, (dict, list)):
                spots.append(value)
                stack.append(value)
    dicts = [s for s in spots if isinstance(s, dict) and s] or [schema]
    spot, how = rng.choice(dicts), rng.choice(MUTATIONS)
    key = rng.choice(list(spot)) if spot else None
    if how == "drop" and key is not None:
        del spot[key]
    elif how == "number":
        spot[rng.choice(["minLength", "maxItems", "minimum", "maxProperties"])] = rng.choice(
            [0, 3, -1, 10**7, 2.5]
        )
    elif how == "type":
        spot["type"] = rng.choice(["string", "object", ["integer", "null"], "bogus", 7])
    elif how == "not" and key is not None:
        spot[key] = {"not": spot[key]} if isinstance(spot[key], dict) else spot[key]
    elif how == "nest":
        spot["items"] = {"type": "array", "items": {"anyOf": [{"type": "string"}, copy.deepcopy(spot)]}}
    else:
        spot["maxLength"] = 10**30
    return schema
