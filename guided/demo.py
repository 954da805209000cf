"""``guided demo``: the main job on the embedded default model (or a local model directory).

It loads the model (the embedded default is built once and cached), then generates under each demo
constraint — the JSON Schemas in ``schemas/demo``, a regex and a choice — and checks every output
with an independent oracle (the ``jsonschema`` validator, Python's ``re``). With the random-weight
default the text is meaningless, but every finished output is valid.
"""

from __future__ import annotations

import json
import re
import time
from importlib.resources import files
from pathlib import Path

from guided.builtin.tiny_model import default_model_dir
from guided.constraints import Choice, JsonSchema, Regex
from guided.engine.sampling_params import SamplingParams
from guided.errors import ModelLoadError
from guided.llm import LLM

__all__ = ["run_demo", "demo_schemas"]

SCHEMA_DIR = files("guided.schema_files") / "demo"  # the top-level schemas/ folder, shipped as package data
DEMO_REGEX = r"(\+1 )?\(\d{3}\) \d{3}-\d{4}"
DEMO_CHOICES = ["positive", "negative", "neutral"]


def demo_schemas() -> dict[str, dict]:
    """The demo schemas by file stem."""
    found = sorted((p for p in SCHEMA_DIR.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)
    return {p.name.removesuffix(".json"): json.loads(p.read_text()) for p in found}


def run_demo(model: str | None = None, max_tokens: int = 256) -> int:
    import jsonschema

    t0 = time.perf_counter()
    if model is None:
        model = default_model_dir()
        print(f"guided demo: using the embedded default model ({model.name}). Its weights are random, so its")
        print("text is meaningless; under a constraint it is still always valid. Pass --model DIR for real weights.")
    elif Path(model).expanduser().is_dir() and not (Path(model).expanduser() / "config.json").exists():
        raise ModelLoadError(f"{model} is not a local HF model directory (no config.json)")
    llm = LLM(model)
    print(f"model loaded in {time.perf_counter() - t0:.1f} s; lm_head width {llm.engine.vocab_size}")
    failures = 0
    params = [SamplingParams(temperature=0.0, max_tokens=max_tokens),
              SamplingParams(temperature=1.0, seed=1, max_tokens=max_tokens)]  # fmt: skip
    for name, schema in demo_schemas().items():
        constraint = JsonSchema(schema, whitespace="compact")  # flexible whitespace is the default
        outs = llm.generate([f"A {name} as JSON:"] * 2, params, use_tqdm=False, response_format=constraint)
        for out in outs:
            ok = out.finish_reason == "stop" and _valid_json(jsonschema, schema, out.text)
            failures += out.finish_reason == "stop" and not ok
            print(f"[{name}] {out.finish_reason}, {'valid' if ok else 'cut short'}: {out.text[:160]}")
    checks = [(Regex(DEMO_REGEX), lambda t: re.fullmatch(DEMO_REGEX, t) is not None, "phone regex"),
              (Choice(DEMO_CHOICES), lambda t: t in DEMO_CHOICES, "choice")]  # fmt: skip
    for constraint, check, label in checks:
        for out in llm.generate(["Answer:"] * 2, params, use_tqdm=False, response_format=constraint):
            ok = out.finish_reason == "stop" and check(out.text)
            failures += not ok
            print(f"[{label}] {out.finish_reason}, {'valid' if ok else 'INVALID'}: {out.text!r}")
    stats = llm.engine.stats()
    print(f"{stats['num_output_tokens']} tokens, {stats['forced_fraction']:.0%} forced by the grammar; "
          f"done in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    return 1 if failures else 0


def _valid_json(jsonschema, schema: dict, text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
    except (ValueError, jsonschema.ValidationError):
        return False
    return True
