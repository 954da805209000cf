"""Data no one here wrote: a fixed sample of MaskBench and the whole JSON Schema Test Suite.

Both run through the AST membership oracle (the grammar core's byte derivatives, no tokenizer), so
they check the compiler's languages exactly and fast; ``test_token_by_token`` replays a few schemas
through the real Matcher on the builtin tokenizer. The committed figures are floors: a regression
fails CI, an improvement should raise them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from json_schema_oracle import accepts
from shared_data import shared_path

from guided.errors import GuidedError
from guided.schema.compiler import json_schema_to_node

MASKBENCH_EVERY = 38  # every 38th file by name: 199 schemas
MASKBENCH_PASSING = 192
# 1522 before `{"not": {}}` (and `not: true`) were found to accept nothing: like `false`, such a schema
# is now a SchemaError ("accepts no instance") up front, so its 18 tests count as not compiled.
# 1631 at stop 34 (unevaluatedProperties beside allOf/$ref, word boundaries, multipleOf parts, ...);
# the floor leaves room for a schema near its compile time bound on a loaded machine.
# 1687 after exact leap seconds, ECMA-262 regex patterns, static $dynamicRef and unevaluatedProperties
# beside oneOf/anyOf/if/not (1631 before); 1711 with idn-email (its 25 tests compiled)
JSTS_PASS = 1700


def _lower(schema, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json_schema_to_node(schema, **kw)


def test_maskbench_sample():
    files = sorted(shared_path("data", "maskbench").glob("*.json"))[::MASKBENCH_EVERY]
    passing = 0
    accepts_invalid = []
    for f in files:
        doc = json.loads(f.read_text())
        try:
            node = _lower(doc["schema"])
        except GuidedError:
            continue
        ok = True
        for t in doc["tests"]:
            got = accepts(node, json.dumps(t["data"], ensure_ascii=False))
            if got and not t["valid"]:
                accepts_invalid.append(f.name)
            ok &= got == t["valid"]
        passing += ok
    assert accepts_invalid == []
    assert passing >= MASKBENCH_PASSING, f"{passing} of {len(files)} pass, floor {MASKBENCH_PASSING}"


def test_json_schema_test_suite():
    from guided.bench.jsts import load_groups, remote_registry, serialize

    root = shared_path("data", "json-schema-test-suite")
    registry = remote_registry(root)
    passed, false_positives = 0, []
    for g in load_groups(root):
        try:
            node = _lower(g["schema"], registry=registry)
        except GuidedError:
            continue
        for t in g["tests"]:
            got = accepts(node, serialize(g["schema"], t["data"], registry))
            if got and not t["valid"]:
                false_positives.append((g["file"], g["description"], t["description"]))
            passed += got == t["valid"]
    assert false_positives == []
    assert passed >= JSTS_PASS, f"{passed} pass, floor {JSTS_PASS}"


TOKEN_CASES = [
    (
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer", "minimum": 1}},
         "required": ["name"], "additionalProperties": False},
        [({"name": "abc", "n": 3}, True), ({"name": "abcdefghi"}, False), ({"name": "a", "n": 0}, False), ({"n": 2}, False)],
    ),
    (
        {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "uniqueItems": True, "maxItems": 3},
        [(["red", "blue"], True), (["red", "red"], False), (["pink"], False)],
    ),
    (
        {"oneOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
        [("2024-02-29", True), ("2023-02-29", False), (None, True)],
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(TOKEN_CASES)))
def test_token_by_token(case, tokenizer_builtin, vocab_builtin):
    from guided.grammar.compiler import GrammarCompiler
    from guided.schema.compiler import compile_json_schema

    schema, instances = TOKEN_CASES[case]
    compiled = compile_json_schema(GrammarCompiler(vocab_builtin), schema)
    for data, valid in instances:
        text = json.dumps(data, ensure_ascii=False)
        m = compiled.matcher()
        tokens = tokenizer_builtin.encode(text, add_special_tokens=False)
        all_allowed = all(m.is_allowed(t) and m.accept_token(t) for t in tokens)
        assert (all_allowed and m.is_accepting()) == valid, text


def test_bench_commands_smoke(tmp_path, capsys):
    from guided.bench import jsts, maskbench

    mb = shared_path("data", "maskbench")
    files = [str(p) for p in sorted(Path(mb).glob("Github_easy*.json"))[:3]]
    assert maskbench.main([*files, "--tokenizer", "builtin", "--timeout", "60"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["schemas"] == 3 and summary["accepts_invalid"] == 0
    assert set(summary) >= {"engine", "compiled", "passing", "compile_errors", "timeouts", "rejects_valid", "ttfm_us", "tbm_us"}
    suite = shared_path("data", "json-schema-test-suite")
    assert jsts.main([str(suite), "--tokenizer", "builtin", "--limit", "4"]) == 0
    total = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert total["false_positive"] == 0 and total["tests"] > 0
