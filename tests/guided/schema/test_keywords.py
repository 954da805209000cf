"""The JSON Schema compiler per keyword family, with the jsonschema validator as the oracle.

Each case is a schema and instances, valid and invalid; every instance, serialized the way MaskBench
does (", " and ": ") and compactly, must be accepted exactly when the validator accepts it. The
membership test walks the grammar core's derivatives; a naive set-of-positions matcher cross-checks
it on the short texts (it is independent of the grammar core).
"""

from __future__ import annotations

import json
import warnings

import pytest
from json_schema_oracle import accepts, dumps, fullmatch, is_valid

from guided.errors import CompileTimeoutError, LimitError, SchemaError
from guided.schema.compiler import json_schema_to_node

OBJ = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
    "required": ["b"],
}
CASES = {
    "type-list": ({"type": ["string", "null"]}, ["x", None, 1, True, [], {}]),
    "null-bool": ({"type": ["boolean"]}, [True, False, None, 0]),
    "integer": ({"type": "integer"}, [0, -1, 12, 1.5, 1.0, "1", -0.0]),
    "int-range": (
        {"type": "integer", "minimum": -12, "maximum": 107},
        [-13, -12, -1, 0, 9, 99, 107, 108, 1000],
    ),
    "int-exclusive": ({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 10}, [3, 4, 9, 10, -4]),
    "int-multiple": ({"type": "integer", "multipleOf": 5}, [0, 5, -10, 7, 12345, 12340]),
    "int-multiple-7": ({"type": "integer", "multipleOf": 7}, [0, 7, -14, 8, 700000000007, 700000000008]),
    # a multiple of each coprime part: 3 * 11 * 13, a prime, 2^2 5^3 * 3^2
    "int-multiple-429": ({"type": "integer", "multipleOf": 429}, [0, 429, -858, 430, 529620243, 529620244]),
    "int-multiple-101": ({"type": "integer", "multipleOf": 101}, [0, 101, -202, 10100, 102, 1010101011]),
    "int-multiple-4500": ({"type": "integer", "multipleOf": 4500}, [0, 4500, -9000, 500, 13500, 4501, 40500]),
    "int-multiple-range": (
        {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 50},
        [0, 7, 49, 50, 56, 8],
    ),
    "number": ({"type": "number"}, [0, -1.5, 3.25, 1e-7, "2"]),
    "number-range": (
        {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25},
        [-1.5, -1.51, -1, 0, 0.5, 2.2, 2.25, 2.249, 3, -0.0],
    ),
    "number-frac-range": (
        {"type": "number", "minimum": 0.125, "maximum": 0.5},
        [0.1, 0.125, 0.13, 0.5, 0.51, 0],
    ),
    # (values whose float division is inexact, like 0.07 / 0.01, are left out: the validator's float
    # arithmetic calls them invalid, the compiler's decimal arithmetic valid)
    # bounds that ask for a sign only: every spelling, exponents included (json.dumps writes 1e-06)
    "number-sign": ({"type": "number", "minimum": 0}, [0, 3, 1e-06, 2.5e20, -1e-09, -0.0, -3]),
    "number-positive": ({"type": "number", "exclusiveMinimum": 0}, [1e-06, 5e30, 0, 0.0, -2e-07]),
    "number-nonpositive": ({"type": "number", "maximum": 0}, [-1e-06, 0, -0.0, 1e-300, -5]),
    "number-multiple": ({"type": "number", "multipleOf": 0.01}, [1, 1.5, 1.25, 1.255, -0.5, 0.001]),
    # c / 10^n with c not 1: a walk over remainders mod c (values chosen so float division is exact)
    "number-multiple-2.5": ({"type": "number", "multipleOf": 2.5}, [0, 2.5, 5, 7.5, -12.5, 100, 1, 2.4, 3.75]),
    "number-multiple-0.25": (
        {"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 2},
        [0, 0.25, 0.5, 1.75, 2, 2.25, 0.3, -0.25, 0.125],
    ),
    "number-multiple-6.75": ({"type": "number", "multipleOf": 6.75}, [0, 6.75, 13.5, 20.25, -27, 6.5, 7, 1.35, 27.5]),
    "number-multiple-0.75": ({"type": "number", "multipleOf": 0.75}, [0, 0.75, 1.5, 2.25, -3, 0.5, 1, 0.25]),
    "string-length": (
        {"type": "string", "minLength": 2, "maxLength": 3},
        ["", "a", "ab", "abc", "abcd", "é\n", '"\\'],
    ),
    "string-pattern": ({"type": "string", "pattern": "b+c"}, ["abbcd", "ac", "bc", "", "a\nbc"]),
    "string-anchored": (
        {"type": "string", "pattern": "^[a-z]{2}\\d$", "maxLength": 5},
        ["ab1", "ab12", "Ab1", ""],
    ),
    "pattern-decoded": ({"type": "string", "pattern": '^a"b$'}, ['a"b', "ab", 'a\\"b']),
    "format-date": ({"type": "string", "format": "date"}, ["2024-02-29", "2023-02-29", "2024-13-01", "x"]),
    "format-ipv4": ({"format": "ipv4"}, ["1.2.3.4", "256.1.1.1", "01.2.3.4", 5]),
    "format-uuid": (
        {"format": "uuid"},
        ["2eb8aa08-aa98-11ea-b4aa-73b441d16380", "2eb8aa08aa9811eab4aa73b441d16380"],
    ),
    # (enum and const values are generated in their own spelling only: 1.0 for 1 is not, see below)
    "enum": ({"enum": ["a", 1, None, [1, 2], {"x": 1}]}, ["a", "b", 1, 2, None, [1, 2], [2, 1], {"x": 1}]),
    "const-with-type": ({"type": "string", "const": "hi"}, ["hi", "ho", 1]),
    "enum-and-length": ({"enum": ["a", "bb", "ccc"], "maxLength": 2}, ["a", "bb", "ccc"]),
    "object-required": (
        OBJ,
        [{"b": "x"}, {"a": 1, "b": "x"}, {"a": 1}, {"b": "x", "c": True}, {"b": 1}, {"b": "", "z": 1}],
    ),
    "object-closed": (
        {**OBJ, "additionalProperties": False},
        [{"b": "x"}, {"a": 1, "b": "x", "c": False}, {"b": "x", "z": 1}, {}],
    ),
    "additional-schema": (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": {"type": "string"},
        },
        [{"a": 1}, {"a": 1, "z": "s"}, {"z": "s", "y": "t"}, {"z": 1}, {"a": "x"}],
    ),
    "pattern-properties": (
        {"type": "object", "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False},
        [{}, {"x_a": 1}, {"x_a": 1, "x_b": 2}, {"x_a": "s"}, {"y": 1}],
    ),
    # more patterns than a 2**k split of names could hold: overlapping ones make names of several kinds
    "pattern-properties-many": (
        {"type": "object", "additionalProperties": False, "patternProperties": {
            "^[a-z]+$": {"type": "integer"}, "^MD5$": {"type": "string"}, "^SHA-1$": {"type": "string"},
            "^x-": {"type": "boolean"}, "^y-": {"type": "null"}, "^a": {"minimum": 3}, "^b": {"maximum": 3},
            "^(cdn|Cdn)$": {"type": "string"}}},  # fmt: skip
        [{}, {"abc": 3}, {"abc": 1}, {"b": 1}, {"b": 4}, {"MD5": "x"}, {"MD5": 1}, {"x-q": True}, {"x-1": 1},
         {"y-": None}, {"cdn": "s"}, {"cdn": 1}, {"Cdn": "s"}, {"Q": 1}, {"SHA-1": "s", "zz": 3}],  # fmt: skip
    ),
    "property-names": ({"type": "object", "propertyNames": {"maxLength": 2}}, [{}, {"ab": 1}, {"abc": 1}]),
    # `not` refuses values of every type: only its strings concern names (a nonterminal once leaked here)
    "property-names-not-enum": (
        {"type": "object", "properties": {"a": {}, "1": {}}, "propertyNames": {"not": {"enum": ["1", "3", 1]}},
         "additionalProperties": {"type": "integer"}},  # fmt: skip
        [{}, {"a": 1}, {"1": 1}, {"3": 2}, {"a": 1, "2": 5}, {"13": 1}],
    ),
    "min-max-properties": (
        {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 1, "maxProperties": 2},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"c": 1}],
    ),
    "dependent-required": (
        {"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}],
    ),
    # more dependencies than a 2**k split holds: those of required triggers always apply, and
    # triggers requiring the same names split once ("one of them" or "none")
    "dependent-required-many": (
        {"type": "object", "properties": {n: {"type": "integer"} for n in "abcdefgh"}, "required": ["a", "b"],
         "dependentRequired": {"a": ["c"], "b": ["c", "d"], "c": ["e"], "f": ["g"], "h": ["g"], "e": ["a"],
                               "d": []}},  # fmt: skip
        [{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, {"a": 1, "b": 1, "c": 1, "d": 1},
         {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1},
         {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "g": 1, "h": 1}, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "h": 1},
         {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "g": 1}],  # fmt: skip
    ),
    "dependent-schemas": (
        {
            "properties": {"a": {}, "b": {}},
            "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}},
        },
        [{"a": 1, "b": 2}, {"a": 1, "b": "x"}, {"b": "x"}],
    ),
    "items": (
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        [[], [1], [1, 2, 3], [1, 2, 3, 4], ["x"]],
    ),
    "prefix-items": (
        {"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        [[], [1], [1, "a"], [1, "a", 2], ["a"]],
    ),
    "tuple-draft7": (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "items": [{"type": "integer"}],
            "additionalItems": {"type": "string"},
        },
        [[1], [1, "a", "b"], [1, 2], ["a"]],
    ),
    "contains": (
        {"type": "array", "contains": {"type": "integer"}, "minContains": 1, "maxContains": 2},
        [[], ["a"], [1], ["a", 1, "b", 2], [1, 2, 3]],
    ),
    # without maxContains: any items around the counted ones (no complement of the contains schema)
    "contains-at-least": (
        {"type": "array", "contains": {"type": "integer"}, "minContains": 2, "minItems": 1},
        [[], [1], [1, 2], ["a", 1, "b", 2, "c"], [1, "a"], [1, 2, 3], ["a", "b"], [1.5, 2, 3]],
    ),
    "contains-none-needed": (
        {"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "integer"}, "minContains": 0},
        [[], ["a"], [1, "a"], [None]],
    ),
    "unique-enum": (
        {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True},
        [["a", "b"], ["a", "a"], ["c", "b", "a"], []],
    ),
    "unique-bool": (
        {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
        [[True, False], [True, True], []],
    ),
    "anyOf": ({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, [1, "a", "ab", None]),
    "oneOf-overlap": ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 2, 3.5, "x"]),
    "oneOf-objects": (
        {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "properties": {"a": {}, "b": {}}},
        [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {}],
    ),
    "allOf": ({"allOf": [{"type": "string"}, {"minLength": 2}, {"maxLength": 3}]}, ["a", "ab", "abcd", 1]),
    "allOf-objects": (
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]
        },
        [{"a": 1, "b": "x"}, {"b": "x"}, {"a": "s", "b": "x"}, {"a": 1}],
    ),
    "not": ({"not": {"type": ["string", "object"]}}, [1, None, "x", {}, [1]]),
    "if-then-else": (
        {"if": {"type": "integer"}, "then": {"minimum": 10}, "else": {"type": "string"}},
        [10, 9, "x", None],
    ),
    "ref-defs": (
        {
            "$defs": {"pos": {"type": "integer", "minimum": 1}},
            "type": "array",
            "items": {"$ref": "#/$defs/pos"},
        },
        [[1, 2], [0], []],
    ),
    "ref-anchor": ({"$defs": {"s": {"$anchor": "short", "maxLength": 2}}, "$ref": "#short"}, ["ab", "abc"]),
    "ref-pointer-escape": ({"$defs": {"a/b": {"type": "null"}}, "$ref": "#/$defs/a~1b"}, [None, 1]),
    "boolean-schemas": ({"properties": {"t": True, "f": False}}, [{"t": 1}, {"f": 1}, {}]),
    "escapes": ({"type": "string", "maxLength": 2}, ["\u00e9\n", "\t\u0001", "\ud7ff", "\U0001f600", '"""']),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_keyword_family_matches_validator(name):
    schema, instances = CASES[name]
    node = json_schema_to_node(schema)
    for inst in instances:
        expected = is_valid(schema, inst)
        for compact in (False, True):
            text = dumps(inst, compact)
            got = accepts(node, text)  # (a failing assert would print the node)
            assert got == expected, (name, text, expected)


# Formats follow the RFCs' grammars, stricter than jsonschema's own checkers (which for email only
# look for an "@"), so their expectations are written out.
FORMATS = [
    ("date-time", "2024-02-29T23:59:60Z", True),
    ("date-time", "2024-02-29t10:00:00.5+05:30", True),
    ("date-time", "2023-02-29T10:00:00Z", False),
    ("date-time", "2024-01-01T24:00:00Z", False),
    ("time", "10:00:00-08:00", True),
    # RFC 3339 5.7: a leap second is 23:59:60 UTC, written in any offset
    ("time", "23:59:60z", True),
    ("time", "23:59:60-00:00", True),
    ("time", "01:29:60+01:30", True),
    ("time", "23:29:60.5+23:30", True),
    ("time", "15:59:60-08:00", True),
    ("time", "00:29:60-23:30", True),
    ("time", "00:00:60+00:01", True),
    ("time", "22:59:60Z", False),
    ("time", "23:58:60+00:00", False),
    ("time", "23:59:60+01:00", False),
    ("time", "23:59:60-00:30", False),
    ("time", "00:00:60-00:01", False),
    ("time", "00:00:61+00:01", False),
    ("date-time", "1998-12-31T15:59:60.123-08:00", True),
    ("date-time", "2016-12-31T24:59:60+01:00", False),
    ("time", "10:00:00", False),
    ("duration", "P1Y2M3DT4H5M6S", True),
    ("duration", "P2W", True),
    ("duration", "PT", False),
    ("duration", "P1D2H", False),
    ("email", "joe.bloggs@example.com", True),
    ("email", '"joe bloggs"@example.com', True),
    ("email", "joe@[IPv6:::1]", True),
    ("email", "a..b@c.d", False),
    ("email", ".a@b.c", False),
    ("email", "\u03b4@example.com", False),
    # RFC 6531: non-ASCII in atext, qtextSMTP and the domain's labels (read as RFC 6532 does: not
    # checked against IDNA2008, so a label out of NFC passes), never in a quoted pair nor for the "@"
    ("idn-email", "\uc2e4\ub840@\uc2e4\ub840.\ud14c\uc2a4\ud2b8", True),
    ("idn-email", '"\u03b4\u03bf\u03ba \u03b9"@example.com', True),
    ("idn-email", "user@cafe\u0301.com", True),
    ("idn-email", "\U0001d54f\u0085\uffff@[IPv6:::1]", True),
    ("idn-email", "joe.bloggs@example.com", True),
    ("idn-email", "user\uff20example.com", False),
    ("idn-email", '"\\\u00e9"@example.com', False),
    ("idn-email", "\u00e9@\u00e9-.com", False),
    ("idn-email", "\u00e9..a@b.c", False),
    ("idn-email", "a@" + "\u00e9" * 64 + ".com", False),
    ("idn-email", "\u00e9" * 64 + "@" + "a" * 63 + "." + "b" * 63 + "." + "c" * 61, True),  # 254 characters
    ("idn-email", "\u00e9" * 64 + "@" + "a" * 63 + "." + "b" * 63 + "." + "c" * 62, False),
    ("hostname", "www.example.com", True),
    ("hostname", "-bad.com", False),
    ("hostname", "a" * 64 + ".com", False),
    ("ipv6", "::ffff:192.168.0.1", True),
    ("ipv6", "1:2:3:4:5:6:7:8:9", False),
    ("uri", "https://user@example.com:8080/a/b?q=1#frag", True),
    ("uri", "urn:isbn:0451450523", True),
    ("uri", "//example.com/a", False),
    ("uri", "http://exa mple.com", False),
    ("uri-reference", "../a/b?c", True),
    ("uri-reference", "\\\\share", False),
    # RFC 3987: IRIs add ucschar (not the private use ranges, which only a query may hold)
    ("iri", "http://\u4f8b\u3048.\u30c6\u30b9\u30c8/\u00fcber?q=\ue000#\u00e9", True),
    ("iri", "https://example.com/\U0001f600", True),
    ("iri", "http://example.com/\ue000", False),
    ("iri", "http://a/#\ue000", False),
    ("iri", "\u4f8b\u3048", False),
    ("iri", "http://exa mple.com", False),
    ("iri-reference", "\u4f8b\u3048/\u00fc?x", True),
    ("iri-reference", "//h\u00f6st/p", True),
    ("iri-reference", "a\ufffeb", False),
    ("uri-template", "http://example.com/dictionary/{term:1}/{term}", True),
    ("uri-template", "{+path,x}/here{?q*,lang}{#frag}{.a.b}", True),
    ("uri-template", "http://example.com/{term:10000}", False),
    ("uri-template", "http://example.com/dictionary/{term:1}/{term", False),
    ("uri-template", "{}", False),
    ("uri-template", "a b", False),
    ("uri-template", "a'b{c}", True),
    ("uri-template", "a%4", False),
]


# format "regex": ECMA-262 patterns as `new RegExp(p, "u")` reads them (the JSON Schema Test Suite's
# dialect), groups nested to 3, at most one named group
_REGEX_VALID = [r"([abc])+\s+$", "^\\s*(it|describe)\\(\\s*['\"]([^'\"]+)['\"]", r"^[A-Za-z0-9_-]+$",
                r"^(feat|fix)(\(.+\))?: .{1,72}$", r"x{2}y{3,}z{10,10}w{9,999}?", r"\{\{.*?\}\}|\u00e9\x41",
                r"((a(b))|)", r"[^^]\b[\d-]", "", "[]", "[^]", "[-]", r"\cA[\cz-]", "(?<name>x)", r"(?<n>a)\k<n>",
                r"((?<n>a)|b)*\k<n>+", "(?=a)b", "(?!a)", "(?<=a+)b", "(?<!a)b", r"\x3c"]  # fmt: skip
_REGEX_INVALID = ["^(abc]", "\\a", "(?P<name>x)", "(?P<n>a)(?P=n)", "(?#comment)a", "(?i)abc", "(?ims)abc", "a**",
                  "[z-a]", "x{3,2}", "x{10,9}", "(", ")", "[", "a{", "\\", "*a", "^*", "(?=a)*", "(?<=a)?",
                  r"\k<n>", r"(?<n>a)\k<m>", "(?<a>x)(?<a>y)", "(?<>x)", "(?<1>x)", "]", "}"]  # fmt: skip
# valid, not generated: groups nested 4 deep, bounds past 999, two named groups, a reference before its
# group or to a longer name, a literal "<" (written \x3c instead)
_REGEX_NARROWED = ["((((a))))", "x{1,1000}", "(?<a>x)(?<b>y)", r"\k<n>(?<n>a)", r"(?<ab>a)\k<ab>", "a<b"]
FORMATS += [("regex", p, True) for p in _REGEX_VALID] + [("regex", p, False) for p in _REGEX_INVALID + _REGEX_NARROWED]


def _ecma_valid(patterns: list[str]) -> list[bool]:
    """Whether each pattern compiles as ``new RegExp(p, "u")`` in Node.js (skips without node)."""
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: no ECMA-262 engine to check generated patterns against")
    script = ("const ps = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(ps.map(p => { try { new RegExp(p, 'u'); return true } catch (e) "
              "{ return false } })))")  # fmt: skip
    out = subprocess.run([node, "-e", script], input=json.dumps(patterns), capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    return json.loads(out.stdout)


def test_regex_format_cases_agree_with_an_ecma_engine():
    """The examples above are what an ECMA-262 engine says (the narrowed ones are valid there)."""
    valid = _REGEX_VALID + _REGEX_NARROWED
    assert _ecma_valid(valid + _REGEX_INVALID) == [True] * len(valid) + [False] * len(_REGEX_INVALID)


def test_generated_regex_formats_compile_everywhere():
    """Every string of up to 3 characters over the syntax characters that the "regex" format accepts,
    and the patterns of random walks through its grammar (from openings that name a group or look
    around), compile in an ECMA-262 engine in unicode mode."""
    import itertools
    import json
    import random

    import numpy as np
    from grammar_oracle import allowed_tokens, tiny_vocab

    from guided.grammar.compiler import GrammarCompiler
    from guided.schema.compiler import compile_json_schema

    node = json_schema_to_node({"type": "string", "format": "regex"})
    alphabet = list("a()[]{}\\-^$*+?|.,1d<>k=!:c")
    found = []
    for n in range(4):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            if accepts(node, dumps(text)):
                found.append(text)
    chars = [bytes([b]) for b in range(32, 127)]
    vocab = tiny_vocab(chars)
    grammar = compile_json_schema(GrammarCompiler(vocab), {"type": "string", "format": "regex"})
    rng, walked = random.Random(7), []
    weights = [10.0 if chr(32 + i) in "()[]{}\\<>k?=!*+^$|-c" else 1.0 for i in range(len(chars))]
    for opening in ['"', '"(?<n>', '"(?<=', '"(?<ab>', '"a(?!', '"((?<k>a)|b)\\\\k<k>']:  # (JSON: one backslash)
        for _ in range(40):
            m, text = grammar.matcher(), opening.encode()
            assert m.accept_bytes(text)
            for _ in range(rng.randrange(40)):
                ids = [int(i) for i in np.flatnonzero(allowed_tokens(m, vocab)) if i < len(chars) and i != 2]
                i = rng.choices(ids, weights=[weights[i] for i in ids])[0]  # (2: the closing quote)
                assert m.accept_token(i)
                text += chars[i]
            end = m.shortest_completion()  # the grammar's shortest way to close the groups and the string
            assert m.accept_tokens(end.tokens) == len(end.tokens) and m.is_accepting()
            walked.append(json.loads(text + end.text))
    assert len(found) > 1000 and len(walked) == 240
    patterns = found + walked
    assert [p for p, ok in zip(patterns, _ecma_valid(patterns), strict=True) if not ok] == []


@pytest.mark.parametrize("fmt, text, expected", FORMATS)
def test_formats(fmt, text, expected):
    node = json_schema_to_node({"type": "string", "format": fmt})
    assert accepts(node, dumps(text)) == expected


@pytest.mark.parametrize(
    "name", ["int-range", "string-length", "object-closed", "oneOf-overlap", "not", "unique-enum"]
)
def test_naive_oracle_agrees(name):
    schema, instances = CASES[name]
    node = json_schema_to_node(schema)
    for inst in instances:
        text = dumps(inst, True)
        if len(text) <= 24:
            assert fullmatch(node, text) == accepts(node, text), text


def test_constants_keep_one_spelling():
    node = json_schema_to_node({"enum": [1, 2.5]})
    assert accepts(node, "1") and accepts(node, "2.5")
    assert not accepts(node, "1.0")  # equal, but a constant stays forced (a restriction, never a relaxation)
    # a float the schema writes 2.0 is also taken as 2, as JSON writers (JavaScript's, Go's) spell it
    node = json_schema_to_node({"enum": [2.0, 0.5]})
    assert accepts(node, "2.0") and accepts(node, "2") and accepts(node, "0.5")
    assert not accepts(node, "2.00") and not accepts(node, "3")


def test_nullable_adds_null():
    node = json_schema_to_node({"type": "string", "nullable": True})
    assert accepts(node, "null") and accepts(node, '"x"') and not accepts(node, "1")


def test_declared_order_and_whitespace_policy():
    node = json_schema_to_node(OBJ)
    assert accepts(node, '{"a": 1, "b": "x", "c": true}')
    assert accepts(node, '{"b": "x", "a": 1, "c": true}')  # required names first: the one other order
    assert not accepts(node, '{"a": 1, "c": true, "b": "x"}')
    assert not accepts(node, '{"c": true, "a": 1, "b": "x"}')
    assert accepts(node, '{\n  "b" :  "x"\n}')
    assert not accepts(node, ' {"b": "x"}') and not accepts(node, '{"b": "x"}\n')
    assert not accepts(node, '{"b":' + " " * 9 + '"x"}')  # runs of at most max_ws
    compact = json_schema_to_node(OBJ, whitespace="compact")
    assert accepts(compact, '{"b":"x"}') and not accepts(compact, '{"b": "x"}')


def test_strict_forbids_unlisted_properties():
    assert accepts(json_schema_to_node(OBJ), '{"b": "x", "z": 1}')
    assert not accepts(json_schema_to_node(OBJ, strict=True), '{"b": "x", "z": 1}')


def test_schema_free_values_nest_to_any_depth():
    deep = [[[[1]]]]
    assert accepts(json_schema_to_node({}, any_depth=4), dumps(deep))
    assert not accepts(json_schema_to_node({}, any_depth=3), dumps(deep))


RECURSIVE = {
    "$defs": {
        "t": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}
    },
    "$ref": "#/$defs/t",
}


def test_recursion_needs_the_context_free_path_unless_unrolled():
    from guided.grammar.cfg_ir import CfgGrammar
    from guided.schema.compiler import json_schema_to_grammar

    assert isinstance(json_schema_to_grammar(RECURSIVE), CfgGrammar)
    with pytest.raises(SchemaError, match="context-free path"):
        json_schema_to_node(RECURSIVE)  # the regex-only API
    node = json_schema_to_node(RECURSIVE, max_depth=2)
    assert accepts(node, '{"kids": [{"kids": []}]}')


@pytest.mark.parametrize(
    "schema, where",
    [
        (
            {"properties": {"a": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}},
            "#/properties/a/uniqueItems",
        ),
        ({"properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}, "#/properties/a/pattern"),
        ({"items": {"type": "integer", "multipleOf": 1009}}, "#/items/multipleOf"),
        ({"$dynamicRef": "#x"}, "#/$dynamicRef"),
        ({"format": "idn-hostname"}, "#/format"),
        ({"$ref": "http://example.com/remote.json"}, "#/$ref"),
    ],
)
def test_unenforceable_keywords_name_their_path(schema, where):
    with pytest.raises(SchemaError) as e:
        json_schema_to_node(schema)
    assert e.value.path == where


def test_lenient_relaxes_with_a_warning():
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        node = json_schema_to_node(schema, lenient=True)
    assert any("uniqueItems" in str(x.message) for x in w)
    assert accepts(node, '["a", "b"]')


def test_registry_resolves_remote_refs_without_fetching():
    reg = {"http://example.com/int.json": {"type": "integer"}}
    node = json_schema_to_node({"$ref": "http://example.com/int.json"}, registry=reg)
    assert accepts(node, "3") and not accepts(node, '"3"')


@pytest.mark.parametrize(
    "schema",
    [
        # draft-07 ignores `id` (draft-04's keyword): the pointer resolves against the root
        {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/definitions/n",
         "definitions": {"p": {"id": "p", "type": "integer"}, "n": {"id": "n", "$ref": "#/definitions/p"}}},
        # draft-04 ignores `$id` (draft-06's)
        {"$schema": "http://json-schema.org/draft-04/schema#", "$ref": "#/definitions/n",
         "definitions": {"p": {"type": "integer"}, "n": {"$id": "/definitions/n", "$ref": "#/definitions/p"}}},
        # a definition copied in with its own `id`, pointing from the root: tried against the root
        {"$ref": "#/definitions/lemon", "definitions": {"lemon": {
            "$schema": "http://json-schema.org/draft-04/schema", "id": "schema/lemon",
            "definitions": {"size": {"type": "integer"}}, "$ref": "#/definitions/lemon/definitions/size"}}},
    ],
)  # fmt: skip
def test_ids_follow_the_draft_and_root_pointers_resolve(schema):
    node = json_schema_to_node(schema)
    assert accepts(node, "3") and not accepts(node, '"3"')


def test_an_inner_id_still_makes_a_base():
    # draft-04: `id` starts a new resource; a pointer inside it resolves there first
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "properties": {
        "a": {"id": "http://x.test/a.json", "definitions": {"t": {"type": "string"}},
              "allOf": [{"$ref": "#/definitions/t"}]}},
        "definitions": {"t": {"type": "integer"}}}  # fmt: skip
    node = json_schema_to_node(schema)
    assert accepts(node, '{"a": "s"}') and not accepts(node, '{"a": 1}')
    with pytest.raises(SchemaError, match="does not resolve"):
        json_schema_to_node({"$ref": "#/definitions/missing", "definitions": {}})


def test_bounds():
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(50)}}
    with pytest.raises(LimitError):
        json_schema_to_node(wide, max_nodes=10)
    with pytest.raises(CompileTimeoutError):
        json_schema_to_node(wide, timeout_s=1e-9)


def test_schema_text_and_unsatisfiable():
    assert accepts(json_schema_to_node('{"type": "null"}'), "null")
    with pytest.raises(SchemaError, match="accepts no instance"):
        json_schema_to_node({"allOf": [{"type": "string"}, False]})


@pytest.mark.parametrize(
    "schema, instances",
    [
        # draft-04 has no if/then/else and no const: its validators ignore them, and so does the grammar
        ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
          "properties": {"kind": {"type": "string"}, "if": {"type": "integer"}},
          "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x"]}},
         [{"kind": "a"}, {"kind": "b", "if": 1}, {"kind": "a", "if": "no"}]),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"v": {"const": 1}}},
         [{"v": 2}, {"v": 1}]),
        # draft-07 has if/then but no dependentRequired
        ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
          "dependentRequired": {"a": ["b"]}, "if": {"required": ["a"]}, "then": {"required": ["c"]}},
         [{"a": 1}, {"a": 1, "c": 2}, {"b": 1}]),
        # no $schema: every keyword applies
        ({"type": "object", "properties": {"v": {"const": 1}}}, [{"v": 2}, {"v": 1}]),
    ],
    ids=["draft4-if-const", "draft4-const", "draft7-dependentRequired", "no-draft"],
)  # fmt: skip
def test_keywords_a_declared_draft_does_not_have_are_ignored_as_its_validator_does(schema, instances):
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        node = json_schema_to_node(schema)
    assert any("ignored" in str(w.message) for w in caught) == ("$schema" in schema)
    for value in instances:
        assert accepts(node, dumps(value)) == validator.is_valid(value), value


def test_property_dependencies_split_exactly_into_the_cases_that_are_not_empty():
    """Each dependency's trigger present or absent: 2^n cases, of which a chain leaves few (a name
    cannot be both required and absent). The cycle a -> b -> ... -> g -> a leaves two (none or all);
    seven independent dependencies leave 128, past the bound of 64 cases."""
    import itertools

    import jsonschema

    names = "abcdefg"
    deps = {names[i]: [names[(i + 1) % 7]] for i in range(6)}  # a->b, b->c, ..., f->g: none settled
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}, "dependentRequired": deps}
    for closing in (False, True):
        if closing:
            deps["g"] = ["a"]  # the cycle: before cases were counted, a limit of 6 dependencies
        node = json_schema_to_node(schema)
        validator = jsonschema.Draft202012Validator(schema)
        checked = 0
        for k in range(8 if closing else 4):
            for chosen in itertools.combinations(names, k):
                value = {n: 1 for n in names if n in chosen}
                assert accepts(node, dumps(value)) == validator.is_valid(value), value
                checked += 1
        assert checked == (128 if closing else 1 + 7 + 21 + 35)
    independent = {"type": "object", "dependentRequired": {f"t{i}": [f"n{i}"] for i in range(7)}}
    with pytest.raises(LimitError, match="more than 64 cases"):
        json_schema_to_node(independent)


def test_dependent_member_counts_narrow_the_objects_own_bounds():
    """``{"dependencies": {"error": {"maxProperties": 1}}}`` (an error result has no other member): the
    count bounds the case's members instead of being intersected with the object, whose emptiness
    searches over schema-free values took seconds per mask (Github_medium---o55244). Exact, and the
    lowered language holds no intersection."""
    import itertools

    import jsonschema

    from guided.grammar.regex_ast import And

    schema = {"type": "object", "properties": {"error": {"type": "string"}, "a": {}},
              "dependencies": {"error": {"maxProperties": 1}, "a": {"minProperties": 3}}}  # fmt: skip
    node = json_schema_to_node(schema)
    stack, seen = [node], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        assert not isinstance(x, And)
        stack.extend(getattr(x, "items", ()) or ([x.item] if hasattr(x, "item") else []))
    validator = jsonschema.Draft7Validator(schema)
    members = {"error": '"e"', "a": "[1]", "b": "{}", "c": "null"}
    for k in range(5):
        for chosen in itertools.combinations(members, k):
            text = "{" + ",".join(f'"{n}":{members[n]}' for n in chosen) + "}"
            assert accepts(node, text) == validator.is_valid(json.loads(text)), text


def test_dependent_schemas_that_only_require_names_are_cases_beside_recursion(vocab_builtin):
    """TextMate grammars (SchemaStore's tmlanguage): ``begin`` needs ``end`` or ``while``, each of those
    needs ``begin``, and patterns nest. The anyOf of ``required`` splits the object into cases instead
    of being intersected with it, which a recursive object cannot be (before: a SchemaError)."""
    import jsonschema

    from guided.grammar.compiler import GrammarCompiler
    from guided.schema.compiler import compile_json_schema

    schema = {"type": "object", "properties": {
        "begin": {"type": "string"}, "end": {"type": "string"}, "while": {"type": "string"},
        "patterns": {"type": "array", "items": {"$ref": "#"}}},
        "dependencies": {"begin": {"anyOf": [{"required": ["end"]}, {"required": ["while"]}]},
                         "end": ["begin"], "while": ["begin"]}}  # fmt: skip
    grammar = compile_json_schema(GrammarCompiler(vocab_builtin), schema, whitespace="compact", key_order="any")
    validator = jsonschema.Draft7Validator(schema)
    texts = ['{}', '{"begin":"a","end":"b"}', '{"begin":"a","while":"b"}', '{"begin":"a"}', '{"end":"b"}',
             '{"patterns":[{"begin":"x","end":"y","patterns":[{}]}]}', '{"patterns":[{"patterns":[{"while":"w"}]}]}',
             '{"while":"w","begin":"a","end":"e"}', '{"patterns":[{"begin":"x"}]}']  # fmt: skip
    for text in texts:
        m = grammar.matcher()
        got = m.accept_text(text) and m.is_accepting()
        assert got == validator.is_valid(json.loads(text)), text


def _below(node):
    stack, seen = [node], set()
    while stack:
        x = stack.pop()
        if id(x) not in seen:
            seen.add(id(x))
            yield x
            stack.extend(getattr(x, "items", ()) or ([x.item] if hasattr(x, "item") else []))


def _objects_intersected(node) -> bool:
    """Whether an intersection below holds an object's language (a ``{``): lexical ones, a name
    class minus the declared names, are no search over members."""
    from guided.grammar.regex_ast import And, Chars

    brace = Chars(((ord("{"), ord("{")),))
    return any(isinstance(x, And) and any(y == brace for y in _below(x)) for x in _below(node))


@pytest.mark.parametrize("count", [{"maxProperties": 2}, {"minProperties": 3}])
def test_dependencies_that_make_names_absent_are_cases(count):
    """MaskBench's Handwritten dep7 / dep8 shape: names from a pattern, ``allOf`` of dependencies whose
    schemas say which names are present or absent (``required``, ``not: {required}``, ``anyOf`` and
    ``allOf`` of them) and a required name. The allOf merges into the object (its patternProperties
    are the only member keywords) and every such dependency splits the object into cases: no
    intersection is left (before: an intersection of object languages over schema-free values, whose
    first name mask ran past the 5 s bound). Exact against jsonschema on every set of up to four
    names, in any order; ``f`` is absent where ``a`` is, though no dependency is triggered by it, and
    an unknown keyword (``error``) is ignored there as everywhere (Handwritten oneof8)."""
    import itertools

    import jsonschema

    schema = {"type": "object", "patternProperties": {"^[a-f]$": True}, "additionalProperties": False,
              "allOf": [{"dependencies": {
                  "a": {"anyOf": [{"required": ["c"]}, {"required": ["b"]}], "not": {"required": ["f"]}},
                  "b": {"not": {"required": ["c"]}},
                  "c": {"allOf": [{"required": ["e"]}, {"not": {"required": ["d", "b"]}}]},
                  "d": {"not": {"required": ["e"]}, "error": {"not": {}}}}}, {"required": ["a"]}], **count}  # fmt: skip
    node = json_schema_to_node(schema)
    merged = not _objects_intersected(node)  # (a bool: a failing assert would print the node)
    assert merged
    validator = jsonschema.Draft7Validator(schema)
    valid = 0
    for k in range(5):
        for chosen in itertools.combinations("abcdefg", k):
            value = {n: True for n in chosen}
            got = any(accepts(node, "{" + ",".join(f'"{n}":true' for n in order) + "}")
                      for order in itertools.permutations(chosen))  # fmt: skip
            assert got == validator.is_valid(value), value
            valid += got
    assert valid == (1 if "maxProperties" in count else 3)  # {a, b}; {a, b, d}, {a, b, e}, {a, c, e}


def test_pattern_properties_merge_only_beside_parts_without_member_keywords():
    """``allOf`` parts merge into a schema with ``patternProperties`` when no other part says which
    schema a member's value meets (a name another part declares could match a pattern)."""
    from guided.schema.merge import merge

    base = {"patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}
    assert merge([base, {"required": ["x1"], "maxProperties": 2}]) == {**base, "required": ["x1"], "maxProperties": 2}
    assert merge([base, {"properties": {"x1": {"minimum": 3}}}]) is None
    assert merge([base, {"additionalProperties": {"type": "string"}}]) is None
    assert merge([base, {"patternProperties": {"^y": True}}]) is None


def test_one_of_branches_apart_only_beside_their_siblings_skip_the_complements():
    """GeoJSON's shape: the branches name `type` values but only the schema beside them requires
    `type`. Read with it, they are disjoint, so oneOf is their union (no complement); the language
    stays exact."""
    import jsonschema

    from guided.schema.facts import disjoint
    from guided.schema.resolver import SchemaResolver

    branches = [{"properties": {"type": {"enum": ["Point"]}, "c": {"type": "array"}}},
                {"properties": {"type": {"enum": ["Line"]}, "c": {"type": "array", "minItems": 2}}}]  # fmt: skip
    beside = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}
    resolver = SchemaResolver({})
    assert not disjoint(branches, resolver, "")  # alone, an object without "type" matches both
    assert disjoint(branches, resolver, "", beside)
    schema = {**beside, "oneOf": branches}
    node = json_schema_to_node(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in ({"type": "Point", "c": []}, {"type": "Line", "c": [1]}, {"type": "Line", "c": [1, 2]},
                  {"type": "Other"}, {"c": []}, {"type": "Point"}):  # fmt: skip
        assert accepts(node, dumps(value)) == validator.is_valid(value), value


def test_one_of_told_apart_by_an_optional_discriminator():
    """The inheritance shape (vzlogger's meters): each branch is ``allOf`` of a shared base and a
    ``properties`` naming its own ``protocol`` value, which no branch requires. With P present at
    most one branch matches; without it, two branches are the bare base and every branch lies in
    it, so nothing matches exactly one: oneOf is anyOf of the branches with ``protocol`` required
    (no complement). Without the second bare branch ``{}`` matches exactly one branch and the
    complements stay; both exact against jsonschema, in either key order."""
    import jsonschema

    from guided.schema.facts import discriminator
    from guided.schema.resolver import SchemaResolver

    def kind(values, **more):
        own = {"properties": {"protocol": {"type": "string", "enum": values}, **more.pop("properties", {})}, **more}
        return {"allOf": [{"$ref": "#/$defs/base"}, own]}

    defs = {"base": {"type": "object", "properties": {"on": {"type": "boolean"}, "n": {"type": "integer"}}},
            "invalid": kind(["invalid"]), "therm": kind(["w1therm"]),
            "s0": kind(["s0"], properties={"dev": {"type": "string"}}, required=["dev"]),
            "oms": kind(["oms", "mbus"], properties={"key": {"type": "string"}})}  # fmt: skip
    refs = [{"$ref": f"#/$defs/{k}"} for k in ("invalid", "s0", "oms", "therm")]
    values = [{}, {"on": True}, {"dev": "x"}, {"protocol": "s0", "dev": "x"}, {"protocol": "s0"},
              {"n": 2, "protocol": "oms", "key": "k"}, {"protocol": "mbus", "key": 1}, {"protocol": "w1therm"},
              {"protocol": "invalid", "dev": 3}, {"protocol": "other"}, {"n": "2", "protocol": "oms"}, 1, "s",
              None, []]  # fmt: skip
    for branches, name in ((refs, "protocol"), (refs[:2], None)):
        schema = {"$defs": defs, "oneOf": branches}
        resolver = SchemaResolver(schema)
        assert discriminator(branches, resolver, resolver.root_base) == name
        validator = jsonschema.Draft202012Validator(schema)
        assert validator.is_valid({}) == (name is None)
        for key_order in ("declared", "any"):
            node = json_schema_to_node(schema, key_order=key_order)
            for value in values:
                got, want = accepts(node, dumps(value)), validator.is_valid(value)
                assert got == want, (key_order, len(branches), value)
    # values shared by two branches, or a $ref beside other keywords: not read as a discriminator
    resolver = SchemaResolver({"$defs": defs})
    overlapping = [kind(["invalid", "b"]), kind(["b"]), kind(["c"])]
    assert discriminator(overlapping, resolver, resolver.root_base) is None
    beside = [{"$ref": "#/$defs/invalid", "minProperties": 1}, {"$ref": "#/$defs/therm"}, {"$ref": "#/$defs/s0"}]
    assert discriminator(beside, resolver, resolver.root_base) is None
    assert discriminator(beside[1:] + refs[:1], resolver, resolver.root_base) == "protocol"
    # unevaluatedProperties sees the annotations around it: as a conjunct alone it means something else
    assert discriminator([kind(["x"]), kind(["y"]), kind(["z"])], resolver, resolver.root_base) == "protocol"
    closed = [{"allOf": [*kind([v])["allOf"], {"unevaluatedProperties": False}]} for v in "xyz"]
    assert discriminator(closed, resolver, resolver.root_base) is None


def test_string_patterns_are_apart_only_when_no_string_matches_both():
    """Discriminators spelled as patterns: anchored literals are apart, unanchored ones are not
    (``"atomic compound"`` matches both), nor is a constant a pattern takes."""
    from guided.schema.facts import disjoint
    from guided.schema.resolver import SchemaResolver

    def branch(pattern):
        return {"type": "object", "required": ["t"], "properties": {"t": {"type": "string", "pattern": pattern}}}

    resolver = SchemaResolver({})
    assert disjoint([branch("^atomic$"), branch("^(compound|final)$")], resolver, "")
    assert not disjoint([branch("atomic"), branch("compound")], resolver, "")
    assert not disjoint([branch("^a+$"), branch("^a{2}$")], resolver, "")
    assert disjoint([{"type": "string", "pattern": "^x"}, {"enum": ["yx", "zz", True]}], resolver, "")
    assert not disjoint([{"type": "string", "pattern": "^x"}, {"enum": ["yx", "xz"]}], resolver, "")


def test_unevaluated_properties_beside_all_of_and_ref_see_their_names():
    """unevaluatedProperties beside allOf members and a $ref (2019-09 on: both in place) sees every
    name they evaluate; a member's additionalProperties evaluates every name. Merged into one
    schema, exact against jsonschema (was a SchemaError)."""
    import jsonschema

    defs = {"common": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            "open": {"type": "object", "additionalProperties": True, "allOf": [{"$ref": "#/$defs/common"}]}}  # fmt: skip
    cases = [
        {"$defs": defs, "type": "object", "unevaluatedProperties": False,
         "allOf": [{"$ref": "#/$defs/common"}, {"properties": {"n": {"type": "integer"}}}]},
        {"$defs": defs, "type": "object", "$ref": "#/$defs/common", "properties": {"k": {"type": "boolean"}},
         "unevaluatedProperties": {"type": "integer"}},
        {"$defs": defs, "type": "object", "$ref": "#/$defs/open", "unevaluatedProperties": False},
    ]  # fmt: skip
    values = [{"name": "a"}, {"name": "a", "n": 1}, {"name": "a", "n": "x"}, {"name": "a", "zz": 1},
              {"name": "a", "zz": "s"}, {"name": "a", "k": True, "zz": 2}, {"n": 1}, {}, {"name": 1}]  # fmt: skip
    for schema in cases:
        node = json_schema_to_node(schema)
        validator = jsonschema.Draft202012Validator(schema)
        for value in values:
            assert accepts(node, dumps(value)) == validator.is_valid(value), (schema, value)


def test_unevaluated_properties_beside_one_of_any_of_if_and_not_see_what_holds():
    """unevaluatedProperties beside a oneOf/anyOf sees the names of the branches that hold: one
    variant per set of branches that may hold together (the others' complements beside it, which
    evaluate nothing), or per branch where no instance matches two; beside an if, the if's and the
    then's names where the if holds, else the else's; a not evaluates nothing. Exact against
    jsonschema in any key order (was a SchemaError)."""
    import jsonschema

    branches = [{"properties": {"bar": {"const": "bar"}}, "required": ["bar"]},
                {"properties": {"baz": {"const": "baz"}}, "required": ["baz"]},
                {"properties": {"q": {"type": "integer"}}, "required": ["q"]}]  # fmt: skip
    beside = {"properties": {"foo": {"type": "string"}}, "unevaluatedProperties": False}
    kinds = [{"properties": {"kind": {"const": k}, extra: {"type": "integer"}}, "required": ["kind"]}
             for k, extra in (("a", "x"), ("b", "y"))]  # fmt: skip
    cases = [{**beside, "oneOf": branches[:2]}, {**beside, "anyOf": branches},
             {"type": "object", "oneOf": kinds, "unevaluatedProperties": {"type": "string"}},
             {**beside, "if": branches[0], "then": branches[2], "else": branches[1]},
             {**beside, "if": branches[0]}, {**beside, "if": branches[2], "else": branches[0]},
             {"type": "object", "not": branches[0], "unevaluatedProperties": False},
             {**beside, "not": {"properties": {"foo": {"const": "f"}}}}]  # fmt: skip
    values = [{}, {"bar": "bar"}, {"baz": "baz", "bar": "bar"}, {"foo": "f", "bar": "bar"}, {"bar": "bar", "x": 1},
              {"q": 2, "baz": "baz", "bar": "bar"}, {"q": 1, "foo": 2}, {"kind": "a", "x": 1}, {"kind": "a", "y": 1},
              {"kind": "b", "y": 2, "z": "s"}, {"kind": "b", "z": 3}, {"kind": "c"}, {"foo": "f"}, {"foo": "g"},
              {"q": 1, "bar": "bar"}, {"baz": "baz"}, {"foo": "f", "baz": "baz"}, 5]  # fmt: skip
    for schema in cases:
        node = json_schema_to_node(schema, key_order="any")
        validator = jsonschema.Draft202012Validator(schema)
        for value in values:
            assert accepts(node, dumps(value)) == validator.is_valid(value), (schema, value)


def test_dependencies_on_one_discriminator_split_by_its_value():
    """MongoDB's index mappings: each of many optional members names the ``type`` values it belongs to
    (a dependency whose schema only names values of ``type``). Past the 6 dependencies split as
    combinations, they split as cases on ``type`` (absent, each named value, another value). Exact
    against jsonschema."""
    import jsonschema

    names = ["analyzer", "maxGrams", "minGrams", "tokenization", "dynamic", "fields", "store", "norms"]
    kinds = {"analyzer": ["autocomplete", "string"], "maxGrams": ["autocomplete"], "minGrams": ["autocomplete"],
             "tokenization": ["autocomplete"], "dynamic": ["document"], "fields": ["document"], "store": ["string"],
             "norms": ["string"]}  # fmt: skip
    schema = {"type": "object", "additionalProperties": False,
              "properties": {"type": {"enum": ["autocomplete", "string", "document", "number"]},
                             **{n: {"type": "integer"} for n in names}},
              "dependencies": {n: {"properties": {"type": {"enum": kinds[n]}}} for n in names}}  # fmt: skip
    node = json_schema_to_node(schema)  # declared order: the instances below list members in it
    validator = jsonschema.Draft7Validator(schema)
    values = [{}, {"type": "number"}, {"type": "string", "analyzer": 3, "store": 1, "norms": 2},
              {"type": "string", "maxGrams": 1}, {"maxGrams": 1, "dynamic": 2}, {"type": "document", "fields": 1},
              {"type": "number", "analyzer": 1}, {"type": "autocomplete", "analyzer": 1, "minGrams": 2},
              {"type": "other"}, {"type": "document", "norms": 1}]  # fmt: skip
    for value in values:
        got, want = accepts(node, dumps(value)), validator.is_valid(value)  # booleans: a failure prints no AST
        assert got == want, value


def test_if_cases_keep_values_that_are_not_objects():
    """ifs on a discriminator spread into cases, and a case whose required name must equal two
    constants drops, but only where the case takes objects alone: without ``type: object``,
    ``required`` and ``properties`` hold for every string and number, which every if then lets
    through to its then."""
    for other in ({"const": "b"}, {"enum": ["b", "c"]}):
        schema = {"required": ["kind"], "allOf": [{"if": {"properties": {"kind": {"const": "a"}}}, "then": {"minLength": 2}},
                                                 {"if": {"properties": {"kind": other}}, "then": {"maxLength": 5}}]}  # fmt: skip
        node = json_schema_to_node(schema)
        for value in ["abc", "a", "abcdef", 3, {"kind": "a"}, {"kind": "b"}, {"kind": "d"}, {}, [], None]:
            got = accepts(node, dumps(value))  # (not in the assert: a failure would print the node's repr)
            assert got == is_valid(schema, value), (other, value)


def test_a_compile_reads_the_schema_text_before_walking_for_keywords_its_draft_lacks(vocab_builtin):
    from guided.grammar.compiler import GrammarCompiler
    from guided.schema.compiler import compile_json_schema
    from guided.schema.drafts import for_draft

    draft4 = "http://json-schema.org/draft-04/schema#"
    plain = {"$schema": draft4, "properties": {"v": {"type": "integer"}}}
    assert for_draft(plain, text=json.dumps(plain)) is plain  # nothing to drop: no walk, no copy
    lacking = {"$schema": draft4, "properties": {"v": {"const": 1}}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert for_draft(lacking, text=json.dumps(lacking))["properties"]["v"] == {}
        compiled = compile_json_schema(GrammarCompiler(vocab_builtin), {**lacking, "title": "again"})
    assert sum("ignored" in str(w.message) for w in caught) == 2
    m = compiled.matcher()
    assert m.accept_text('{"v": 2}') and m.is_accepting()  # draft-04 has no const
