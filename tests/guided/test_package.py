"""The package as a user meets it: imports, the CLI, local-only loading, tiny models."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import guided
from guided.errors import GrammarError, GuidedError, ModelLoadError, SchemaError, TokenizerError


def test_import_light():
    # importing the package root and the grammar leaf must not import torch or the engine
    code = "import sys, guided, guided.grammar.vocab; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_error_hierarchy():
    for cls in (GrammarError, SchemaError, TokenizerError, ModelLoadError):
        assert issubclass(cls, GuidedError) and issubclass(cls, ValueError)
    assert "at #/properties/x" in str(SchemaError("bad", "#/properties/x"))


def test_lazy_exports():
    assert guided.Vocabulary.__name__ == "Vocabulary"
    with pytest.raises(AttributeError):
        guided.no_such_thing  # noqa: B018


def test_cli_help():
    for argv in (["-m", "guided", "--help"], ["-m", "guided"]):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "demo" in out.stdout


def test_cli_vocab_builtin():
    out = subprocess.run([sys.executable, "-m", "guided", "vocab", "builtin"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "n_tokens=8192" in out.stdout


def test_hub_names_fail_fast():
    out = subprocess.run(
        [sys.executable, "-m", "guided", "vocab", "meta-llama/Llama-3.1-8B-Instruct"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "never downloads" in out.stderr


def test_load_tokenizer_errors(tmp_path):
    from guided.builtin.tokenizers import load_tokenizer

    with pytest.raises(TokenizerError, match="not a local path"):
        load_tokenizer("gpt2")
    with pytest.raises(TokenizerError, match="no tokenizer"):
        load_tokenizer(tmp_path)


def test_builtin_tokenizer_is_deterministic(tmp_path, monkeypatch, tokenizer_builtin):
    from guided.builtin.tokenizers import builtin_tokenizer_dir, cache_dir

    monkeypatch.setenv("GUIDED_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    fresh = json.loads((builtin_tokenizer_dir() / "tokenizer.json").read_text())
    assert fresh["model"]["vocab"] == tokenizer_builtin.backend_tokenizer.get_vocab(with_added_tokens=False)


def test_tiny_model_reproducible_and_loads(tmp_path):
    import torch
    import transformers

    from guided.builtin.tiny_model import TinyModelSpec, write_tiny_model

    spec = TinyModelSpec(arch="qwen2", hidden_size=32, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64)
    a = write_tiny_model(tmp_path / "a", "builtin", spec)
    b = write_tiny_model(tmp_path / "b", "builtin", spec)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    model = transformers.AutoModelForCausalLM.from_pretrained(a)
    tok = transformers.AutoTokenizer.from_pretrained(a)
    assert model.config.vocab_size > len(tok) - 1  # lm_head padded past the tokenizer
    ids = tok("print(1)", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)


def test_tiny_model_spec_checks():
    from guided.builtin.tiny_model import TinyModelSpec
    from guided.errors import ConfigError

    with pytest.raises(ConfigError, match="arch"):
        TinyModelSpec(arch="gpt2")
    with pytest.raises(ConfigError, match="multiple"):
        TinyModelSpec(num_heads=3, num_kv_heads=2)


def test_demo_runs():
    out = subprocess.run([sys.executable, "-m", "guided", "demo"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "embedded default model" in out.stdout
