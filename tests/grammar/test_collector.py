"""Compiles and the cyclic garbage collector: compiled grammars are freed by reference counting, and a
compile runs no collector pass over the process's heap (guided.grammar.collector)."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

from guided.errors import LimitError
from guided.grammar import regex_ast
from guided.grammar.collector import quiet_collector
from guided.grammar.compiler import GrammarCompiler
from guided.schema import numbers
from guided.schema.compiler import compile_json_schema
from guided.schema.unique_runtime import UniqueChecked

# a regular grammar (checked at run time: uniqueItems over strings) and a context-free one (recursive)
TAGS = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                                         "n": {"type": "integer"}}, "required": ["tags"]}  # fmt: skip
TREE = {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
                                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["name"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}  # fmt: skip


def _walk(compiled, tokenizer, vocab, text: str) -> None:
    """Mask and accept every token of text (the matcher's lazy tables fill in, as in a request)."""
    m = compiled.matcher()
    mask = np.zeros((1, vocab.bitmask_words), dtype=np.int32)
    for token in tokenizer.encode(text, add_special_tokens=False):
        m.fill_bitmask(mask, 0)
        assert m.accept_token(token)


@pytest.fixture
def collector_off():
    """The automatic collector off for the test's body (restored after): only reference counting, and
    what the code under test does, free anything."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was:
        gc.enable()


def test_a_compile_leaves_no_shared_nodes_behind(vocab_builtin):
    """What a compile's lowering remembers for the compiles running (the equal subtrees it compared,
    ``regex_ast._SAME``; multipleOf's digit automata) is forgotten when the compile ends: it would keep
    AST nodes alive that every full pass of the collector walks."""
    schema = {"type": "object", "properties": {k: {"type": "object", "properties": {
        "a": {"type": "integer", "multipleOf": 3, "minimum": i}, "b": {"type": "string"}}} for i, k in enumerate("xyz")},
        "required": ["x"]}  # fmt: skip
    regex_ast.forget_equal_pairs()
    seen = []
    real = numbers._divisible

    def spy(*args):  # the cache is in use while the compile runs
        seen.append(real.cache_info().currsize)
        return real(*args)

    numbers._divisible = spy
    try:
        compile_json_schema(GrammarCompiler(vocab_builtin), schema)
    finally:
        numbers._divisible = real
    assert seen and max(seen) >= 1  # built once, then taken from the cache
    assert not regex_ast._SAME and real.cache_info().currsize == 0


@pytest.mark.parametrize("schema, text", [(TAGS, '{"tags": ["a", "b"], "n": 1}'), (TREE, '{"name": "x", "kids": [{"name": "y"}]}')],
                         ids=["uniqueItems", "recursive"])  # fmt: skip
def test_an_evicted_grammar_is_freed_without_a_collector_pass(vocab_builtin, tokenizer_builtin, collector_off, schema, text):
    compiler = GrammarCompiler(vocab_builtin, cache_size=1)
    compiled = compile_json_schema(compiler, schema)
    _walk(compiled, tokenizer_builtin, vocab_builtin, text)
    inner = compiled.compiled if isinstance(compiled, UniqueChecked) else compiled
    refs = [weakref.ref(compiled), weakref.ref(inner), weakref.ref(inner.pool)]
    del compiled, inner
    compile_json_schema(compiler, {"type": "string", "maxLength": 3})  # evicts the first grammar
    assert [r() is None for r in refs] == [True, True, True]


def test_the_run_time_checks_of_a_schema_live_as_long_as_its_grammar(vocab_builtin, tokenizer_builtin):
    """What the matcher's checks need (the uniqueItems plan, the key-order places, each holding the
    schema's resolver) goes with the grammar the compiler evicts, not later: a cache of its own kept
    256 schemas' resolvers alive, for every full pass of the collector to walk."""
    compiler = GrammarCompiler(vocab_builtin, cache_size=1)
    schema = {**TAGS, "properties": {**TAGS["properties"], "meta": {"type": "object"}}}  # an open object too
    compiled = compile_json_schema(compiler, schema, key_order="any")
    assert isinstance(compiled, UniqueChecked) and compiled.keys is not None
    _walk(compiled, tokenizer_builtin, vocab_builtin, '{"tags": ["a", "b"], "meta": {"x": 1}}')
    assert compile_json_schema(compiler, schema, key_order="any") is compiled  # cached: the same wrapper
    refs = [weakref.ref(compiled.plan), weakref.ref(compiled.keys), weakref.ref(compiled.keys.resolver)]
    del compiled
    compile_json_schema(compiler, {"type": "string", "maxLength": 3})  # evicts the first grammar
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True]


def test_a_grammar_still_in_use_outlives_its_eviction(vocab_builtin, tokenizer_builtin, collector_off):
    compiler = GrammarCompiler(vocab_builtin, cache_size=1)
    checked = compile_json_schema(compiler, TAGS)
    assert isinstance(checked, UniqueChecked)
    compile_json_schema(compiler, {"type": "string", "maxLength": 3})  # evicted from the cache, still held here
    _walk(checked, tokenizer_builtin, vocab_builtin, '{"tags": ["a", "b"]}')
    m = checked.matcher()
    refused = tokenizer_builtin.encode('{"tags": ["a", "a"', add_special_tokens=False)
    assert m.accept_tokens(refused) < len(refused)  # still checks uniqueness


def test_a_compile_runs_no_full_pass_and_leaves_no_cyclic_garbage(vocab_builtin):
    passes: list[int] = []

    def record(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    compiler = GrammarCompiler(vocab_builtin, cache_size=4)
    gc.collect()
    thresholds = gc.get_threshold()
    gc.set_threshold(50, 2, 2)  # passes of every generation, often: a compile allocating at all triggers them
    gc.callbacks.append(record)
    try:
        compile_json_schema(compiler, TREE)
        during = list(passes)
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)
    assert gc.isenabled()
    assert 2 not in during and during.count(1) <= 1, during  # one pass over the young generations, at the end
    assert gc.collect() < 50  # the lowering's cycles were collected when the compile returned


# patternProperties (their overlaps: ``objects._pattern_groups``), a closed object's members in any
# order (``objects._any_order_parts``), a definition, and the document's copies (``shared_copies``)
PATTERNED = {"type": "object", "required": ["id"],
             "properties": {"tags": {"type": "array", "items": {"type": "string"}}, "id": {"type": "integer"},
                            "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                      "required": ["x"], "additionalProperties": False}},
             "patternProperties": {"^x-": {"type": "string"}, "^y": {"type": "number"}},
             "additionalProperties": {"$ref": "#/$defs/a"},
             "$defs": {"a": {"type": "object", "properties": {"p": {"type": "string"}, "q": {"type": "integer"}},
                             "required": ["p"], "additionalProperties": False}}}  # fmt: skip


@pytest.mark.parametrize("key_order", ["any", "declared"])
@pytest.mark.parametrize("schema, instance", [(TREE, '{"name": "a"}'), (PATTERNED, '{"id": 1, "x-a": "b"}'),
                                              (TAGS, '{"tags": ["a"]}')], ids=["recursive", "patterned", "unique-items"])
def test_a_compile_leaves_no_reference_cycle(vocab_builtin, tokenizer_builtin, schema, instance, key_order):
    """What a compile builds and drops is freed by reference counting, not left in cycles for the
    collector: the collection ending a compile walked a large schema's lowering (its memos and
    languages, 10-20k objects, 10-47 ms of its time to first mask). Every object the collector finds
    unreachable, in that collection or after it, is kept here (``DEBUG_SAVEALL``)."""
    compiler = GrammarCompiler(vocab_builtin, cache_size=8)
    compile_json_schema(compiler, {"type": "string"}, key_order=key_order)  # the process's shared set-up
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        compiled = compile_json_schema(compiler, schema, key_order=key_order)
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage})
        found = len(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert found == 0, left
    _walk(compiled, tokenizer_builtin, vocab_builtin, instance)  # (the grammar works)


def _failed_compile_garbage(compiler, schema, max_nodes: int) -> int:
    """Objects a full pass of the collector frees once a compile failing at ``max_nodes`` is over."""
    gc.collect()
    with pytest.raises(LimitError, match="schema nodes"):
        compile_json_schema(compiler, schema, max_nodes=max_nodes)
    return gc.collect()  # the error and its traceback are gone here


def test_a_compile_failing_late_leaves_no_more_cyclic_garbage_than_one_failing_early(vocab_builtin):
    """A lowering that fails (here at its node bound) drops what it built: the error's traceback keeps
    the lowering alive past the compile's own pass over the young generations, and what it holds (in
    cycles through the schema-free languages, which refer back to it) was left for a full pass: a
    million objects, 2 s in some later mask, after one large MaskBench schema. What a failure leaves
    now hardly grows with how far the lowering got."""
    def branch(i: int) -> dict:
        return {"type": "object", "required": [f"p{i}_0"], "properties": {
            f"p{i}_{j}": {"type": "array", "items": {"type": "string", "pattern": f"^x{j}[a-z]+$"}} for j in range(6)}}

    schema = {"type": "array", "items": {"anyOf": [branch(i) for i in range(40)]}}
    compiler = GrammarCompiler(vocab_builtin)
    early = _failed_compile_garbage(compiler, schema, 200)
    late = _failed_compile_garbage(compiler, schema, 3000)  # ten times the schema nodes lowered
    # (left: the key-order places, which refer to each other: ~1,000 objects either way; before,
    # the lowering's memos and languages too: 20,000 more at the later bound)
    assert late - early < 2000, (early, late)


def test_the_collector_stays_off_until_the_last_compile_ends_and_as_the_caller_left_it():
    assert gc.isenabled()
    started, release = threading.Event(), threading.Event()

    def other():
        with quiet_collector():
            started.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert started.wait(10)
        with quiet_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other thread's compile is still under way
    finally:
        release.set()  # never leave the other block open (and the collector off) for the rest of the suite
        t.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        with quiet_collector():
            pass
        assert not gc.isenabled()  # disabled by the caller: left so
    finally:
        gc.enable()


def test_the_cache_hands_every_value_it_drops_to_on_evict():
    from guided.grammar.bounded_cache import BoundedCache

    dropped: list[str] = []
    cache = BoundedCache(2, on_evict=dropped.append)
    cache.put("a", "A")
    cache.put("b", "B")
    cache.get("a")
    cache.put("c", "C")  # b is the least recently used
    cache.put("a", "A2")  # replaced
    assert cache.pop("c") == "C" and cache.pop("zz", "none") == "none"
    cache.setdefault("d", "D")
    cache.clear()
    assert dropped == ["B", "A", "C", "A2", "D"] and len(cache) == 0


# an object whose member names the matcher checks (no name twice; undeclared names allowed) inside a
# recursive schema (a context-free grammar: its Earley tables grow as the text is read)
NAMED = {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
                                                           "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                            "additionalProperties": {"type": "integer"}}},
         "$ref": "#/$defs/node"}  # fmt: skip


def test_the_tables_a_grammar_grows_in_use_are_not_tracked_by_the_collector(vocab_builtin, tokenizer_builtin):
    """A full collection walks every object the collector tracks, and a big grammar's lazy tables grow
    to tens of thousands of entries: the Earley sets, the scan memo and the member-name memos hold
    only ints, strings, bytes and tuples of them, which the collector stops tracking after one pass."""
    compiler = GrammarCompiler(vocab_builtin, cache_size=2)
    compiled = compile_json_schema(compiler, NAMED)
    assert isinstance(compiled, UniqueChecked)
    _walk(compiled, tokenizer_builtin, vocab_builtin, '{"name": "x", "kids": [{"name": "y", "kids": [], "m": 2}], "n": 1}')
    gc.collect()
    gc.collect()  # a tuple is untracked once its items are: one nested in another takes a second pass
    dfa = compiled.compiled.dfa

    def entries(memo: dict) -> list:
        return [*memo, *memo.values()]

    memos = {
        "set ids": entries(dfa._set_ids),
        "scan memo": entries(dfa._scan_cache),
        "closure memo": entries(dfa._closure_cache),
        "prediction memo": entries(dfa._pred_cache),
        "configurations": dfa.configs,
        "member parts": entries(compiled.part_ids),
        "member names": list(compiled.name_memo),
        "refusals": entries(compiled.refused_memo),
    }
    assert all(memos[k] for k in ("set ids", "scan memo", "member parts", "member names")), {k: len(v) for k, v in memos.items()}
    tracked = {k: sum(gc.is_tracked(x) for x in v) for k, v in memos.items()}
    assert tracked == dict.fromkeys(memos, 0)
    columns = [dfa.set_items, dfa.set_waiting, dfa.set_scans, dfa.first_items]
    assert sum(gc.is_tracked(x) for column in columns for x in column) == 0
    # the tables of one number per item or configuration: no items for the collector to visit
    assert [gc.is_tracked(x) for x in (dfa.next_sym, dfa.lhs, dfa.first_items)] == [False] * 3
    assert len(dfa.pure_lex) > 10 and len(gc.get_referents(dfa.pure_lex)) <= 1  # an array: its type only


def test_tracks_of_the_json_checks_share_the_frames_below_their_top(vocab_builtin, tokenizer_builtin):
    """A matcher keeps one JSON track per token (and the grammar's memos keep tracks for every
    matcher): each frame of an open array or object is a list, and a track copied whole at each token
    made the frames of every enclosing level once per token, all walked by every full pass. A track
    now copies its top frame only; the frames below are shared, as nothing writes to them until they
    are the top again."""
    compiler = GrammarCompiler(vocab_builtin, cache_size=1)
    compiled = compile_json_schema(compiler, NAMED)
    m = compiled.matcher()
    deep = '{"name": "a", "kids": [{"name": "b", "kids": [{"name": "c", "kids": [], "x": 1, "y": 2}]}]}'
    for token in tokenizer_builtin.encode(deep, add_special_tokens=False):
        assert m.accept_token(token)
    frames = [f for t in m._tracks for f in t.stack]
    assert len(frames) > 100 and len({id(f) for f in frames}) < len(frames) / 2, (len(frames), len({id(f) for f in frames}))
    assert m.is_accepting()


def test_a_long_lived_process_keeps_no_per_schema_objects_once_the_grammars_are_gone(vocab_builtin):
    """Process-wide memos of the lowering must not keep each schema's trees: a server compiles schema
    after schema, and every object left behind is walked by every later full collection. Sixty more
    distinct schemas (their grammars evicted) leave the collector's count about where it was."""
    compiler = GrammarCompiler(vocab_builtin, cache_size=1)

    def schema(i: int) -> dict:  # undeclared names allowed: the lowering builds "none of the declared names"
        names = [f"property_{i}_{j}_{'x' * 12}" for j in range(12)]
        return {"type": "object", "properties": dict.fromkeys(names, {"type": "integer"}),
                "additionalProperties": {"type": "string"}}  # fmt: skip

    def tracked_after(schemas) -> int:
        for i in schemas:
            compile_json_schema(compiler, schema(i))
        compile_json_schema(compiler, {"type": "string"})  # evicts the last of them
        gc.collect()
        return len(gc.get_objects())

    before = tracked_after(range(40))
    after = tracked_after(range(40, 100))
    assert after - before < 10_000, (before, after)


@pytest.mark.parametrize("build", ["json-cfg", "json-regular", "lark"])
def test_a_compiled_grammar_keeps_no_ast_and_still_pickles(vocab_builtin, tokenizer_builtin, build):
    """Once compiled, a grammar holds none of its source's AST nodes (only garbage for the collector to
    walk: most of a large grammar's objects); pickling, the one reader of the source, builds it again
    and the copy masks as the original does."""
    import pickle

    from guided.grammar.regex_ast import Node

    compiler = GrammarCompiler(vocab_builtin, cache_size=2)
    gc.unfreeze()  # objects an earlier test froze (MaskBench's warm-up) are not listed by get_objects()
    older = {id(x) for x in gc.get_objects()}  # the process's objects: the walk below stays out of them
    if build == "lark":
        compiled, text = compiler.compile_lark('start: "[" item ("," item)* "]"\nitem: /[a-z]+/ | start'), "[ab,[c]]"
    else:
        compiled = compile_json_schema(compiler, TREE if build == "json-cfg" else TAGS)
        text = '{"name": "x", "kids": [{"name": "y"}]}' if build == "json-cfg" else '{"tags": ["a", "b"], "n": 1}'
    _walk(compiled, tokenizer_builtin, vocab_builtin, text)
    inner = compiled.compiled if isinstance(compiled, UniqueChecked) else compiled
    seen, stack, nodes = {id(inner)}, [inner], 0
    while stack:  # what the grammar refers to, through the objects the compile and the walk made
        for x in gc.get_referents(stack.pop()):
            if id(x) not in seen:
                seen.add(id(x))
                nodes += isinstance(x, Node)
                if id(x) not in older:
                    stack.append(x)
    assert nodes == 0
    copy = pickle.loads(pickle.dumps(inner))
    a, b = inner.matcher(), copy.matcher()
    for token in tokenizer_builtin.encode(text, add_special_tokens=False):
        assert np.array_equal(inner.mask(a.state), copy.mask(b.state))
        assert a.accept_token(token) and b.accept_token(token)
