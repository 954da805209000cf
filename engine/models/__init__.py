"""Model implementations over the paged KV cache."""

from .llama import LlamaForCausalLM, ModelArgs

# config.json "model_type" -> implementation; one implementation covers all four with flags.
MODEL_TYPES = {"llama": LlamaForCausalLM, "mistral": LlamaForCausalLM, "qwen2": LlamaForCausalLM, "qwen3": LlamaForCausalLM}

__all__ = ["LlamaForCausalLM", "ModelArgs", "MODEL_TYPES"]
