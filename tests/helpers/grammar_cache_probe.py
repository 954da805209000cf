"""Compiles a few constraints of every kind and records what their matchers do along valid instances.

Run in fresh processes by ``tests/grammar/test_disk_cache.py`` (a restarted process, two writers at
once); imported there for the in-process side. ``python grammar_cache_probe.py MODE DIR [GO_FILE]``
prints one JSON line: the records (``walk``) and the disk cache's statistics.

* ``load``: compile every case through a ``GrammarCompiler`` with a ``GrammarDiskCache`` on DIR.
* ``race``: compile every case without a disk cache, wait for GO_FILE to exist, then write every
  case's entry to DIR 25 times (another process does the same at the same moment).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

CASES = {
    "recursive-schema": (
        "json",
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"$ref": "#"}}},
         "required": ["a"]},  # fmt: skip
        ['{"a": 1, "b": [{"a": 2, "b": []}]}', '{"a":-30}'],
    ),
    "flat-schema": (
        "json",
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "tags": {"type": "array",
         "items": {"enum": ["x", "yz"]}, "maxItems": 3}}, "required": ["name"], "additionalProperties": False},  # fmt: skip
        ['{"name": "ab c", "tags": ["yz", "x"]}', '{"name":""}'],
    ),
    "regex": ("regex", r"[a-z]{2,8}@(ab|cd)\.(com|org)", ["xyz@cd.org", "ab@ab.com"]),
    "lark": ("lark", 'start: "(" start ")" | NAME\n%import common.CNAME -> NAME', ["((ab_1))", "x"]),
}


def compile_case(compiler, name: str):
    from guided.schema.compiler import compile_json_schema

    kind, source, _ = CASES[name]
    if kind == "json":
        return compile_json_schema(compiler, source)
    if kind == "regex":
        return compiler.compile_regex(source)
    return compiler.compile_lark(source)


def walk(compiled, tokenizer, name: str) -> list:
    """Per instance and token: the mask's digest, the forced tokens, whether the token is accepted;
    then the mask and acceptance at the end."""
    vocab = compiled.vocabulary
    bitmask = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    out = []
    for text in CASES[name][2]:
        m = compiled.matcher()
        for token in tokenizer.encode(text, add_special_tokens=False):
            m.fill_bitmask(bitmask, 0)
            out.append([hashlib.sha256(bitmask.tobytes()).hexdigest()[:16], m.forced_tokens(), m.accept_token(token)])
        m.fill_bitmask(bitmask, 0)
        out.append([hashlib.sha256(bitmask.tobytes()).hexdigest()[:16], m.is_accepting()])
    return out


def main(argv: list[str]) -> int:
    from guided.builtin.tokenizers import load_tokenizer
    from guided.grammar.compiler import GrammarCompiler
    from guided.grammar.disk_cache import GrammarDiskCache
    from guided.grammar.vocab import Vocabulary

    mode, directory = argv[0], argv[1]
    tokenizer = load_tokenizer("builtin")
    vocab = Vocabulary.from_tokenizer(tokenizer)
    disk = GrammarDiskCache(directory, min_build_s=0.0)
    records, kinds = {}, {}
    if mode == "load":
        compiler = GrammarCompiler(vocab, disk_cache=disk)
        for name in CASES:
            compiled = compile_case(compiler, name)
            kinds[name] = type(getattr(compiled, "compiled", compiled)).__name__  # the automaton's kind
            records[name] = walk(compiled, tokenizer, name)
    elif mode == "race":
        compiler = GrammarCompiler(vocab)
        built = {name: getattr(c, "compiled", c) for name in CASES for c in [compile_case(compiler, name)]}  # what is cached
        go, deadline = Path(argv[2]), time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        for _ in range(25):
            for compiled in built.values():
                disk.save(compiled.key, compiled)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    stats = {"hits": disk.hits, "misses": disk.misses, "writes": disk.writes, "rejected": disk.rejected}
    print(json.dumps({"records": records, "kinds": kinds, "stats": stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
