"""``guided bench json-schema-test-suite DIR --tokenizer TOK``: the JSON Schema Test Suite, token by token.

For each schema group of ``DIR/draft2020-12/*.json`` and ``DIR/draft2020-12/optional/format/*.json``:
compile; for each test instance serialized with keys in the schema's declared property order
(``guided.schema.key_order.order_instance``) and ``", "``/``": "`` separators, accepted = every token allowed
and the end accepting. ``$ref`` to remote documents resolve from ``DIR/remotes`` under
``http://localhost:1234/`` (the suite's convention); nothing is fetched. One JSON line per group,
then a summary: ``tests, pass, false_positive, false_negative, compile_error``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from guided.bench.engines import ENGINES, make_engine
from guided.bench.maskbench import warm_up
from guided.bench.runner import BenchRunner
from guided.builtin.tokenizers import load_tokenizer
from guided.schema.key_order import order_instance

__all__ = ["main", "build_parser", "load_groups", "remote_registry", "serialize"]

REMOTE_BASE = "http://localhost:1234/"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="guided bench json-schema-test-suite", description=__doc__.split("\n")[0])
    p.add_argument("dir", metavar="DIR", help="the suite's root (with draft2020-12/ and remotes/)")
    p.add_argument("--tokenizer", required=True, help="tokenizer directory, tokenizer.json or tiktoken .model")
    p.add_argument("--engine", default="guided", choices=ENGINES)
    p.add_argument("--limit", type=int, default=None, help="at most this many schema groups")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per schema group")
    p.add_argument("--max-depth", type=int, default=None, help="guided: unroll recursive schemas this deep")
    p.add_argument("--jobs", type=int, default=1)
    return p


def load_groups(root: str | Path) -> list[dict]:
    """Every test group: {"file", "index", "description", "schema", "tests"}."""
    root = Path(root)
    draft = root / "draft2020-12" if (root / "draft2020-12").is_dir() else root
    files = sorted(draft.glob("*.json")) + sorted((draft / "optional" / "format").glob("*.json"))
    out = []
    for f in files:
        for i, group in enumerate(json.loads(f.read_text())):
            rel = str(f.relative_to(draft))
            out.append({"file": rel, "index": i, **group})
    return out


def remote_registry(root: str | Path) -> dict:
    """``{uri: document}`` for every file under ``root/remotes``."""
    remotes = Path(root) / "remotes"
    reg = {}
    for f in sorted(remotes.rglob("*.json")) if remotes.is_dir() else ():
        try:
            reg[REMOTE_BASE + str(f.relative_to(remotes))] = json.loads(f.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
    return reg


def serialize(schema, data, registry: dict | None = None) -> str:

    try:
        data = order_instance(schema, data, registry)
    except Exception:  # an unresolvable schema keeps the instance's own order
        pass
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    groups = load_groups(args.dir)[: args.limit]
    registry = remote_registry(args.dir)
    tokenizer = load_tokenizer(args.tokenizer)
    opts = {"max_depth": args.max_depth} if args.max_depth is not None and args.engine.startswith("guided") else {}
    engine = make_engine(args.engine, tokenizer, registry, **opts)
    warm_up(engine)

    def job(i: int) -> dict:
        return run_group(engine, tokenizer, groups[i], registry)

    total = {"engine": args.engine, "tests": 0, "pass": 0, "false_positive": 0, "false_negative": 0,
             "compile_error": 0, "timeout": 0}  # fmt: skip
    for i, r in BenchRunner(args.jobs).run(len(groups), job, args.timeout):
        g = groups[i]
        n = len(g["tests"])
        line = {"file": g["file"], "index": g["index"], "description": g["description"], **r}
        total["tests"] += n
        if r["status"] == "ok":
            for k in ("pass", "false_positive", "false_negative"):
                total[k] += r[k]
        elif r["status"] == "timeout":
            total["timeout"] += n
        else:
            total["compile_error"] += n
        print(json.dumps(line), flush=True)
    print(json.dumps(total), flush=True)
    return 0


def run_group(engine, tokenizer, group: dict, registry: dict) -> dict:
    try:
        handle = engine.compile(group["schema"])
    except Exception as e:
        return {"status": "compile_error", "error": f"{type(e).__name__}: {e}"[:300]}
    out = {"status": "ok", "pass": 0, "false_positive": 0, "false_negative": 0, "failed": []}
    for t in group["tests"]:
        text = serialize(group["schema"], t["data"], registry)
        allowed, accepting, _ = engine.check(handle, tokenizer.encode(text, add_special_tokens=False))
        accepted = allowed and accepting
        if accepted == t["valid"]:
            out["pass"] += 1
        else:
            out["false_positive" if accepted else "false_negative"] += 1
            out["failed"].append(t["description"])
    return out


if __name__ == "__main__":
    sys.exit(main())
