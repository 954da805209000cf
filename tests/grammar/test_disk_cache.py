"""The on-disk grammar cache: a restarted process loads what an earlier one compiled and behaves the
same; a damaged, foreign or hostile entry is never trusted; concurrent writers leave a valid entry;
the directory stays within its bound."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import grammar_cache_probe as probe
import pytest

from guided.compile_service import CompileService, grammar_cache_dir
from guided.errors import ConfigError
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.disk_cache import MAGIC, GrammarDiskCache
from guided.grammar.regex_ast import literal

PROBE = Path(probe.__file__)


def run_probe(*args, timeout: float = 240) -> dict:
    done = subprocess.run([sys.executable, str(PROBE), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold(tokenizer_builtin, vocab_builtin):
    """What each probe case's matcher does when compiled in this process, no disk cache anywhere."""
    compiler = GrammarCompiler(vocab_builtin)
    return {name: probe.walk(probe.compile_case(compiler, name), tokenizer_builtin, name) for name in probe.CASES}


def as_json(records):
    return json.loads(json.dumps(records))


def test_a_restarted_process_loads_every_kind_of_grammar_and_behaves_the_same(tmp_path, cold):
    first = run_probe("load", tmp_path)
    assert first["stats"] == {"hits": 0, "misses": 4, "writes": 4, "rejected": 0}
    assert set(first["kinds"].values()) == {"CompiledGrammar", "CompiledCfg"}  # both automata kinds
    second = run_probe("load", tmp_path)
    assert second["stats"] == {"hits": 4, "misses": 0, "writes": 0, "rejected": 0}
    assert second["kinds"] == first["kinds"]
    assert second["records"] == first["records"] == as_json(cold)


def _entry(tmp_path, vocab, name):
    """A cache on ``tmp_path`` holding case ``name``; returns (cache, compiled, its file)."""
    disk = GrammarDiskCache(tmp_path, min_build_s=0.0)
    compiled = probe.compile_case(GrammarCompiler(vocab, disk_cache=disk), name)
    (path,) = disk.entries()
    return disk, compiled, path


class _Hostile:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _corrupt(kind: str, path: Path, other: Path, marker: Path) -> None:
    data = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "flipped-byte":
        i = len(data) - 100
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "other-format":
        path.write_bytes(b"GUIDEDG0" + data[8:])
    elif kind == "other-key":
        path.write_bytes(other.read_bytes())
    elif kind == "hostile-class":
        hostile = _Hostile()
        hostile.marker = marker
        payload = pickle.dumps(("whatever", hostile, {}))
        path.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated", "flipped-byte", "empty", "other-format", "other-key", "hostile-class"])
def test_a_damaged_or_foreign_entry_is_ignored_removed_and_rebuilt(kind, tmp_path, vocab_builtin, tokenizer_builtin,
                                                                   cold, caplog):  # fmt: skip
    _, _, path = _entry(tmp_path / "a", vocab_builtin, "recursive-schema")
    _, _, other = _entry(tmp_path / "b", vocab_builtin, "regex")
    marker = tmp_path / "executed"
    _corrupt(kind, path, other, marker)

    disk = GrammarDiskCache(tmp_path / "a", min_build_s=0.0)
    with caplog.at_level(logging.WARNING, logger="guided.grammar.disk_cache"):
        compiled = probe.compile_case(GrammarCompiler(vocab_builtin, disk_cache=disk), "recursive-schema")
    assert (disk.hits, disk.rejected, disk.writes) == (0, 1, 1)
    assert "ignoring" in caplog.text and "compiling again" in caplog.text
    assert not marker.exists()  # the hostile pickle's call was refused, not run
    assert probe.walk(compiled, tokenizer_builtin, "recursive-schema") == cold["recursive-schema"]
    # the rebuilt entry is whole again
    again = GrammarDiskCache(tmp_path / "a", min_build_s=0.0)
    reloaded = probe.compile_case(GrammarCompiler(vocab_builtin, disk_cache=again), "recursive-schema")
    assert (again.hits, again.rejected) == (1, 0)
    assert probe.walk(reloaded, tokenizer_builtin, "recursive-schema") == cold["recursive-schema"]


def test_two_processes_writing_the_same_entries_at_once_leave_valid_entries(tmp_path, cold):
    directory, go = tmp_path / "cache", tmp_path / "go"
    cmd = [sys.executable, str(PROBE), "race", str(directory), str(go)]
    writers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(1.0)  # both have (nearly) compiled; the go file starts their writes together
    go.touch()
    for w in writers:
        out, err = w.communicate(timeout=240)
        assert w.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["stats"]["writes"] == 25 * len(probe.CASES)
    names = sorted(p.name for p in directory.iterdir())
    assert len(names) == len(probe.CASES) and all(n.endswith(".grammar") for n in names)  # no temporary left
    loaded = run_probe("load", directory)
    assert loaded["stats"] == {"hits": 4, "misses": 0, "writes": 0, "rejected": 0}
    assert loaded["records"] == as_json(cold)


def test_the_directory_keeps_within_its_bound_dropping_the_least_recently_used(tmp_path, vocab_builtin):
    disk = GrammarDiskCache(tmp_path, min_build_s=0.0)
    compiler = GrammarCompiler(vocab_builtin, disk_cache=disk)
    sizes = {}
    for name in ("regex", "lark", "flat-schema"):
        before = {p: p.stat().st_size for p in disk.entries()}
        compiled = probe.compile_case(compiler, name)
        (new,) = set(disk.entries()) - set(before)
        sizes[name] = (new, new.stat().st_size, compiled.key)
        past = time.time() - 100 + len(sizes)  # distinct, ordered use times
        os.utime(new, (past, past))
    regex, lark, flat = sizes["regex"], sizes["lark"], sizes["flat-schema"]
    # a load is a use: "regex" becomes the most recently used, "lark" the least
    assert disk.load(regex[2], vocab_builtin) is not None
    disk.max_bytes = regex[1] + flat[1] + 10
    disk.save(flat[2], probe.compile_case(GrammarCompiler(vocab_builtin), "flat-schema"))
    assert set(disk.entries()) == {regex[0], flat[0]} and not lark[0].exists()
    assert sum(p.stat().st_size for p in disk.entries()) <= disk.max_bytes


def test_only_keys_that_name_the_same_grammar_in_every_process_are_written(tmp_path, vocab_builtin):
    disk = GrammarDiskCache(tmp_path / "c", min_build_s=0.0)
    compiler = GrammarCompiler(vocab_builtin, disk_cache=disk)
    compiler.compile_ast(literal("abc"))  # keyed by the AST node itself
    (tmp_path / "inc.lark").write_text('WORD: "w"+\n')
    compiler.compile_lark('%import .inc.WORD\nstart: WORD "!"', import_paths=[str(tmp_path)])  # a file's content
    assert disk.entries() == [] and disk.writes == 0
    compiler.compile_regex("ab+c")
    assert len(disk.entries()) == 1


def test_another_version_or_vocabulary_never_loads_an_entry(tmp_path, vocab_builtin, vocab_llama3):
    v1 = GrammarDiskCache(tmp_path, version="1", min_build_s=0.0)
    probe.compile_case(GrammarCompiler(vocab_builtin, disk_cache=v1), "regex")
    assert v1.writes == 1
    v2 = GrammarDiskCache(tmp_path, version="2", min_build_s=0.0)
    probe.compile_case(GrammarCompiler(vocab_builtin, disk_cache=v2), "regex")
    assert (v2.hits, v2.misses, v2.writes) == (0, 1, 1)
    llama = GrammarDiskCache(tmp_path, version="1", min_build_s=0.0)
    probe.compile_case(GrammarCompiler(vocab_llama3, disk_cache=llama), "regex")
    assert (llama.hits, llama.misses, llama.writes) == (0, 1, 1)
    assert len(list(tmp_path.iterdir())) == 3


def test_where_the_cache_lives(tmp_path, monkeypatch):
    monkeypatch.delenv("GUIDED_GRAMMAR_CACHE", raising=False)
    monkeypatch.setenv("GUIDED_CACHE", str(tmp_path / "home"))
    assert grammar_cache_dir("auto") == tmp_path / "home" / "grammars"
    monkeypatch.setenv("GUIDED_GRAMMAR_CACHE", str(tmp_path / "elsewhere"))
    assert grammar_cache_dir("auto") == tmp_path / "elsewhere"
    monkeypatch.setenv("GUIDED_GRAMMAR_CACHE", "off")
    assert grammar_cache_dir("auto") is None
    assert grammar_cache_dir(tmp_path / "x") == tmp_path / "x"
    assert grammar_cache_dir("off") is None and grammar_cache_dir(None) is None


def test_a_second_compile_service_loads_a_schema_the_first_compiled(tmp_path, vocab_builtin):
    from guided.constraints import JsonSchema

    schema = JsonSchema(probe.CASES["flat-schema"][1])
    first = CompileService(vocab_builtin, grammar_cache=tmp_path)
    first.grammars.disk_cache.min_build_s = 0.0
    first.compile(schema)
    second = CompileService(vocab_builtin, grammar_cache=tmp_path)
    second.compile(schema)
    assert (first.grammars.disk_cache.writes, second.grammars.disk_cache.hits) == (1, 1)
    assert CompileService(vocab_builtin).grammars.disk_cache is None  # the suite's environment: off
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="grammar cache directory"):
        CompileService(vocab_builtin, grammar_cache=tmp_path / "a-file")


def test_cli_options():
    from guided.cli import build_parser

    args = build_parser().parse_args(["serve", "--grammar-cache", "off", "--grammar-cache-mb", "64"])
    assert (args.grammar_cache, args.grammar_cache_mb) == ("off", 64)
    assert build_parser().parse_args(["generate", "hi"]).grammar_cache == "auto"
