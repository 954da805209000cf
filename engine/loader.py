"""Loading a model from a local Hugging Face directory: config.json + safetensors, never the network."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from guided.errors import ModelLoadError

from .models import MODEL_TYPES, ModelArgs
from .parallel import SINGLE, TensorParallel


def safetensors_files(model_dir: str | Path) -> list[Path]:
    """The checkpoint's safetensors files (one, or the shards an index names)."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ModelLoadError(
            f"model directory {str(model_dir)!r} does not exist"
        )
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelLoadError(f"{path}: shards named by {index.name} are missing: {missing[:3]}")
        return [path / s for s in shards]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        other = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt")]
        hint = f" (found {other[:3]}; convert them to safetensors)" if other else ""
        raise ModelLoadError(f"{path} has no .safetensors weights{hint}")
    return files


def load_model(model_dir: str | Path, hf_config: dict, dtype: torch.dtype, device: torch.device,
               tp: TensorParallel = SINGLE):  # fmt: skip
    """Build the model for ``hf_config`` on ``device`` in ``dtype`` and load its weights (this rank's
    part of each, under tensor parallelism ``tp``).

    Returns
    -------
    torch.nn.Module
        The model in eval mode, every parameter loaded from the checkpoint.
    """
    from safetensors import safe_open

    model_type = hf_config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ModelLoadError(f"model_type {model_type!r} is not supported (supported: {sorted(MODEL_TYPES)})")
    files = safetensors_files(model_dir)
    cls = MODEL_TYPES[model_type]
    quant = (hf_config.get("quantization_config") or {}).get("quant_method")
    if quant is not None and quant not in cls.QUANTIZATIONS:
        raise ModelLoadError(f"{model_type} checkpoints quantized with {quant!r} are not supported "
                             f"(supported: {list(cls.QUANTIZATIONS) or 'none'})")  # fmt: skip
    cls.check_config(hf_config)
    model = _build(MODEL_TYPES[model_type], replace(ModelArgs.from_hf(hf_config), tp=tp), dtype, device)
    loaded: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for stored in f.keys():
                name = model.checkpoint_name(stored)  # None: a weight this model does not use (a vision tower)
                if name is not None and model.load_weight(name, f.get_tensor(stored)):
                    loaded.add(name.removeprefix("model."))
    missing = model.missing_weights(loaded)
    if missing:
        raise ModelLoadError(f"{model_dir}: the checkpoint lacks weights {missing[:4]} ({len(missing)} missing)")
    return model.eval()


def _build(cls, args: ModelArgs, dtype: torch.dtype, device: torch.device):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return cls(args)
    finally:
        torch.set_default_dtype(previous)


def load_hf_tokenizer(path: str):
    """A transformers tokenizer from a local directory (never the network)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises many types; report one
        raise ModelLoadError(f"cannot load a tokenizer from {path}: {e}") from e
