"""Hub names (``org/name``) resolve through the Hugging Face cache, as transformers does; tested on a
hub cache laid out here from the tiny model, offline (no download is ever attempted by these tests)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
from guided.engine.hub import looks_like_hub_id
from guided.engine.sampling_params import SamplingParams
from guided.errors import ModelLoadError
from guided.llm import LLM

SPEC = TinyModelSpec(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, seed=7)  # fmt: skip
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """A Hugging Face cache holding ``org/tiny`` at ``main``; the process offline."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    shutil.copytree(tiny_model_dir("builtin", SPEC), repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo / "snapshots" / COMMIT


def test_a_hub_name_loads_from_the_cache(hub_cache):
    llm = LLM("org/tiny", device="cpu", max_model_len=128)
    config = llm.engine.config
    assert config.hub_id == "org/tiny" and Path(config.model) == hub_cache
    out = llm.generate("x", SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)[0]
    assert len(out.token_ids) == 4
    local = LLM(str(hub_cache), device="cpu", max_model_len=128)  # the same model by its path
    assert local.generate("x", SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)[0].token_ids == out.token_ids


def test_the_server_names_the_model_by_its_hub_name(hub_cache):
    from guided.server.served_model import ServedModel

    served = ServedModel(LLM("org/tiny", device="cpu", max_model_len=128))
    try:
        assert served.name == "org/tiny"
    finally:
        served.shutdown()


def test_a_name_missing_from_the_cache_fails_at_once_offline(hub_cache):
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache and HF_HUB_OFFLINE is set"):
        LLM("org/missing", device="cpu")
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("name, hub", [("Qwen/Qwen3-0.6B", True), ("org/name.v2", True), ("./local/dir", False),
                                       ("/abs/path", False), ("a/b/c", False), ("~/x", False), ("plain", False)])  # fmt: skip
def test_what_counts_as_a_hub_name(name, hub):
    assert looks_like_hub_id(name) is hub
