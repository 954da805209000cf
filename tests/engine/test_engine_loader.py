"""Loading checkpoints: sharded safetensors, dtypes, missing weights."""

from __future__ import annotations

import json
import shutil

import pytest
from engine_testlib import PROMPTS, greedy, make_engine, model_dir, run_all, tokenizer
from safetensors.torch import load_file, save_file

from guided.engine.llm_engine import LLMEngine
from guided.errors import ModelLoadError


def copy_sharded(src, dst, drop: str | None = None):
    """``src`` re-saved as two shards with an index (optionally without one weight)."""
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    (dst / "model.safetensors").unlink()
    names = sorted(n for n in tensors if n != drop)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in halves.items():
        save_file({n: tensors[n] for n in part}, str(dst / file), metadata={"format": "pt"})
    index = {"weight_map": {n: f for f, part in halves.items() for n in part}}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    return dst


def generate(engine, prompt=PROMPTS[2], n=8):
    engine.add_request(prompt, greedy(n), request_id="r")
    return run_all(engine)["r"].token_ids


def test_sharded_checkpoint_loads_the_same_model(tmp_path):
    sharded = copy_sharded(model_dir("qwen2"), tmp_path / "sharded")
    engine = LLMEngine.from_model(sharded, tokenizer=tokenizer(), device="cpu", max_model_len=256)
    assert generate(engine) == generate(make_engine("qwen2"))


def test_missing_weight_is_a_clear_error(tmp_path):
    broken = copy_sharded(model_dir("llama"), tmp_path / "broken", drop="model.layers.1.self_attn.k_proj.weight")
    with pytest.raises(ModelLoadError, match="k_proj"):
        LLMEngine.from_model(broken, tokenizer=tokenizer(), device="cpu", max_model_len=256)
    (broken / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="missing"):
        LLMEngine.from_model(broken, tokenizer=tokenizer(), device="cpu", max_model_len=256)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs_on_cpu(dtype):
    engine = make_engine("llama", dtype=dtype)
    assert engine.runner.kv_cache.dtype.itemsize == 2
    assert len(generate(engine)) == 8
