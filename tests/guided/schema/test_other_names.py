"""The names of an object's other members (``strings.none_of``): every encoded string but the declared
names, built as the names' trie, with one tree per trie shape within a lowering."""

from __future__ import annotations

import json

from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.schema import strings
from guided.schema.compiler import json_schema_to_grammar
from guided.schema.strings import none_of

WORDS = ["name", "namespace", "kind", "apiVersion", "xName", "yName", "n"]


def _matches(pool: ExprPool, e: int, text: str) -> bool:
    for b in text.encode("utf-8"):
        e = pool.deriv(e, b)
        if e == EMPTY_ID:
            return False
    return bool(pool.nullable[e])


def test_every_string_but_the_names():
    pool = ExprPool()
    e = pool.intern(none_of(WORDS))
    others = ["", "na", "nam", "names", "namespaces", "Name", "kin", "kinds", "apiversion", "zName", "xNam",
              "x", "ñame", "name\n", 'na"me', "n\\", "nn", "yName2", "é"]  # fmt: skip
    for s in others:
        assert _matches(pool, e, json.dumps(s, ensure_ascii=False)[1:-1]), s
    for s in WORDS:
        assert not _matches(pool, e, json.dumps(s)[1:-1]), s


def test_equal_suffixes_are_one_tree_until_the_lowering_ends():
    """"xName" and "yName" leave the same strings after their first letter: one object, so interning
    meets it by identity. The memo is emptied when a lowering ends."""
    tree = none_of(["xName", "yName"])
    after = {}
    for item in tree.items:  # (x, what is left after x), (y, ...) among the other branches
        if item.__class__.__name__ == "Seq" and len(item.items) == 2:
            first = item.items[0]
            if first.__class__.__name__ == "Chars" and first.ranges[0][0] in (ord("x"), ord("y")):
                after[chr(first.ranges[0][0])] = item.items[1]
    assert set(after) == {"x", "y"} and after["x"] is after["y"]
    assert strings._LEFT
    json_schema_to_grammar({"type": "object", "properties": {"a": {}, "b": {}}})
    assert not strings._LEFT
