"""The CLI's serve, generate and bench commands, as a user runs them (subprocesses, loopback only)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest


def _guided(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guided", *args], capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_generate_constraints(tmp_path):
    out = _guided("generate", "Color:", "--choice", "red", "green", "blue", "--max-tokens", "8")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("red", "green", "blue")
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"],
                                  "additionalProperties": False}))  # fmt: skip
    out = _guided("generate", "JSON:", "--schema", str(schema), "--max-tokens", "40", "--seed", "1",
                  "--temperature", "0.5", "--chat")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["n"] in (1, 2)
    out = _guided("generate", "x", "--regex", "(a)\\1")
    assert out.returncode == 2 and "backreference" in out.stderr


def test_warm_up_leaves_nothing_for_the_next_process_to_compile():
    """guided warm-up compiles the numba code a run needs into the on-disk cache: run again (a new
    process, as a server started after it), it compiles nothing. The first run may be cold (~60 s)."""
    first = _guided("warm-up", timeout=900)
    assert first.returncode == 0, first.stderr
    assert "guided warm-up: 36 outputs in" in first.stdout and "cached under" in first.stdout, first.stdout
    again = _guided("warm-up", "--json", timeout=300)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["outputs"] == 36
    assert summary["jit_seconds"] == 0.0, f"the second run compiled for {summary['jit_seconds']:.1f} s"


def test_generate_with_a_draft_model_prints_what_plain_decoding_does(tmp_path):
    """``--speculative-config`` with a draft model (the embedded model drafting for itself): the same
    output as without it (a missing draft model's error: tests/engine/test_speculative.py)."""
    from guided.builtin.tiny_model import default_model_dir

    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"tags": {"type": "array", "items": {
        "enum": ["red", "green"]}, "maxItems": 4}}, "required": ["tags"], "additionalProperties": False}))  # fmt: skip
    args = ("generate", "JSON:", "--schema", str(schema), "--max-tokens", "30", "--seed", "3", "--temperature", "0.7")
    plain = _guided(*args)
    draft = json.dumps({"model": str(default_model_dir()), "num_speculative_tokens": 3})
    spec = _guided(*args, "--speculative-config", draft)
    assert plain.returncode == spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout and json.loads(spec.stdout)["tags"] is not None


def test_generate_with_a_lark_file_that_imports_its_siblings(shared):
    path = shared("data", "grammars", "lark", "storage.lark")  # %import .csv.start, .json.start
    out = _guided("generate", "Data:", "--grammar", str(path), "--max-tokens", "12")
    assert out.returncode == 0, out.stderr
    assert "finish_reason=" in out.stderr and out.stdout.strip()


def test_bench_passes_arguments_through():
    for suite in ("maskbench", "json-schema-test-suite", "serve"):
        out = _guided("bench", suite, "--help", timeout=60)
        assert out.returncode == 0, out.stderr
        assert "usage" in out.stdout.lower()


def test_serve_answers_openai_client():
    openai = pytest.importorskip("openai")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "guided", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "tiny", "--api-key", "sekret", "--log-level", "warning",
                             "--json-open-objects"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "guided serve did not start"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sekret", max_retries=0)
        r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                           extra_body={"guided_choice": ["yes", "no"]})  # fmt: skip
        assert r.choices[0].message.content in ("yes", "no")
        wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    finally:
        proc.terminate()
        proc.wait(30)
    assert "JSON objects open" in proc.stderr.read()  # the flag reached the served model
