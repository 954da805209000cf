"""Model names of the Hugging Face Hub (``org/name``) resolved to a local snapshot directory.

A name that is not a local directory goes through ``huggingface_hub`` as transformers does: its
cache (``HF_HUB_CACHE`` / ``HF_HOME``), ``HF_TOKEN``, a ``revision``; only the files a model needs
(config, generation config, tokenizer files, safetensors weights) are fetched. The cache is tried
first, without the network; ``HF_HUB_OFFLINE=1`` stops there. A download is bounded (10 s to reach
the hub), so with no network a name fails within seconds with a message saying how to pass a local
directory instead.
"""

from __future__ import annotations

import os
import re

from guided.errors import ModelLoadError

__all__ = ["looks_like_hub_id", "resolve_hub_model"]

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
MODEL_FILES = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
               "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
               "vocab.json", "merges.txt", "*.tiktoken", "chat_template.jinja"]  # fmt: skip
CONNECT_TIMEOUT_S = 10.0


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` (one slash, no path syntax): what a user types for a hub model."""
    return bool(HUB_ID.match(name)) and not name.startswith((".", "~"))


def resolve_hub_model(repo_id: str, revision: str | None = None) -> str:
    """The local snapshot directory of ``repo_id``: from the cache, else downloaded (bounded)."""
    try:
        import huggingface_hub
    except ImportError as e:  # a dependency of transformers: normally present
        raise ModelLoadError(f"{repo_id!r} is not a local directory, and huggingface_hub is not installed to "
                             "fetch it from the hub") from e  # fmt: skip
    kwargs = dict(repo_id=repo_id, revision=revision, allow_patterns=MODEL_FILES,
                  cache_dir=os.environ.get("HF_HUB_CACHE") or None)  # fmt: skip
    try:
        return huggingface_hub.snapshot_download(local_files_only=True, **kwargs)
    except Exception as cached:  # noqa: BLE001 - not in the cache (or an unusable entry): go online
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
            raise ModelLoadError(f"model {repo_id!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set; "
                                 "download it first or pass a local model directory") from cached  # fmt: skip
    try:
        return huggingface_hub.snapshot_download(etag_timeout=CONNECT_TIMEOUT_S, **kwargs)
    except Exception as e:  # noqa: BLE001 - network, auth, missing repo: one clear message
        raise ModelLoadError(f"cannot fetch model {repo_id!r} from the Hugging Face Hub ({type(e).__name__}: "
                             f"{str(e)[:200]}); pass a local model directory, or set HF_TOKEN for a gated "
                             "model") from e  # fmt: skip
