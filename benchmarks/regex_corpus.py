"""The regex benchmark corpus: MaskBench `pattern`s plus JSON-shaped regexes, with matching strings.

Deterministic (seeded). Patterns are benchmarked with full-match semantics, so a leading ``^`` and a
trailing ``$`` are dropped (all engines then see the same language). Matching strings come from the
MaskBench test instances of the same schema (string values that Python ``re`` full-matches) and from
a seeded random walk over the pattern's AST, kept only when Python ``re`` agrees.

    python benchmarks/regex_corpus.py --out corpus.json   # to inspect it
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from guided.grammar.frontends.ecma_regex import parse_regex  # noqa: E402
from guided.grammar.regex_ast import Alt, Chars, Repeat, Seq  # noqa: E402

SHARED = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared"))
SEED = 20240611


def _strip_anchors(p: str) -> str:
    if p.startswith("^"):
        p = p[1:]
    if p.endswith("$") and not p.endswith("\\$"):
        p = p[:-1]
    return p


def _walk_json(x, out: list, key: str):
    if isinstance(x, dict):
        for k, v in x.items():
            if k == key and isinstance(v, str):
                out.append(v)
            _walk_json(v, out, key)
    elif isinstance(x, list):
        for v in x:
            _walk_json(v, out, key)


def _strings(x, out: list):
    if isinstance(x, str):
        out.append(x)
    elif isinstance(x, dict):
        for k, v in x.items():
            out.append(k)
            _strings(v, out)
    elif isinstance(x, list):
        for v in x:
            _strings(v, out)


def sample(node, rng: random.Random, budget: list) -> str:
    """A random string of the node's language (no And/Not), preferring printable ASCII."""
    if isinstance(node, Chars):
        ascii_rs = [(max(lo, 0x20), min(hi, 0x7E)) for lo, hi in node.ranges if lo <= 0x7E and hi >= 0x20]
        rs = ascii_rs if ascii_rs and rng.random() < 0.95 else list(node.ranges)
        lo, hi = rng.choice(rs)
        cp = rng.randint(lo, hi)
        return chr(cp) if not 0xD800 <= cp <= 0xDFFF else "a"
    if isinstance(node, Seq):
        return "".join(sample(x, rng, budget) for x in node.items)
    if isinstance(node, Alt):
        return sample(rng.choice(node.items), rng, budget) if node.items else ""
    if isinstance(node, Repeat):
        hi = node.max if node.max is not None else node.min + 6
        n = rng.randint(node.min, min(hi, node.min + (12 if budget[0] > 0 else 0)))
        budget[0] -= n
        return "".join(sample(node.item, rng, budget) for _ in range(n))
    raise ValueError(f"cannot sample {type(node).__name__}")


def _samples(pattern: str, rng: random.Random, n: int) -> list[str]:
    try:
        node = parse_regex(pattern)
        py = re.compile(pattern)
    except Exception:
        return []
    out = []
    for _ in range(4 * n):
        try:
            s = sample(node, rng, [60])
        except (ValueError, RecursionError):
            return out
        if py.fullmatch(s) and s not in out:
            out.append(s)
        if len(out) >= n:
            break
    return out


def maskbench_entries(rng: random.Random) -> list[dict]:
    files = sorted(glob.glob(str(SHARED / "data" / "maskbench" / "*.json")))
    seen: dict[str, dict] = {}
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        pats: list[str] = []
        _walk_json(d.get("schema"), pats, "pattern")
        if not pats:
            continue
        strs: list[str] = []
        for t in d.get("tests", []):
            if t.get("valid"):
                _strings(t.get("data"), strs)
        for p in pats:
            rx = _strip_anchors(p)
            entry = seen.setdefault(rx, {"name": f"maskbench:{Path(f).stem}", "regex": rx, "strings": []})
            try:
                py = re.compile(rx)
            except re.error:
                continue
            for s in strs:
                if len(entry["strings"]) < 2 and s not in entry["strings"] and py.fullmatch(s):
                    entry["strings"].append(s)
    out = []
    for rx in sorted(seen):
        e = seen[rx]
        e["strings"] = (e["strings"] + _samples(rx, rng, 3))[:3]
        out.append(e)
    return out


def json_entries(rng: random.Random) -> list[dict]:
    words = sorted({k for k in _property_names() if re.fullmatch(r"[a-z][a-z_]{2,20}", k)})
    words = rng.sample(words, min(1000, len(words)))
    enum = "(" + "|".join(sorted(words)) + ")"
    shaped = {
        "json:string_0_50": r'"[^"\\\x00-\x1f]{0,50}"',
        "json:string_1_200": r'"[^"\\\x00-\x1f]{1,200}"',
        "json:string_escapes": r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,100}"',
        "json:integer": r"-?(0|[1-9][0-9]{0,15})",
        "json:number": r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
        "json:date": r'"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"',
        "json:date_time": r'"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})"',
        "json:uuid": r'"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"',
        "json:email": r'"[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9.-]{1,63}\.[a-zA-Z]{2,10}"',
        "json:enum_1000": '"' + enum + '"',
        "json:enum_list": r"\[" + f'"{enum}"(, "{enum}"){{0,5}}' + r"\]",
        "json:object": r'\{"id": [0-9]{1,10}, "name": "[^"\\\x00-\x1f]{0,30}", "tags": \[("[a-z]{1,12}"(, "[a-z]{1,12}"){0,5})?\], "active": (true|false)\}',
        "json:long_text": r'"[^"\\\x00-\x1f]{0,5000}"',
    }
    natural = {
        "json:string_0_50": ['"The quick brown fox jumps over the lazy dog."', '"Hello, world!"'],
        "json:string_1_200": ['"Structured generation constrains each decoding step to the tokens a grammar allows, '
                              'so the output always parses."'],
        "json:long_text": ['"' + " ".join(["Lorem ipsum dolor sit amet, consectetur adipiscing elit."] * 8) + '"'],
        "json:object": ['{"id": 12345, "name": "Ada Lovelace", "tags": ["math", "computing"], "active": true}'],
        "json:email": ['"ada.lovelace@example.com"'],
        "json:number": ["-12.5e3", "3.14159", "42"],
        "json:date_time": ['"2024-06-11T14:03:59.123Z"'],
    }
    out = []
    for name, rx in shaped.items():
        strings = natural.get(name, []) + _samples(rx, rng, 3)
        out.append({"name": name, "regex": rx, "strings": strings[:4]})
    return out


def _property_names() -> list[str]:
    names: list[str] = []
    for f in sorted(glob.glob(str(SHARED / "data" / "maskbench" / "*.json")))[:3000]:
        with open(f) as fh:
            d = json.load(fh)
        _keys(d.get("schema"), names)
    return names


def _keys(x, out):
    if isinstance(x, dict):
        props = x.get("properties")
        if isinstance(props, dict):
            out.extend(props)
        for v in x.values():
            _keys(v, out)
    elif isinstance(x, list):
        for v in x:
            _keys(v, out)


def build_corpus(limit: int | None = None) -> list[dict]:
    rng = random.Random(SEED)
    corpus = json_entries(rng) + maskbench_entries(rng)
    corpus = [e for e in corpus if e["strings"]]
    return corpus[:limit] if limit else corpus


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="-")
    ap.add_argument("--limit", type=int)
    args = ap.parse_args()
    corpus = build_corpus(args.limit)
    text = json.dumps(corpus, indent=1, ensure_ascii=False)
    if args.out == "-":
        print(f"{len(corpus)} regexes, {sum(len(e['strings']) for e in corpus)} strings")
    else:
        Path(args.out).write_text(text)
