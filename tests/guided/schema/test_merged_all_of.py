"""``allOf`` members that say the same keyword differently, merged into one schema exactly.

A conjunction that merges keeps the automaton plain; one that does not meets its members in an
intersection, and with a schema-free value below (any JSON value: ``items: {}``, an open object's
other members) that needs a depth bound (a warning: ``warnings.simplefilter("error")`` here). Bounds
take the tighter value, ``uniqueItems`` holds where one member asks for it, keywords nothing reads
(``x-...``) never clash, draft-04's boolean ``exclusiveMinimum`` reads only its own member's
``minimum``, and OpenAPI's ``nullable`` lets ``null`` through only where every member does. Oracle:
``jsonschema`` (its draft from ``$schema``), members in any order.
"""

from __future__ import annotations

import pytest
from json_schema_oracle import DEEP, accepted_texts, assert_exact

from guided.grammar import GrammarCompiler


@pytest.fixture(scope="module")
def grammars(vocab_builtin):
    return GrammarCompiler(vocab_builtin, cache_size=4)


def test_bounds_and_vendor_keywords_merge(grammars, tokenizer_builtin):
    """Two members bound the length of an array of schema-free items differently (and tag it with
    different ``x-ui`` hints): the merge takes ``minItems: 2`` and ``maxItems: 3``."""
    schema = {"type": "object", "properties": {"tags": {"allOf": [
        {"type": "array", "minItems": 1, "maxItems": 4, "x-ui": "list"},
        {"minItems": 2, "maxItems": 3, "x-ui": "chips"}]}}}  # fmt: skip
    texts = ['{"tags": [1]}', '{"tags": [1, ' + DEEP + "]}", '{"tags": [{}, "a", null]}',
             '{"tags": [1, 2, 3, 4]}', '{"tags": []}', '{"other": ' + DEEP + ', "tags": [true, false]}']  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_unique_items_holds_where_one_member_asks(grammars, tokenizer_builtin):
    schema = {"allOf": [{"type": "array", "uniqueItems": True}, {"uniqueItems": False, "maxItems": 3}]}
    texts = ["[1, 2]", "[1, 1]", "[[1], [1]]", "[" + DEEP + ", 2]", '[{"a": 1}, {"a": 1.0}]', '["a", "b", "c"]']
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_draft4_exclusive_flags_read_their_own_minimum(grammars, tokenizer_builtin):
    """``exclusiveMinimum: true`` with no ``minimum`` beside it asks nothing; copied beside another
    member's ``minimum: 5`` it made 5 itself invalid."""
    draft4 = "http://json-schema.org/draft-04/schema#"
    for n in ({"allOf": [{"type": "integer", "exclusiveMinimum": True}, {"minimum": 5}]},
              {"allOf": [{"type": "integer", "minimum": 3, "exclusiveMinimum": True}, {"minimum": 5}]},
              {"allOf": [{"type": "integer", "minimum": 5, "exclusiveMinimum": True}, {"minimum": 3}]}):  # fmt: skip
        schema = {"$schema": draft4, "type": "object", "properties": {"n": n}, "required": ["n"]}
        texts = [f'{{"n": {v}}}' for v in (2, 3, 4, 5, 6)] + ['{"n": 7, "more": ' + DEEP + "}"]
        assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_nullable_in_one_member_only(grammars, tokenizer_builtin):
    """OpenAPI's ``nullable`` adds ``null`` to its own member's types: the conjunction takes ``null``
    only when every typed member does (a merge copied ``nullable: true`` beside the intersected
    types, and accepted ``null``)."""
    texts = ["null", '"a"', '""', "1"]
    one = {"type": "string", "nullable": True}
    assert accepted_texts(grammars, tokenizer_builtin, one, texts) == [True, True, True, False]
    both = {"allOf": [one, {"type": "string"}]}
    assert accepted_texts(grammars, tokenizer_builtin, both, texts) == [False, True, True, False]
    each = {"allOf": [one, {"type": "string", "nullable": True, "minLength": 1}]}
    assert accepted_texts(grammars, tokenizer_builtin, each, texts) == [True, True, False, False]
