"""Config: every engine-wide setting in one flat, checked dataclass."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from guided.errors import ConfigError, ModelLoadError

from .hub import looks_like_hub_id, resolve_hub_model
from .speculative import SpeculativeConfig

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(slots=True)
class Config:
    """Engine configuration.

    Parameters
    ----------
    model : str
        Local Hugging Face model directory (config.json + safetensors), or a hub name (``org/name``),
        resolved through the Hugging Face cache or downloaded (``engine.hub``).
    revision : str, optional
        The hub revision (branch, tag or commit) of a hub name.
    tokenizer : str, optional
        Local tokenizer directory; defaults to ``model``.
    dtype : str
        "auto" (the checkpoint's dtype on GPU, float32 on CPU), "float32", "bfloat16" or "float16".
    device : str
        "auto" (CUDA when available), "cuda", "cuda:N" or "cpu".
    block_size : int
        Tokens per KV-cache block.
    gpu_memory_utilization : float
        Fraction of the GPU's memory the engine may use in all (weights, activations, KV cache).
    kv_cache_memory_bytes : int, optional
        KV pool size in bytes; on CPU defaults to 256 MiB (or what ``max_num_seqs`` full-length
        sequences need, whichever is smaller).
    num_kv_blocks : int, optional
        Exact number of KV blocks (overrides both memory settings; tests use it for tiny pools).
    max_num_seqs : int
        Most sequences in one step.
    max_num_batched_tokens : int
        Token budget of one step (decodes + prefill chunks).
    max_model_len : int, optional
        Longest prompt + output; defaults to the model's ``max_position_embeddings``.
    enable_prefix_caching : bool
        Reuse KV blocks of identical full-block prefixes.
    enable_chunked_prefill : bool
        Split long prompts into chunks under the token budget (else a prompt is scheduled whole).
    enforce_eager : bool
        Disable CUDA graphs for decode steps.
    cuda_graph_max_batch : int
        Largest decode batch captured as a CUDA graph.
    cuda_graph_max_chunk : int
        Longest chunk of new tokens per sequence (fast-forwarded forced tokens) whose steps still run
        as CUDA graphs (1, 2, 4, 8 or 16; 1: single-token decodes only). Decoding sequences get at
        most this many new tokens a step when graphs are on.
    seed : int
        Seed of requests that give none (each request still gets its own stream).
    fast_forward : bool
        Guided decoding: tokens a grammar forces are appended and prefilled as one chunk instead of
        being decoded one step each.
    mask_threads : int
        Threads that compute guided masks not computed before, while the forward pass runs; 0
        computes them on the engine thread (a slow mask then holds up the step).
    mask_wait_s : float
        How long a step waits, once its logits are ready, for masks still being computed; a sequence
        whose mask is later is held back (it samples in a later step, from the same logits).
    tensor_parallel_size : int
        Ranks the model is split across (``engine.parallel``): spawned processes on this machine, or
        the ranks ``torchrun`` started. Attention and KV heads, the MLP's width and the vocabulary
        must divide by it. CUDA graphs are off under tensor parallelism (steps run eagerly).
    distributed_timeout_s : float
        Bound on one collective of the tensor-parallel group (a stuck peer); a peer that dies is
        seen at once.
    speculative : dict, optional
        Speculative decoding (``engine.speculative``): ``{"method": "ngram", "num_speculative_tokens":
        4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}`` drafts by prompt lookup, checked in one
        forward; the output is token for token that of plain decoding. None: off.
    """

    model: str
    tokenizer: str | None = None
    revision: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    num_kv_blocks: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    enforce_eager: bool = False
    cuda_graph_max_batch: int = 256
    cuda_graph_max_chunk: int = 8
    seed: int = 0
    fast_forward: bool = True
    mask_threads: int = 4
    mask_wait_s: float = 0.005
    tensor_parallel_size: int = 1
    distributed_timeout_s: float = 120.0
    speculative: dict | SpeculativeConfig | None = None
    hf_config: dict = field(default_factory=dict, repr=False)
    hub_id: str | None = None  # the hub name the model was resolved from, if any

    def __post_init__(self) -> None:
        self._check_model()
        self._check_numbers()
        self._resolve_max_model_len()

    def _check_model(self) -> None:
        path = Path(os.fspath(self.model)).expanduser()
        if not path.is_dir() and looks_like_hub_id(str(self.model)):
            self.hub_id = str(self.model)
            path = Path(resolve_hub_model(self.hub_id, self.revision))
        if not path.is_dir():
            hint = " (nor a hub name org/name)" if "/" not in str(self.model).strip("/") else ""
            raise ModelLoadError(f"model directory {str(self.model)!r} does not exist{hint}")
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ModelLoadError(f"{path} has no config.json; it is not a Hugging Face model directory")
        self.model = str(path)
        self.hf_config = language_model_config(json.loads(config_file.read_text()))
        if self.tokenizer is None:
            self.tokenizer = self.model
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")

    def _check_numbers(self) -> None:
        _positive("block_size", self.block_size)
        _positive("max_num_seqs", self.max_num_seqs)
        _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive("cuda_graph_max_batch", self.cuda_graph_max_batch)
        if self.cuda_graph_max_chunk not in (1, 2, 4, 8, 16):
            raise ConfigError(f"cuda_graph_max_chunk must be 1, 2, 4, 8 or 16, got {self.cuda_graph_max_chunk!r}")
        if isinstance(self.mask_threads, bool) or not isinstance(self.mask_threads, int) or self.mask_threads < 0:
            raise ConfigError(f"mask_threads must be an integer >= 0, got {self.mask_threads!r}")
        if not 0.0 <= self.mask_wait_s < 60.0:
            raise ConfigError(f"mask_wait_s must be in [0, 60), got {self.mask_wait_s}")
        self.speculative = SpeculativeConfig.parse(self.speculative)
        _positive("tensor_parallel_size", self.tensor_parallel_size)
        if self.tensor_parallel_size > 1 and self.device.startswith("cuda:"):
            raise ConfigError(f"device {self.device!r} names one GPU; with tensor_parallel_size > 1 use 'cuda' or "
                              "'auto' (rank i takes GPU i of its machine)")  # fmt: skip
        if not 0.0 < self.distributed_timeout_s <= 86400.0:
            raise ConfigError(f"distributed_timeout_s must be in (0, 86400], got {self.distributed_timeout_s}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.num_kv_blocks is not None:
            _positive("num_kv_blocks", self.num_kv_blocks)
        if self.kv_cache_memory_bytes is not None:
            _positive("kv_cache_memory_bytes", self.kv_cache_memory_bytes)

    def _resolve_max_model_len(self) -> None:
        limit = int(self.hf_config.get("max_position_embeddings", 2048))  # (sliding windows are attention's)
        if self.max_model_len is None:
            self.max_model_len = limit
        _positive("max_model_len", self.max_model_len)
        if self.max_model_len > limit:
            raise ConfigError(f"max_model_len={self.max_model_len} exceeds the model's limit of {limit} tokens")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f">= max_model_len ({self.max_model_len}) so that every prompt fits in one step"
            )


def language_model_config(cfg: dict) -> dict:
    """The config the engine runs: a multimodal Gemma 3 checkpoint's (``gemma3``) language model as
    ``gemma3_text``, its ``text_config`` completed with transformers' defaults (published configs
    leave the defaults out), the top-level EOS ids and embedding tying kept; any other config as it is."""
    if cfg.get("model_type") != "gemma3" or not isinstance(cfg.get("text_config"), dict):
        return cfg
    from transformers import Gemma3TextConfig

    text = Gemma3TextConfig(**cfg["text_config"]).to_dict()
    text.update(model_type="gemma3_text", multimodal=True, tie_word_embeddings=cfg.get("tie_word_embeddings", True))
    if cfg.get("eos_token_id") is not None:
        text["eos_token_id"] = cfg["eos_token_id"]
    return text


def worker_fields(config: Config) -> dict:
    """The keyword arguments that make ``config`` again in another process (a tensor-parallel worker):
    the model as the local directory it was resolved to."""
    skip = ("hf_config", "hub_id", "speculative")  # (rank 0 alone drafts and verifies)
    return {f.name: getattr(config, f.name) for f in fields(config) if f.name not in skip}


def longrope_switch(hf_config: dict) -> int | None:
    """LongRoPE (Phi-3's ``longrope``): the length past which a sequence takes the long factors
    (``original_max_position_embeddings``), or None for any other rotary embedding."""
    rope = hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type")) not in ("longrope", "su"):  # ("su": early Phi-3-128k configs)
        return None
    original = rope.get("original_max_position_embeddings") or hf_config.get("original_max_position_embeddings")
    return int(original) if original else None


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
