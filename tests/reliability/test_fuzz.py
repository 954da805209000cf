"""Fuzzing the compilers: generated JSON Schemas (and mutations of MaskBench's), regexes and grammars.

Each case compiles or raises one of our errors within the compile bound, and whatever compiles
accepts only what the oracle accepts (see ``fuzz_lib``). Counts grow with ``GUIDED_LONG_TESTS=1``.
"""

from __future__ import annotations

import json
import random

import pytest
from fuzz_lib import (
    BAD_SCHEMAS,
    LONG,
    SOUNDNESS_BUGS,
    Tally,
    accepts,
    check_lark_samples,
    check_regex_samples,
    check_schema_samples,
    compile_case,
    json_schemas,
    junk_regexes,
    lark_grammars,
    malformed_schemas,
    mutate,
    regexes,
    rss_bytes,
    scaled,
)
from hypothesis import HealthCheck, given, settings

from guided.compile_service import CompileService
from guided.constraints import Grammar, JsonSchema, Regex
from guided.errors import GuidedError

BOUND_S = 5.0
MEMORY_GROWTH = 1 << 30  # a fuzz run may not grow the process by more than this


def fuzz_settings(ci: int, long: int):
    return settings(max_examples=scaled(ci, long), deadline=None, database=None, derandomize=not LONG,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


@pytest.fixture(scope="module")
def world(tokenizer_builtin, vocab_builtin):
    service = CompileService(vocab_builtin, timeout_s=BOUND_S, cache_size=16)
    yield service, vocab_builtin, tokenizer_builtin
    service.shutdown()


def _finish(tally: Tally, before: int) -> None:
    assert not tally.violations, tally.violations[:3]
    assert rss_bytes() - before < MEMORY_GROWTH, f"memory grew by {(rss_bytes() - before) >> 20} MiB"


def test_fuzz_json_schemas(world):
    service, vocab, tokenizer = world
    tally, before, rng = Tally(), rss_bytes(), random.Random(0)

    @fuzz_settings(100, 3000)
    @given(schema=json_schemas())
    def case(schema):
        compiled = compile_case(service, JsonSchema(schema), tally, BOUND_S)
        if compiled is not None:
            check_schema_samples(compiled, schema, vocab, tokenizer, rng, tally, count=6)
        assert not tally.violations, tally.violations[-1]

    case()
    _finish(tally, before)
    assert tally.outcomes.get("compiled", 0) > tally.cases // 3 and tally.samples > tally.cases, tally


def test_fuzz_malformed_schemas(world):
    service, vocab, tokenizer = world
    tally, before, rng = Tally(), rss_bytes(), random.Random(1)

    @fuzz_settings(60, 2000)
    @given(schema=malformed_schemas())
    def case(schema):
        try:
            constraint = JsonSchema(schema)
        except GuidedError:  # not an object/boolean at all: refused up front
            tally.add("refused")
            return
        compiled = compile_case(service, constraint, tally, BOUND_S)
        if compiled is not None:
            check_schema_samples(compiled, schema, vocab, tokenizer, rng, tally, count=3)
        assert not tally.violations, tally.violations[-1]

    case()
    _finish(tally, before)
    assert len(tally.outcomes) > 1, tally.outcomes  # both errors and successes were seen




def test_fuzz_maskbench_mutations(world, shared):
    files = sorted(shared("data", "maskbench").glob("*.json"))
    service, vocab, tokenizer = world
    tally, before, rng = Tally(), rss_bytes(), random.Random(2)
    for path in rng.sample(files, scaled(20, 600)):
        entry = json.loads(path.read_text())
        schema = mutate(entry["schema"], rng)
        if not isinstance(schema, dict):
            continue
        compiled = compile_case(service, JsonSchema(schema), tally, BOUND_S)
        if compiled is None:
            continue
        check_schema_samples(compiled, schema, vocab, tokenizer, rng, tally, count=2)
        for test in entry.get("tests", []):  # the file's own instances, against the mutated schema
            text = json.dumps(test["data"], ensure_ascii=False, separators=(", ", ": "))
            from fuzz_lib import accepts, is_valid

            if accepts(compiled, tokenizer, text):
                tally.samples += 1
                if not is_valid(schema, test["data"]):
                    tally.violations.append((path.name, text, "invalid instance accepted"))
    _finish(tally, before)
    assert tally.outcomes.get("compiled", 0) > 0, tally.outcomes


def test_fuzz_regexes(world):
    service, vocab, _ = world
    tally, before, rng = Tally(), rss_bytes(), random.Random(3)

    @fuzz_settings(100, 3000)
    @given(pattern=regexes() | junk_regexes())
    def case(pattern):
        compiled = compile_case(service, Regex(pattern), tally, BOUND_S)
        if compiled is not None:
            check_regex_samples(compiled, pattern, vocab, rng, tally)
        assert not tally.violations, tally.violations[-1]

    case()
    _finish(tally, before)
    assert tally.outcomes.get("compiled", 0) > 0 and tally.samples > 0, tally


def test_fuzz_lark_grammars(world):
    service, vocab, _ = world
    tally, before, rng = Tally(), rss_bytes(), random.Random(4)

    @fuzz_settings(30, 800)
    @given(text=lark_grammars())
    def case(text):
        compiled = compile_case(service, Grammar(text, syntax="lark"), tally, BOUND_S)
        if compiled is not None:
            check_lark_samples(compiled, text, vocab, rng, tally)
        assert not tally.violations, tally.violations[-1]

    case()
    _finish(tally, before)
    assert tally.outcomes.get("compiled", 0) > 0 and tally.samples > 0, tally


@pytest.mark.parametrize("schema", BAD_SCHEMAS, ids=[json.dumps(s) for s in BAD_SCHEMAS])
def test_bad_schema_is_a_schema_error(world, schema):
    from guided.errors import SchemaError

    with pytest.raises(SchemaError):
        world[0].compile(JsonSchema(schema))


def test_mask_of_negated_contains_within_bound(world):
    """Once past its 5 s bound (a complement of arrays of schema-free values); now a plain schema."""
    import time

    import numpy as np

    service, vocab, _ = world
    compiled = service.compile(
        JsonSchema({"not": {"type": "array", "items": {}, "contains": {"type": "string"}}})
    )
    bitmask = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    t0 = time.perf_counter()
    compiled.matcher().fill_bitmask(bitmask, 0)
    assert time.perf_counter() - t0 < BOUND_S


# Soundness holes the fuzzers found: equal values spelled otherwise escaped complements.
@pytest.mark.parametrize("schema, text", SOUNDNESS_BUGS, ids=[json.dumps(schema) for schema, _ in SOUNDNESS_BUGS])
def test_complements_refuse_equal_values(world, schema, text):
    from fuzz_lib import accepts, is_valid

    service, _, tokenizer = world
    assert not is_valid(schema, json.loads(text))
    assert not accepts(service.compile(JsonSchema(schema)), tokenizer, text)


@pytest.mark.parametrize("pattern", ["a**", "a{2}*", "a??*", "a{2}{3}"])
def test_stacked_quantifiers_are_a_grammar_error(world, pattern):
    from guided.errors import GrammarError

    with pytest.raises(GrammarError):
        world[0].compile(Regex(pattern))


def test_one_of_decided_by_a_format(world):
    """Found by the generated-schema fuzzer: the oracle (``jsonschema`` without its format packages)
    took ``hostname`` as an annotation; guided asserts it, so a non-hostname matches only the second
    branch of this ``oneOf`` and is valid, a hostname matches both and is not."""
    service, vocab, tokenizer = world
    branch = {"type": "string", "pattern": "x|yy", "minLength": 3, "maxLength": 4}
    schema = {"$defs": {"d": {"oneOf": [{**branch, "format": "hostname"}, branch]}}, "$ref": "#/$defs/d"}
    compiled = service.compile(JsonSchema(schema))
    assert accepts(compiled, tokenizer, '"_dux"') and not accepts(compiled, tokenizer, '"xyy"')
