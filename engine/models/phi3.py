"""Phi-3 and Phi-4 (config ``model_type`` "phi3"): the Llama layers, from checkpoints that store their
projections fused.

What differs from Llama, all read from config.json: the checkpoint holds ``qkv_proj`` (q, then k,
then v) and ``gate_up_proj`` (gate, then up) as single weights, which are this implementation's fused
parameters as they are; ``partial_rotary_factor`` (Phi-4-mini: 0.75) turns only the first part of each
head; LongRoPE (``rope_scaling.type`` "longrope": short factors up to
``original_max_position_embeddings`` tokens, long ones past it, and an attention factor on cos/sin)
lives in the shared ``RotaryEmbedding``, with the scheduler recomputing a sequence's KV when it grows
past that length, as transformers does. A ``sliding_window`` caps ``max_model_len`` at the window
(``Config``): attention is then exactly HF's.
"""

from __future__ import annotations

from .llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    """Phi-3 / Phi-4: ``LlamaForCausalLM`` whose checkpoint names are its fused parameters."""

    STACKED: dict[str, tuple[str, int]] = {}  # qkv_proj and gate_up_proj load as they are
