"""Constraint specs and the compile service: normalisation, cache keys, sharing, errors, time bound."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import BaseModel

from guided.compile_service import CompileService
from guided.constraints import Choice, Grammar, JsonSchema, Regex, Tag, to_constraint
from guided.errors import CompileTimeoutError, ConfigError, GrammarError


class Point(BaseModel):
    x: int
    y: int


def test_to_constraint_forms():
    assert to_constraint(None) is None
    c = to_constraint(Point)
    assert isinstance(c, JsonSchema) and c.model is Point and c.schema["required"] == ["x", "y"] and c.strict
    assert to_constraint({"type": "integer"}) == JsonSchema({"type": "integer"})
    assert to_constraint({"type": "text"}) is None
    assert to_constraint({"type": "json_object"}) == JsonSchema({"type": "object"}, strict=False)
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": True}}
    assert to_constraint(fmt) == JsonSchema({"type": "object"}, strict=True)
    r = Regex("[0-9]+")
    assert to_constraint(r) is r


def test_bad_constraints_are_clear():
    with pytest.raises(ConfigError, match="not valid JSON"):
        JsonSchema("{nope")
    with pytest.raises(ConfigError, match="list of strings"):
        Choice("abc")
    with pytest.raises(ConfigError, match="at least one"):
        Choice([])
    with pytest.raises(ConfigError, match="non-empty"):
        Grammar("  ")
    with pytest.raises(ConfigError, match="cannot use int"):
        to_constraint(3)
    with pytest.raises(ConfigError, match="cannot use str"):  # text is ambiguous: wrap it in a spec
        to_constraint('{"type": "integer"}')
    with pytest.raises(ConfigError, match="json_schema must be"):
        to_constraint({"type": "json_schema", "json_schema": {"name": "x"}})


def test_grammar_syntax_detection():
    assert Grammar('root ::= "a"').syntax == "gbnf"
    assert Grammar('start: "a"').syntax == "lark"


def test_keys_distinguish_options():
    a = JsonSchema({"type": "object"})
    assert a.key != JsonSchema({"type": "object"}, strict=False).key
    assert a.key == JsonSchema('{"type": "object"}').key
    assert Choice(["a", "b"]).key != Choice(["b", "a"]).key


def test_schemas_close_their_objects_by_default(vocab_builtin):
    """Objects that leave additionalProperties unset are generated closed on every path of the Python
    API: a JSON Schema dict, an OpenAI response_format with or without its strict flag, a structural
    tag's schema. strict=False keeps the schema's literal meaning; an explicit additionalProperties:
    true stays open either way, and so does the json_object format (closed, it would be only {})."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    extra = '{"a": 1, "b": 2}'
    service = CompileService(vocab_builtin)

    def accepts(constraint, text: str) -> bool:
        m = service.compile(constraint).matcher()
        return m.accept_text(text) and m.is_accepting()

    def fmt(**strict):
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, **strict}}

    try:
        for closed in (JsonSchema(schema), to_constraint(schema), to_constraint(fmt()), to_constraint(fmt(strict=False)),
                       Tag("<x>", schema).content):  # fmt: skip
            assert accepts(closed, '{"a": 1}') and not accepts(closed, extra), closed
        for literal in (JsonSchema(schema, strict=False), to_constraint(schema, strict=False),
                        to_constraint(fmt(strict=True), strict=False), JsonSchema({**schema, "additionalProperties": True}),
                        to_constraint({"type": "json_object"})):  # fmt: skip
            assert accepts(literal, extra), literal
    finally:
        service.shutdown()


def test_compile_regex_and_choice(vocab_builtin):
    service = CompileService(vocab_builtin)
    try:
        m = service.compile(Regex("(yes|no)")).matcher()
        assert m.accept_text("yes") and m.is_accepting()
        m = service.compile(Choice(["red", "green"])).matcher()
        assert not m.accept_text("blue")
        assert m.accept_text("green") and m.is_accepting()
    finally:
        service.shutdown()


def test_bad_regex_fails_with_grammar_error(vocab_builtin):
    service = CompileService(vocab_builtin)
    try:
        pending = service.submit(Regex("(a)\\1"))  # a backreference
        deadline = time.monotonic() + 10
        while not pending.ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(GrammarError):
            pending.result()
    finally:
        service.shutdown()


def test_identical_constraints_compile_once(vocab_builtin):
    service = CompileService(vocab_builtin, workers=2)
    gate = threading.Event()
    real = service._compile

    def slow(constraint):
        gate.wait(5)
        return real(constraint)

    service._compile = slow
    try:
        pendings = [service.submit(Regex("[a-z]{3}")) for _ in range(5)]
        gate.set()
        results = {id(p.future.result(timeout=10)) for p in pendings}
        assert service.compiles == 1 and service.shared == 4 and len(results) == 1
    finally:
        service.shutdown()


def test_timeout_fails_only_that_request(vocab_builtin):
    service = CompileService(vocab_builtin, timeout_s=0.2)
    gate = threading.Event()
    real = service._compile
    service._compile = lambda c: (gate.wait(5), real(c))[1] if c == Regex("slow") else real(c)
    try:
        slow = service.submit(Regex("slow"))
        fast = service.submit(Regex("fast"))
        assert fast.future.result(timeout=10).matcher().accept_text("fast")
        time.sleep(0.25)
        assert slow.ready()
        with pytest.raises(CompileTimeoutError):
            slow.result()
    finally:
        gate.set()
        service.shutdown()


def test_a_lark_grammar_file_imports_its_siblings(vocab_builtin, shared):
    """storage.lark imports csv.lark and json.lark from its folder (``%import .csv.start``)."""
    import lark

    path = shared("data", "grammars", "lark", "storage.lark")
    grammar = Grammar.from_file(path)
    assert grammar.syntax == "lark" and grammar.import_paths == (str(path.parent.resolve()),)
    assert grammar.key != Grammar(grammar.text).key  # another folder's csv.lark is another language
    oracle = lark.Lark(path.read_text(), parser="earley", import_paths=[str(path.parent)])
    service = CompileService(vocab_builtin)
    try:
        compiled = service.compile(grammar)
        verdicts = []
        for text in ("# a b\n1,2\n", '{"k":[1,2.5]}', '# h\nx\n{"a":null}', '{"k":[1,}', "# a\n", "",
                     '{"k": [1, 2]}\n{"j":true}'):  # fmt: skip
            try:
                oracle.parse(text)
                valid = True
            except lark.exceptions.LarkError:
                valid = False
            m = compiled.matcher()
            assert (m.accept_text(text) and m.is_accepting()) == valid, text
            verdicts.append(valid)
        assert True in verdicts and False in verdicts
    finally:
        service.shutdown()
    with pytest.raises(GrammarError, match="relative import .*csv"):  # without the folder: not read from the cwd
        CompileService(vocab_builtin).compile(Grammar(grammar.text))


def test_grammar_import_paths_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="sequence of folder paths"):
        Grammar('start: "a"', import_paths="dir")
    with pytest.raises(ConfigError, match="Lark grammars only"):
        Grammar('root ::= "a"', import_paths=("dir",))
    (tmp_path / "g.gbnf").write_text('root ::= "a" | "b"')
    g = Grammar.from_file(tmp_path / "g.gbnf")
    assert (g.syntax, g.import_paths) == ("gbnf", ())
