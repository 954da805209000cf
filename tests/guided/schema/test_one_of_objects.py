"""``oneOf`` exclusivity between open objects, exact without a depth bound.

Each ``oneOf`` branch is lowered beside the values the branches it may overlap refuse. Between open
objects those refusals are schemas ("an object without ``host``", "``protocol`` is not ``sml``")
that merge into the branch, so a schema-free member value (any JSON value, at any depth) never
meets an intersection: a warning (``warnings.simplefilter("error")`` here) would say a depth bound
was used. Oracle: ``jsonschema``, with members in any order (``key_order="any"``).
"""

from __future__ import annotations

import pytest
from json_schema_oracle import DEEP, assert_exact

from guided.grammar import GrammarCompiler


@pytest.fixture(scope="module")
def grammars(vocab_builtin):
    return GrammarCompiler(vocab_builtin, cache_size=4)


def test_an_enum_beside_a_complement_is_its_values(grammars, tokenizer_builtin):
    """Two open objects that declare one member alike (``protocol: {enum: [sml]}``) and each require
    a name of their own. Beside a branch, the other's refusal "``protocol`` is not ``sml``" meets the
    branch's own ``enum``: an enum beside ``not`` (or any in-place applicator) is its values, filtered
    in Python, not an intersection of the values with every JSON value (whose schema-free members
    needed a depth bound: a warning, then emptiness searches past 200,000 states at mask time)."""
    sml = {"enum": ["sml"]}
    schema = {"oneOf": [
        {"properties": {"protocol": sml, "device": {"type": "string"}, "local": {"type": "boolean"}},
         "required": ["protocol", "device"]},
        {"properties": {"protocol": sml, "host": {"type": "string"}, "local": {"type": "boolean"}},
         "required": ["protocol", "host"]}]}  # fmt: skip
    texts = ['{"protocol": "sml", "device": "d"}', '{"local": false, "host": "h", "protocol": "sml"}',
             '{"protocol": "sml", "device": "d", "host": "h"}', '{"protocol": "sml", "local": true}',
             '{"protocol": "d0", "device": "d"}', '{"device": "d", "local": true, "extra": ' + DEEP + ', "protocol": "sml"}',
             '{"protocol": "sml", "host": "h", "local": 1}', '{"protocol": "sml", "device": "d", "host": ' + DEEP + "}",
             '"text"', "[]"]  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_a_pattern_refused_beside_an_open_object(grammars, tokenizer_builtin):
    """One branch requires ``device`` matching a pattern, the other requires ``host`` and leaves
    ``device`` to any value. The second branch's refusal of the first holds "``device`` is a string
    that does not match": the complemented pattern is taken among strings only, so no schema-free
    value is complemented beside the open object."""
    schema = {"oneOf": [
        {"type": "object", "properties": {"device": {"type": "string", "pattern": "^/dev/[^/]+$"}},
         "required": ["device"]},
        {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}]}  # fmt: skip
    texts = ['{"device": "/dev/tty"}', '{"host": "h"}', '{"host": "h", "device": "/dev/tty"}',
             '{"host": "h", "device": "tty"}', '{"device": "tty"}', '{"host": "h", "device": ' + DEEP + "}",
             '{"device": "/dev/a", "more": ' + DEEP + "}", '{"host": "h", "device": "/dev/a/b"}', "{}"]  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_branches_sharing_a_base_refuse_only_what_is_their_own(grammars, tokenizer_builtin):
    """Inheritance: every branch is ``allOf: [{"$ref": base}, own]``. Beside a branch, which holds
    ``base`` already, the values another branch refuses are those its ``own`` part refuses: ``base``
    (here with an array of objects and a schema-free member) is never complemented. A branch whose
    parts another branch's include (``plain``: the base alone) takes no value that matches only it
    (``plain`` then matches the values neither ``sml`` nor ``d0`` kind does)."""
    base = {"type": "object", "properties": {
        "enabled": {"type": "boolean"}, "note": {},
        "channels": {"type": "array", "items": {"type": "object", "properties": {"api": {"type": "string"}},
                                                "required": ["api"]}}}, "required": ["enabled"]}  # fmt: skip
    sml = {"properties": {"protocol": {"const": "sml"}, "device": {"type": "string"}}, "required": ["protocol", "device"]}
    d0 = {"properties": {"protocol": {"const": "d0"}, "host": {"type": "string"}}, "required": ["protocol", "host"]}
    ref = {"$ref": "#/$defs/meter"}
    schema = {"$defs": {"meter": base}, "oneOf": [{"allOf": [ref, sml]}, {"allOf": [ref, d0]}, {"allOf": [ref]}]}
    texts = ['{"enabled": true}', '{"enabled": true, "protocol": "sml", "device": "d"}',
             '{"enabled": true, "protocol": "sml"}', '{"protocol": "d0", "host": "h", "enabled": false}',
             '{"enabled": true, "channels": [{"api": "x"}], "note": ' + DEEP + "}",
             '{"enabled": true, "channels": [{"api": 1}]}', '{"channels": [], "enabled": 1}',
             '{"enabled": true, "protocol": "sml", "device": "d", "note": ' + DEEP + "}", '"text"']  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)


def test_overlapping_inheriting_branches_take_members_in_any_order(grammars, tokenizer_builtin):
    """Past the permutation bound (more than 6 names at the place), members in any order come from
    a bag: the grammar takes members with repeats and the matcher refuses a name written twice.
    That holds under a ``oneOf`` of overlapping branches that are intersections themselves: their
    refusals are merged schemas, no bag is complemented, so the members of ``sml`` over a device
    are not held to the declared order (vzlogger's meters, written in any order, were refused)."""
    flags = {f"flag{i}": {"type": "boolean"} for i in range(6)}
    base = {"type": "object", "properties": {"enabled": {"type": "boolean"}, **flags}, "required": ["enabled"]}
    ref = {"$ref": "#/$defs/meter"}
    dev = {"properties": {"protocol": {"const": "sml"}, "device": {"type": "string"}}, "required": ["protocol", "device"]}
    host = {"properties": {"protocol": {"const": "sml"}, "host": {"type": "string"}}, "required": ["protocol", "host"]}
    schema = {"$defs": {"meter": base}, "oneOf": [{"allOf": [ref, dev]}, {"allOf": [ref, host]}]}
    texts = ['{"flag5": true, "device": "d", "flag0": false, "protocol": "sml", "enabled": true}',
             '{"protocol": "sml", "flag3": true, "host": "h", "enabled": false, "flag1": true}',
             '{"flag2": true, "host": "h", "device": "d", "protocol": "sml", "enabled": true}',
             '{"flag4": 1, "device": "d", "protocol": "sml", "enabled": true}',
             '{"device": "d", "protocol": "d0", "enabled": true}']  # fmt: skip
    assert_exact(grammars, tokenizer_builtin, schema, texts)
