"""Reliability report: limits and their defaults, fuzzing counts and outcomes, fault scenarios, and the
load a loopback server held. Writes ``benchmarks/results/reliability.md`` (and ``reliability.json``).

The drivers are the test suite's own (``tests/reliability/*_lib.py``), run here with larger counts:
each fuzz case compiles or raises one of guided's errors within its bound, whatever compiles accepts
only what the oracle accepts (``jsonschema``, Python ``re``, Lark); each fault leaves the healthy
requests exact and the KV block pool full; the load loses, duplicates and invalidates nothing.

Usage: python benchmarks/reliability.py [--fuzz N] [--requests N] [--concurrency C] [--quick]
(CPU, tiny default model, builtin tokenizer; MaskBench mutations need the shared data directory.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
import warnings
from dataclasses import asdict, fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO / "tests" / "reliability"))  # the drivers the tests use
sys.path.insert(0, str(REPO / "tests" / "helpers"))

import fuzz_lib as fz  # noqa: E402
from fault_lib import SCENARIOS  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from load_lib import drained, run_load, serve  # noqa: E402
from phase_faults import PHASES, one_sequence_fails  # noqa: E402
from server_faults import SERVER_SCENARIOS  # noqa: E402

from guided.builtin.tokenizers import load_tokenizer  # noqa: E402
from guided.compile_service import CompileService  # noqa: E402
from guided.constraints import Grammar, JsonSchema, Regex  # noqa: E402
from guided.grammar.vocab import Vocabulary  # noqa: E402
from guided.limits import LIMIT_DOCS, Limits  # noqa: E402

BOUND_S = 5.0
STATUS = {"body_bytes": "413", "queue_len": "503", "max_tokens": "400", "n": "400", "tools": "400",
          "stop_strings": "400", "compile_timeout_s": "400 (CompileTimeoutError)"}  # fmt: skip


def fuzz(n: int) -> list[dict]:
    """Each fuzzer with ``n`` cases (fewer for grammars and MaskBench); one row per fuzzer."""
    tokenizer = load_tokenizer("builtin")
    vocab = Vocabulary.from_tokenizer(tokenizer)
    service = CompileService(vocab, timeout_s=BOUND_S, cache_size=16)
    rng, rows = random.Random(0), []

    def run(name, strategy, make, check, count):
        tally, before, t0 = fz.Tally(), fz.rss_bytes(), time.perf_counter()

        @seed(0)
        @settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def one(case):
            try:
                constraint = make(case)
            except fz.GuidedError:
                tally.add("refused")
                return
            compiled = fz.compile_case(service, constraint, tally, BOUND_S)
            if compiled is not None:
                check(compiled, case, tally)

        one()
        rows.append(_row(name, tally, before, time.perf_counter() - t0))

    schema_check = lambda c, s, t: fz.check_schema_samples(c, s, vocab, tokenizer, rng, t, count=6)  # noqa: E731
    run("JSON Schemas (generated)", fz.json_schemas(), JsonSchema, schema_check, n)
    run("JSON Schemas (malformed)", fz.malformed_schemas(), JsonSchema, schema_check, n)
    run("regexes (generated + junk)", fz.regexes() | fz.junk_regexes(), Regex,
        lambda c, p, t: fz.check_regex_samples(c, p, vocab, rng, t), n)  # fmt: skip
    run("Lark grammars (generated)", fz.lark_grammars(), lambda t: Grammar(t, syntax="lark"),
        lambda c, g, t: fz.check_lark_samples(c, g, vocab, rng, t), max(n // 5, 10))  # fmt: skip
    rows.append(_maskbench(service, vocab, tokenizer, rng, max(n // 5, 10)))
    bugs = known_bugs(service, tokenizer)
    service.shutdown()
    return rows, bugs


def known_bugs(service, tokenizer) -> list[dict]:
    """The reproducers the fuzzers found (each pinned by a test), run again now."""
    rows = []
    for schema in fz.BAD_SCHEMAS:
        reason = "malformed or contradictory: must be a SchemaError"
        try:
            service.compile(JsonSchema(schema))
            got = "compiled"
        except Exception as e:  # noqa: BLE001 - the point is which type comes out
            got = type(e).__name__
        rows.append({"schema": schema, "problem": reason, "now": got, "fixed": got == "SchemaError"})
    for schema, text in fz.SOUNDNESS_BUGS:
        accepted = fz.accepts(service.compile(JsonSchema(schema)), tokenizer, text)
        rows.append({"schema": schema, "problem": f"accepts `{text}`, an invalid instance",
                     "now": f"accepts {text}" if accepted else f"refuses {text}", "fixed": not accepted})  # fmt: skip
    try:
        service.compile(Regex("a**"))
        got = "compiles"
    except Exception as e:  # noqa: BLE001 - the point is which type comes out
        got = type(e).__name__
    rows.append({"schema": "regex a**", "problem": "stacked quantifiers compile (ECMA-262 and Python refuse)",
                 "now": got, "fixed": got == "GrammarError"})  # fmt: skip
    return rows


def _maskbench(service, vocab, tokenizer, rng, count: int) -> dict:
    shared = Path(os.environ.get("GUIDED_SHARED", REPO.parent / "shared")) / "data" / "maskbench"
    tally, before, t0 = fz.Tally(), fz.rss_bytes(), time.perf_counter()
    files = sorted(shared.glob("*.json")) if shared.is_dir() else []
    for path in rng.sample(files, min(count, len(files))):
        entry = json.loads(path.read_text())
        schema = fz.mutate(entry["schema"], rng)
        compiled = (
            fz.compile_case(service, JsonSchema(schema), tally, BOUND_S) if isinstance(schema, dict) else None
        )
        if compiled is not None:
            fz.check_schema_samples(compiled, schema, vocab, tokenizer, rng, tally, count=2)
    row = _row("MaskBench schemas, one random mutation each", tally, before, time.perf_counter() - t0)
    row["skipped"] = None if files else "the MaskBench data directory is absent"
    return row


def _row(name: str, tally, before: int, seconds: float) -> dict:
    return {"fuzzer": name, "cases": tally.cases, "outcomes": dict(sorted(tally.outcomes.items())),
            "samples_checked": tally.samples, "samples_unchecked": tally.unchecked, "violations": len(tally.violations),
            "violation_examples": [repr(v)[:300] for v in tally.violations[:3]],
            "mask_time_errors": len(tally.mask_errors), "slowest_compile_s": round(tally.slowest_s, 3),
            "timeout_examples": tally.timeouts[:3], "mask_error_examples": sorted(set(tally.mask_errors))[:3],
            "rss_growth_mib": (fz.rss_bytes() - before) >> 20, "seconds": round(seconds, 1)}  # fmt: skip


def faults() -> list[dict]:
    rows = []
    phases = [lambda phase=phase: one_sequence_fails(phase) for phase in PHASES]
    for scenario in SCENARIOS + phases + SERVER_SCENARIOS:
        t0 = time.perf_counter()
        result = scenario()
        rows.append({**asdict(result), "ok": result.ok, "seconds": round(time.perf_counter() - t0, 1)})
    return rows


def load(total: int, concurrency: int) -> dict:
    with serve(max_queue_len=max(256, concurrency)) as (app, base):
        r = run_load(base, total, concurrency)
        return {"requests": r.total, "concurrency": r.concurrency, "ok": r.ok, "errors": r.errors,
                "lost": r.lost, "duplicated": r.duplicated, "statuses": r.statuses, "guided": r.guided,
                "guided_valid": r.guided_valid, "p50_s": round(r.p(0.5), 3), "p99_s": round(r.p(0.99), 3),
                "max_s": round(max(r.latencies), 3), "wall_s": round(r.wall_s, 1),
                "req_per_s": round(r.total / r.wall_s, 1), "rss_before_mib": r.rss_before >> 20,
                "rss_after_mib": r.rss_after >> 20, "rss_growth_pct": round(100 * r.rss_growth, 2),
                "drained": drained(app)}  # fmt: skip


def render(report: dict) -> str:
    out = ["# Reliability report", "",
           f"Generated by `{report['command']}` on {report['machine']} ({report['date']}); tiny random-weight "
           "default model on CPU, builtin tokenizer, server on 127.0.0.1.", "",
           "## Limits (`guided.limits.Limits`)", "",
           "Each is configurable (`Limits(...)`, `create_app(limits=...)`, `guided serve --limit NAME=VALUE`); "
           "a violation is a `LimitError` (HTTP 400 unless noted) naming `Limits.NAME` and where (JSON pointer "
           "or request field).", "", "| limit | default | bounds | over it |", "|---|---|---|---|"]  # fmt: skip
    for f in fields(Limits):
        out.append(
            f"| `{f.name}` | {getattr(Limits(), f.name):,} | {LIMIT_DOCS[f.name]} | {STATUS.get(f.name, '400')} |"
        )
    out += ["", "Fixed (not in `Limits`): API key (`--api-key` / `GUIDED_API_KEY`, 401 on every route but "
            "`/health`), bind address 127.0.0.1 by default, `$ref` resolved only within the schema or an "
            "explicit `registry` (never files or the network).", "",
            "## Fuzzing", "", "Every case compiles or raises one of guided's errors within the "
            f"{BOUND_S:g} s compile bound; samples = accepted strings checked against the oracle.", "",
            "| fuzzer | cases | outcomes | samples checked | violations | mask-time errors | slowest compile | RSS growth |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["fuzz"]:
        outcomes = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items()) or r.get("skipped") or "-"
        checked = f"{r['samples_checked']}" + (
            f" (+{r['samples_unchecked']} beyond float range)" if r["samples_unchecked"] else ""
        )
        out.append(f"| {r['fuzzer']} | {r['cases']} | {outcomes} | {checked} | {r['violations']} | "
                   f"{r['mask_time_errors']} | {r['slowest_compile_s']} s | {r['rss_growth_mib']} MiB |")  # fmt: skip
    out += ["", "Found by the fuzzers, run again now: malformed schemas that must be a SchemaError, stacked regex "
            "quantifiers, and soundness holes of complements (equal values spelled otherwise; pinned by tests in "
            "`tests/reliability/test_fuzz.py`; the regex oracle skips what Python cannot compile):", "",
            "| schema | problem | now |", "|---|---|---|"]  # fmt: skip
    out += [f"| `{json.dumps(b['schema'])}` | {b['problem']} | {b['now']} |" for b in report["known_bugs"]]
    slow = [
        (r["fuzzer"], x) for r in report["fuzz"] for x in r["timeout_examples"] + r["mask_error_examples"]
    ]
    if slow:
        out += ["", "Compile timeouts and mask-time bounds hit (each ends only its own request):", ""]
        out += [f"- {name}: `{x[:200]}`" for name, x in slow]
    out += ["", "## Faults", "", "| scenario | healthy ok | faulted ended as expected | preemptions | "
            "KV pool full after | pass |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["faults"]:
        out.append(f"| {r['name']} | {r['healthy_ok']}/{r['healthy']} | {r['faulted_ended']}/{r['faulted']} | "
                   f"{r['preemptions']} | {r['blocks_full']} | {'yes' if r['ok'] else 'NO'} |")  # fmt: skip
    ld = report["load"]
    out += ["", "## Load", "", f"{ld['requests']} chat requests from {ld['concurrency']} concurrent clients "
            f"(mixed free text, `guided_choice`, strict JSON Schema, `guided_regex`):", "",
            f"- answered 200: {ld['ok']}; errors: {ld['errors']}; lost: {ld['lost']}; duplicated: {ld['duplicated']}",
            f"- guided outputs valid: {ld['guided_valid']}/{ld['guided']}",
            f"- latency p50 {ld['p50_s']} s, p99 {ld['p99_s']} s, max {ld['max_s']} s; {ld['req_per_s']} req/s "
            f"({ld['wall_s']} s)",
            f"- server process RSS {ld['rss_before_mib']} MiB before, {ld['rss_after_mib']} MiB after "
            f"({ld['rss_growth_pct']:+.2f}%); requests in flight and KV pool after: "
            f"{'none, full' if ld['drained'] else 'NOT drained'}", ""]  # fmt: skip
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fuzz", type=int, default=500, help="cases per fuzzer (default 500)")
    p.add_argument("--requests", type=int, default=2000, help="load: requests (default 2000)")
    p.add_argument("--concurrency", type=int, default=64, help="load: concurrent clients (default 64)")
    p.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    args = p.parse_args(argv)
    if args.quick:
        args.fuzz, args.requests = 40, 200
    warnings.simplefilter("ignore")  # lenient-mode notes from the fuzzers would flood the output
    command = "python benchmarks/reliability.py" + ("" if argv is None else " " + " ".join(argv or []))
    report = {"command": command.strip(), "date": time.strftime("%Y-%m-%d"), "args": vars(args),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"}  # fmt: skip
    for part, run in (("fuzz", lambda: fuzz(args.fuzz)), ("faults", faults),
                      ("load", lambda: load(args.requests, args.concurrency))):  # fmt: skip
        t0 = time.perf_counter()
        report[part] = run()
        if part == "fuzz":
            report["fuzz"], report["known_bugs"] = report["fuzz"]
        print(f"{part}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "reliability.json").write_text(json.dumps(report, indent=1) + "\n")
    (RESULTS / "reliability.md").write_text(render(report))
    print(render(report))
    bad = [r["fuzzer"] for r in report["fuzz"] if r["violations"]] + [
        r["name"] for r in report["faults"] if not r["ok"]
    ]
    ld = report["load"]
    if ld["errors"] or ld["lost"] or ld["duplicated"] or ld["guided_valid"] != ld["guided"]:
        bad.append("load")
    print(f"failures: {bad}" if bad else "all checks passed", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
