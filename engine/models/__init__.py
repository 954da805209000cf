"""Model implementations over the paged KV cache: one file per family, sharing the layers of layers.py."""

from .gemma3 import Gemma3ForCausalLM
from .gpt_oss import GptOssForCausalLM
from .layers import ModelArgs
from .llama import LlamaForCausalLM
from .phi3 import Phi3ForCausalLM
from .qwen3_moe import MixtralForCausalLM, Qwen3MoeForCausalLM

# config.json "model_type" -> implementation (Llama 2/3, Mistral, Qwen2 and Qwen3 differ by flags)
MODEL_TYPES = {
    "llama": LlamaForCausalLM,
    "mistral": LlamaForCausalLM,
    "qwen2": LlamaForCausalLM,
    "qwen3": LlamaForCausalLM,
    "phi3": Phi3ForCausalLM,
    "qwen3_moe": Qwen3MoeForCausalLM,
    "mixtral": MixtralForCausalLM,
    "gemma3_text": Gemma3ForCausalLM,
    "gpt_oss": GptOssForCausalLM,
}

__all__ = ["LlamaForCausalLM", "GptOssForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "ModelArgs", "MODEL_TYPES"]
