"""Print the figures of a gpu_check.sh OUTDIR against the targets of the GPU issue, one line each.

Usage: python scripts/gpu_summary.py OUTDIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _load(out: Path, prefix: str) -> dict:
    files = sorted(out.glob(f"{prefix}-*.json"))
    return json.loads(files[0].read_text()) if files else {}


def _f(value, fmt: str = ".3g") -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else str(value)


def tests(out: Path) -> list[str]:
    path = out / "gpu-tests.xml"
    if not path.exists():
        return ["tests: no junit file"]
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    lines = [f"tests: {counts['tests']} run, {counts['failures']} failed, {counts['errors']} errors, "
             f"{counts['skipped']} skipped"]  # fmt: skip
    for suite in suites:
        for case in suite.iter("testcase"):
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            if bad is not None:
                lines.append(f"  FAIL {case.get('classname')}::{case.get('name')}: "
                             f"{(bad.get('message') or '')[:160]}")  # fmt: skip
    return lines


def kernels(out: Path) -> list[str]:
    k = _load(out, "kernels")
    if not k:
        return ["kernels: no results"]
    lines = [f"kernels on {k['machine'].get('gpu')}: copy bandwidth {_f(k['copy_bandwidth_gbs'], '.0f')} GB/s"]
    for r in k.get("bitmask", []):
        lines.append(f"  bitmask B={r['batch']}: {_f(r['ours_ms'])} ms, vs xgrammar {_f(r.get('vs_xgrammar', '-'))} "
                     f"(<= 1.0), vs masked_fill {_f(r['vs_masked_fill'])} (<= 0.5)")  # fmt: skip
    for r in k.get("sampling", []):
        lines.append(f"  sample B={r['batch']} {r['dtype']} {r['logits']} {r['mode']}: {_f(r['fused_ms'])} ms, "
                     f"vs one read {_f(r['vs_one_read'])} (<= 1.3), vs torch {_f(r['vs_torch'])}")  # fmt: skip
    for r in k.get("paged_decode_attention", []):
        lines.append(f"  attention B={r['batch']} ctx={r['context']}: {_f(r['ours_ms'])} ms, "
                     f"{_f(r['share_of_bw'])} of bandwidth (>= 0.7), vs sdpa {_f(r['vs_sdpa'])} (<= 1.2)")  # fmt: skip
    return lines


def _section(name: str, d: dict | None, key: str, line) -> list[str]:
    """``line(d)`` when the section holds its figures (``key``), else the raw section (an error), or nothing."""
    if not d:
        return []
    return [line(d)] if key in d else [f"  {name}: {d}"]


def engine(out: Path) -> list[str]:
    t, g = _load(out, "throughput"), _load(out, "guided-overhead")
    if not t:
        return ["engine: no results"]
    lines = [f"engine: {t.get('model')} on {t.get('device')}, build {t.get('model_build_s')} s, "
             f"load {t.get('engine_load_s')} s, CUDA graphs {t.get('engine', {}).get('num_cuda_graphs')} "
             f"{t.get('engine', {}).get('graph_error') or ''}"]  # fmt: skip
    lines += _section("decode", t.get("decode"), "ratio", lambda d: (
        f"  decode B=1: {_f(d['graphs_on_ms'])} ms (graphs off {_f(d['graphs_off_ms'])}), roofline "
        f"{_f(d['roofline_ms'])} ms -> {_f(d['ratio'])}x (<= 1.25)"))  # fmt: skip
    for r in t.get("throughput") or []:
        if "graphs_on" in r:
            lines.append(f"  offline C={r['concurrency']}: {_f(r['graphs_on']['output_tok_s'], '.0f')} tok/s, "
                         f"graphs off {_f(r['graphs_off']['output_tok_s'], '.0f')}")  # fmt: skip
    for r in t.get("latency") or []:
        if isinstance(r, dict) and "ttft_p50_ms" in r:
            lines.append(f"  latency C={r['concurrency']}: TTFT p50 {_f(r['ttft_p50_ms'])} ms p99 "
                         f"{_f(r['ttft_p99_ms'])}, TPOT p50 {_f(r['tpot_p50_ms'])} ms p99 {_f(r['tpot_p99_ms'])}")  # fmt: skip
    lines += _section("hf", t.get("hf"), "per_batch_tok_s", lambda hf: (
        f"  HF generate tok/s by batch {hf['per_batch_tok_s']}; engine/HF "
        f"{hf.get('engine_over_hf_at_batch')} (>= 10 at 64)"))  # fmt: skip
    lines += _section("guided", g.get("guided"), "guided100_over_free", lambda gd: (
        f"  guided 100%/0% by concurrency {({k: round(v, 3) for k, v in gd['guided100_over_free'].items()})} "
        f"(>= 0.95); pool {g.get('schema_pool')}"))  # fmt: skip
    st = g.get("steered") or {}
    for c, r in (st.get("ratios") or {}).items():
        rows = [x for x in st["rows"] if str(x["concurrency"]) == c]
        guided = next((x for x in rows if x["guided_fraction"] == 1.0 and x["fast_forward"]), {})
        lines.append(f"  steered C={c}: guided/free {_f(r['guided_over_free'])} (>= 0.95), fast-forward "
                     f"{_f(r['fast_forward_gain'])}x (>= 1.3), forced {_f(guided.get('forced_fraction'))}, "
                     f"finish {guided.get('finish')}, lost {guided.get('steering', {}).get('lost')}, "
                     f"held {guided.get('masks', {}).get('mask_rows_held')}")  # fmt: skip
    if st and "ratios" not in st:
        lines.append(f"  steered: {st}")
    lines += _section("fast_forward", g.get("fast_forward"), "speedup", lambda ff: (
        f"  fast-forward: {_f(ff['speedup'])}x (>= 1.3), forced {_f(ff['ff_on']['forced_fraction'])}, "
        f"stopped {ff['ff_on']['stopped']}/{ff['requests']}"))  # fmt: skip
    return lines


def main() -> int:
    out = Path(sys.argv[1])
    for line in tests(out) + kernels(out) + engine(out):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
