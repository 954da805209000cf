"""benchmarks/lowering_repeats.py: the lowering's repeats are found and told apart by cause."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from guided.schema.compiler import json_schema_to_grammar
from guided.schema.lowering import SchemaLowering

REPO = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("lowering_repeats", REPO / "benchmarks" / "lowering_repeats.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _repeats(schema) -> dict:
    rep = _module().Repeats(min_s=0.0)
    lower = rep.install()
    try:
        # (with max_depth the lowering reads the document as given: copies are not made one object
        # first, see resolver.shared_copies, so each is lowered; the schema has no cycle to unroll)
        json_schema_to_grammar(schema, max_depth=3)
        return dict(rep.take())
    finally:
        SchemaLowering.lower = lower


def _member(kind: str) -> dict:  # a fresh dict each call: equal as JSON, distinct as objects
    return {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"kind": {"enum": [kind]}}}]}


BASE = {"type": "object", "properties": {"kind": {"type": "string"}, "size": {"type": "integer"}}}


def test_a_copy_of_a_subschema_lowered_again_is_counted_as_a_copy():
    got = _repeats({"$defs": {"base": BASE}, "properties": {"a": _member("x"), "b": _member("x")}})
    assert got.get("copy", 0) > 0


def test_different_subschemas_are_not_repeats():
    got = _repeats({"$defs": {"base": BASE}, "properties": {"a": _member("x"), "b": _member("y")}})
    assert got.get("copy", 0) == 0


def test_nested_spans_count_once_under_the_outermost_cause():
    rep = _module().Repeats()
    rep.spans += [(0.0, 1.0, "copy"), (0.2, 0.5, "other"), (2.0, 2.5, "place")]
    assert dict(rep.take()) == {"copy": 1.0, "place": 0.5}
    assert rep.take() == {}
