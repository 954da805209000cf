"""Phi-3 and Phi-4 (config ``model_type`` "phi3"): the Llama layers, from checkpoints that store their
projections fused.

What differs from Llama, all read from config.json: the checkpoint holds ``qkv_proj`` (q, then k,
then v) and ``gate_up_proj`` (gate, then up) as single weights, which load into this implementation's
fused parameters piece by piece (each rank its heads and its width, under tensor parallelism); ``partial_rotary_factor`` (Phi-4-mini: 0.75) turns only the first part of each
head; LongRoPE (``rope_scaling.type`` "longrope": short factors up to
``original_max_position_embeddings`` tokens, long ones past it, and an attention factor on cos/sin)
lives in the shared ``RotaryEmbedding``, with the scheduler recomputing a sequence's KV when it grows
past that length, as transformers does. A ``sliding_window`` is honoured in every layer (``layers``).
"""

from __future__ import annotations

import torch

from .llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    """Phi-3 / Phi-4: ``LlamaForCausalLM`` whose checkpoint names are its fused parameters."""

    # a fused checkpoint weight -> the separate ones it stacks, loaded each as Llama loads them (so
    # that under tensor parallelism each rank takes its heads of q, of k and of v)
    FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}

    def load_weight(self, name: str, tensor: torch.Tensor) -> bool:
        for fused, parts in self.FUSED.items():
            if f".{fused}." in name:
                a = self.args
                sizes = ([a.num_heads * a.head_dim] + [a.num_kv_heads * a.head_dim] * 2 if fused == "qkv_proj"
                         else [a.intermediate_size] * 2)  # fmt: skip
                if tensor.shape[0] != sum(sizes):
                    return super().load_weight(name, tensor)  # copy_weight names the shape mismatch
                return all([super(Phi3ForCausalLM, self).load_weight(name.replace(fused, part), piece)
                            for part, piece in zip(parts, tensor.split(sizes), strict=True)])  # fmt: skip
        return super().load_weight(name, tensor)
