"""``format: hostname`` with A-labels: the grammar writes their syntax, the matcher checks each label
where it ends (IDNA2008: Punycode, the code point tables and context rules, the Bidi rule).

Oracles: the cases of RFC 5891-5893 below (valid or not, as the JSON Schema Test Suite has them),
the suite's own ``hostname.json`` where ``../shared`` holds it, and for masks, every token the plain
grammar allows simulated on the checked matcher.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from grammar_oracle import tiny_vocab
from json_schema_oracle import refusals_by_simulation

from guided.errors import SchemaError
from guided.grammar.compiler import GrammarCompiler
from guided.schema.compiler import compile_json_schema
from guided.schema.hostnames import labels_ok, u_label
from guided.schema.unique_runtime import UniqueChecked

SUITE = Path(__file__).resolve().parents[3].parent / "shared/data/json-schema-test-suite/draft2020-12/optional/format"
HOST = {"type": "string", "format": "hostname"}
# (name, valid): A-labels from the test suite's cases of RFC 5891-5893, and plain names
NAMES = [
    ("xn--9n2bp8q.xn--9t4b11yi5a", True),  # example.test in Hangul
    ("XN--9n2bp8q.com", True),  # the prefix in any case
    ("xn--X", False),  # no Punycode
    ("xn--07jt112bpxg.xn--9t4b11yi5a", False),  # U+302E, DISALLOWED
    ("xn--hello-zed", False),  # begins with a nonspacing mark
    ("xn--ll-0ea", True),  # MIDDLE DOT between two "l"s
    ("xn--al-0ea", False),  # MIDDLE DOT without an "l" before it
    ("xn--wva3je", True),  # Greek KERAIA followed by Greek
    ("xn--wva3j", False),  # ... followed by nothing
    ("xn--ngb6iyr", False),  # Arabic-Indic digits mixed with extended ones
    ("xn--11b2ezcw70k", True),  # ZERO WIDTH JOINER after a virama
    ("xn--11b2er09f", False),  # ... after no virama
    ("XN--aa---o47jg78q", False),  # decodes to "--" in the 3rd and 4th places
    ("xn--example-", False),  # decodes to ASCII only
    ("xn---9uc", False),  # not the canonical Punycode of what it decodes to
    ("xn--4dbc5h.com", True),  # Hebrew GERESH after Hebrew; an ASCII label beside it keeps the Bidi rule
    ("1host.xn--4dbc5h", False),  # a right-to-left label makes a digit-first label break the Bidi rule
    ("1host.com", True),  # ... which is fine in a name without one
    ("a--b.com", True),
    ("ab--c.com", False),  # "--" in the 3rd and 4th places of a label that is no A-label
]


@pytest.fixture(scope="module")
def compiler(vocab_builtin):
    return GrammarCompiler(vocab_builtin)


@pytest.fixture(scope="module")
def compiler_llama3(vocab_llama3):
    return GrammarCompiler(vocab_llama3)


def _accepts(compiled, value) -> bool:
    m = compiled.matcher()
    return m.accept_text(json.dumps(value, ensure_ascii=False)) and m.is_accepting()


def test_labels_follow_idna2008():
    for name, valid in NAMES:
        assert labels_ok(name.split(".")) is valid, name
    assert u_label("xn--9n2bp8q") == "\uc2e4\ub840" and u_label("xn--X") is None


@pytest.mark.parametrize("where", ["root", "member", "items"])
def test_a_labels_are_accepted_exactly_at_every_place(compiler, where):
    schema = {"root": HOST, "member": {"type": "object", "properties": {"host": HOST}},
              "items": {"type": "array", "items": HOST}}[where]  # fmt: skip
    compiled = compile_json_schema(compiler, schema)
    assert isinstance(compiled, UniqueChecked) and compiled.hosts
    for name, valid in NAMES:
        value = {"root": name, "member": {"host": name}, "items": ["example.com", name]}[where]
        assert _accepts(compiled, value) is valid, value


def test_masks_drop_exactly_the_tokens_that_end_a_refused_label(compiler_llama3, vocab_llama3):
    compiled = compile_json_schema(compiler_llama3, {"type": "object", "properties": {"hosts": {"type": "array", "items": HOST}}})
    prefixes = ['{"hosts": ["xn--X', '{"hosts": ["xn--9n2bp8q', '{"hosts": ["1host.xn--4dbc5h', '{"hosts": ["',
                '{"hosts": ["xn--4dbc5h.1', '{"hosts": ["xn--4dbc5h.a', '{"hosts": ["a.b", "xn--al-0e']
    for prefix in prefixes:
        dropped, refused, _ = refusals_by_simulation(compiled, vocab_llama3, prefix)
        assert dropped == refused, prefix
        if prefix.endswith("X"):  # ending the label here is refused: a dot, a quote
            assert {t for t in refused if vocab_llama3.tokens[t][:1] in b'."'} and not refused & {
                t for t, b in enumerate(vocab_llama3.tokens) if b.isalnum()}  # fmt: skip
    m = compiled.matcher()
    assert m.accept_text('{"hosts": ["xn--9n2bp8q.xn--9t4b11yi5a", "xn--ll-0ea"]}') and m.is_accepting()


def test_tokens_that_begin_a_name_and_end_its_label_are_checked():
    # tokens writing a whole A-label, or one split around its "--", after any text before it
    chars = [c.encode() for c in 'abcdefghijklmnopqrstuvwxyz0123456789-.",[] ']
    tokens = [*chars, b'"xn--x"', b'"xn--x.', b'["xn--ll-0ea.', b'"xn', b'-', b'--x.', b'-x"', b'-x.a"', b',"xn--al-0ea"',
              b'xn--\\u0061', b'"\\u0078n--x"']  # fmt: skip
    vocab = tiny_vocab(tokens)
    compiled = compile_json_schema(GrammarCompiler(vocab), {"type": "array", "items": HOST}, whitespace="compact")
    expected = {"[": {b'"xn--x"', b'"xn--x.'}, '["a.com"': {b',"xn--al-0ea"'}, '["xn': {b"--x."}}
    for prefix in ["", "[", '["a.com"', '["xn', '["xn-', '["xn--ll-0ea', '["xn--ll-0ea.xn']:
        dropped, refused, _ = refusals_by_simulation(compiled, vocab, prefix)
        assert dropped == refused, prefix
        if prefix in expected:
            assert {vocab.tokens[t] for t in refused} == expected[prefix], prefix


def test_a_refused_label_end_keeps_the_state(compiler):
    m = compile_json_schema(compiler, HOST).matcher()
    assert m.accept_text('"xn--al-0e')
    assert not m.accept_text('a"') and not m.accept_text("a.")  # MIDDLE DOT without "l" before it
    assert m.accept_text("a") and not m.accept_text('"')
    assert not m.is_accepting() and m.accept_text("b")  # the label can still go on (and stays invalid)
    m = compile_json_schema(compiler, HOST).matcher()
    assert m.accept_text('"xn--ll-0e') and m.accept_text('a.com"') and m.is_accepting()


def test_mixed_places_keep_host_names_without_a_labels(compiler):
    # a string may be a host name or not, by branch: the grammar alone, without A-labels (a subset)
    schema = {"anyOf": [HOST, {"type": "string", "pattern": "^x"}]}
    compiled = compile_json_schema(compiler, schema)
    assert not getattr(compiled, "hosts", False)
    assert _accepts(compiled, "xn--X") and _accepts(compiled, "example.com") and not _accepts(compiled, "a_b")
    unreached = compile_json_schema(compiler, {"propertyNames": HOST, "properties": {"h": HOST}})
    assert not getattr(unreached, "hosts", False) and not _accepts(unreached, {"h": "xn--X"})
    assert _accepts(unreached, {"h": "example.com"}) and not _accepts(unreached, {"a_b": "example.com"})


def test_a_complement_never_takes_a_valid_host_name(compiler):
    compiled = compile_json_schema(compiler, {"type": "string", "not": {"format": "hostname"}})
    assert not _accepts(compiled, "xn--9n2bp8q.com") and not _accepts(compiled, "example.com")
    assert _accepts(compiled, "a_b") and _accepts(compiled, "-x")
    one_of = compile_json_schema(compiler, {"oneOf": [HOST, {"type": "string", "maxLength": 5}]})
    assert not _accepts(one_of, "a.com") and _accepts(one_of, "a.b.com") and _accepts(one_of, "a_b")


@pytest.mark.parametrize(("fmt", "values", "valid"), [
    ("hostname", ["a_b", "ok.com", "xn--X", "xn--9n2bp8q"], ["ok.com", "xn--9n2bp8q"]),
    ("time", ["noon", "12:00:00Z"], ["12:00:00Z"]),
    ("date-time", ["2024-02-30T00:00:00Z", "2024-02-29T00:00:00Z"], ["2024-02-29T00:00:00Z"]),
])  # fmt: skip
def test_an_enum_keeps_only_the_values_of_its_format(compiler, fmt, values, valid):
    compiled = compile_json_schema(compiler, {"enum": values, "format": fmt})
    assert [v for v in values if _accepts(compiled, v)] == valid


IDN = {"type": "string", "format": "idn-hostname"}
# (name, valid): U-labels from the test suite's cases of RFC 5891-5893
IDN_NAMES = [
    ("\uc2e4\ub840.\ud14c\uc2a4\ud2b8", True),  # example.test in Hangul
    ("\u302e\uc2e4\ub840.\ud14c\uc2a4\ud2b8", False),  # U+302E, DISALLOWED
    ("a\u3002b", True), ("a\uff0eb", True), ("a\uff61b", True), ("a\u3002", False),  # the other full stops
    ("l\u00b7l", True), ("a\u00b7l", False),  # MIDDLE DOT
    ("\u03b1\u0375\u03b2", True), ("\u03b1\u0375S", False),  # Greek KERAIA
    ("\u05d0\u05f3\u05d1", True), ("A\u05f3\u05d1", False),  # Hebrew GERESH
    ("\u30fb\u3041", True), ("def\u30fbabc", False),  # KATAKANA MIDDLE DOT
    ("\u0628\u0660\u06f0", False),  # Arabic-Indic digits mixed with extended ones
    ("\u0915\u094d\u200d\u0937", True), ("\u0915\u200d\u0937", False),  # ZERO WIDTH JOINER
    ("\u0628\u064a\u200c\u0628\u064a", True),  # ZERO WIDTH NON-JOINER by the joining types
    ("0a.\u05d0", False), ("a\u05d0", False),  # the Bidi rule
    ("\u00fc" * 60, False),  # an A-label longer than 63 octets
    (".".join(["\u00fc" * 40] * 5), True), (".".join(["\u00fc" * 40] * 6), False),  # 234 and 281 octets as A-labels
    ("xn--ihqwcrb4cv8a8dqg056pqjye", True), ("xn--7a", False), ("Hostname", True), ("-hello", False),
]


def test_idn_host_names_are_accepted_exactly(compiler):
    compiled = compile_json_schema(compiler, {"type": "array", "items": IDN})
    assert isinstance(compiled, UniqueChecked) and compiled.hosts
    for name, valid in IDN_NAMES:
        assert _accepts(compiled, ["a.b", name]) is valid, name


def test_idn_masks_drop_exactly_the_tokens_that_end_a_refused_label(compiler_llama3, vocab_llama3):
    compiled = compile_json_schema(compiler_llama3, {"type": "object", "properties": {"h": IDN}})
    for prefix in ['{"h": "a\u00b7', '{"h": "\u05d0\u05f3\u05d1.', '{"h": "0a.\u05d0', '{"h": "\u0915\u200d']:
        dropped, refused, _ = refusals_by_simulation(compiled, vocab_llama3, prefix)
        assert dropped == refused, prefix
        assert refused, prefix  # (each prefix has label ends to refuse)


def test_idn_hostname_is_refused_where_the_matcher_cannot_check_it(compiler):
    with pytest.raises(SchemaError, match="idn-hostname"):
        compile_json_schema(compiler, {"anyOf": [IDN, {"type": "string", "maxLength": 3}]})
    with pytest.raises(SchemaError, match="idn-hostname"):
        compile_json_schema(compiler, {"propertyNames": IDN})


@pytest.mark.parametrize("name", ["hostname.json", "idn-hostname.json"])
@pytest.mark.skipif(not (SUITE / "hostname.json").exists(), reason="../shared holds no JSON Schema Test Suite")
def test_the_suites_host_names(compiler, name):
    failed = []
    for group in json.loads((SUITE / name).read_text()):
        compiled = compile_json_schema(compiler, group["schema"])
        for case in group["tests"]:
            if _accepts(compiled, case["data"]) is not case["valid"]:
                failed.append(case["description"])
    assert not failed


def test_allowed_tokens_agree_with_acceptance_along_a_name(compiler, vocab_builtin):
    m = compile_json_schema(compiler, HOST).matcher()
    text = '"xn--9n2bp8q.xn--9t4b11yi5a"'
    for ch in text:
        allowed = np.flatnonzero(m.allowed_tokens())
        ids = [t for t in allowed.tolist() if vocab_builtin.tokens[t] == ch.encode()]
        assert ids, (ch, text)
        assert m.accept_token(ids[0])
    assert m.is_accepting()


def test_a_separator_cut_between_tokens_ends_the_label_where_it_is_whole():
    stop = "\u3002".encode()  # IDEOGRAPHIC FULL STOP: three bytes, here in tokens of one or two
    chars = [c.encode() for c in 'abl",[]'] + ["\u00b7".encode()]
    whole = '"a\u00b7l"'.encode()  # a name begun and refused in one token
    vocab = tiny_vocab([*chars, stop[:1], stop[:2], stop[1:2], stop[2:], stop[1:], stop[2:] + b"b", stop[2:] + b'b"]', whole])
    compiled = compile_json_schema(GrammarCompiler(vocab), {"type": "array", "items": IDN}, whitespace="compact")
    m = compiled.matcher()
    assert m.accept_bytes(b"[") and not m.allowed_tokens()[vocab.tokens.index(whole)] and not m.accept_bytes(whole)
    for head, refused in [(b'["a\xc2\xb7l', True), (b'["l\xc2\xb7l', False)]:  # MIDDLE DOT, with or without "l" before
        for cut in (1, 2):
            m, plain = compiled.matcher(), compiled.compiled.matcher()
            data = head + stop[:cut]
            assert m.accept_bytes(data) and plain.accept_bytes(data)
            dropped = set(np.flatnonzero(plain.allowed_tokens())) - set(np.flatnonzero(m.allowed_tokens()))
            ends = {t for t, b in enumerate(vocab.tokens) if b and stop.startswith(stop[:cut] + b[: 3 - cut])
                    and len(b) >= 3 - cut}  # fmt: skip
            assert dropped == (ends if refused else set()), (head, cut)
            assert dropped == {t for t in np.flatnonzero(plain.allowed_tokens()).tolist()
                               if not compiled.is_eos(t) and m._after(vocab.tokens[t], t) is None}  # fmt: skip
