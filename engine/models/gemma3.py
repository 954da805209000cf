"""Gemma 3, text: ``model_type`` "gemma3_text" (Gemma 3 1B) and the language model of the multimodal
"gemma3" checkpoints (4B, 12B, 27B: ``Config`` reads their ``text_config``, the vision tower's
weights are skipped; prompts are text only).

What differs from Llama, all read from config.json:

* interleaved attention: ``layer_types`` (or every ``sliding_window_pattern``-th layer) says which
  layers are global; the others attend to the last ``sliding_window`` keys only (the paged KV cache
  keeps every position, so prefix caching is unchanged; the attention path masks the rest);
* two rotary embeddings: the global layers' base (1M, with the checkpoint's scaling: linear 8x on
  the 4B-27B models) and the local layers' (10k);
* RMSNorms whose weight is an offset from 1 (``GemmaRMSNorm``), q/k norms of that kind, and four per
  layer: after attention and around the MLP (``pre_feedforward_layernorm``,
  ``post_feedforward_layernorm``) besides the input norm;
* the embedding scaled by sqrt(hidden_size) (rounded to the weights' dtype, as transformers does);
* attention scaled by ``query_pre_attn_scalar ** -0.5``, the MLP's activation tanh-GELU, the
  logits soft-capped when ``final_logit_softcapping`` is set.

Attention-logit soft-capping (Gemma 2) and bidirectional attention (embedding models) are refused.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from guided.errors import ModelLoadError

from ..step_context import StepContext
from .layers import MLP, Attention, GemmaRMSNorm, ModelArgs, RotaryEmbedding
from .llama import LlamaForCausalLM

_VISION = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, window: int | None):
        super().__init__()
        h, eps = args.hidden_size, args.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(h, eps)
        self.self_attn = Attention(args, window, norm=GemmaRMSNorm)
        self.post_attention_layernorm = GemmaRMSNorm(h, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(h, eps)
        self.mlp = MLP(args)
        self.post_feedforward_layernorm = GemmaRMSNorm(h, eps)

    def forward(self, x, positions, rotary, ctx, long=None):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), positions, rotary, ctx, long))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3ForCausalLM(LlamaForCausalLM):
    """Gemma 3's text model over the shared attention, MLP and rotary layers."""

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        if cfg.get("attn_logit_softcapping"):
            raise ModelLoadError("attention-logit soft-capping (Gemma 2) is not supported")
        if cfg.get("use_bidirectional_attention"):
            raise ModelLoadError("bidirectional attention (Gemma embedding models) is not supported")

    def __init__(self, args: ModelArgs):
        _check(args)
        super().__init__(args)
        self.norm = GemmaRMSNorm(args.hidden_size, args.rms_norm_eps)
        # the sliding-window layers' rotary embedding: their own base, no scaling
        self.local_rotary = RotaryEmbedding(replace(args, rope_theta=args.local_rope_theta, rope_scaling=None))
        # sqrt(hidden_size) in the weights' dtype (the build's default dtype), as transformers rounds it
        self.register_buffer("embed_scale", torch.tensor(args.hidden_size**0.5), persistent=False)

    def checkpoint_name(self, name: str) -> str | None:
        """A multimodal checkpoint's language-model weights under their text-only names (transformers'
        ``language_model.model.`` or ``model.language_model.`` prefix); its vision tower and projector
        are skipped."""
        for prefix in ("language_model.model.", "model.language_model.", "language_model."):
            if name.startswith(prefix):
                return name[len(prefix) :]
        if name.startswith(_VISION):
            return None
        return name

    def make_layer(self, args: ModelArgs, index: int) -> Gemma3DecoderLayer:
        layer = Gemma3DecoderLayer(args, args.window(index))
        layer.sliding = bool(args.sliding_layers and args.sliding_layers[index])  # its rotary is the local one
        return layer

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        x = x * self.embed_scale
        for layer in self.layers:
            x = layer(x, positions, self.local_rotary if layer.sliding else self.rotary, ctx)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor | None:
        logits = super().logits(hidden)
        cap = self.args.final_logit_softcapping
        if logits is not None and cap:
            logits = torch.tanh(logits / cap) * cap
        return logits


def _check(args: ModelArgs) -> None:
    if args.local_rope_theta is None:
        raise ModelLoadError("a Gemma 3 config needs the local layers' rotary base")
    if args.rope_scaling is not None and args.rope_scaling["rope_type"] not in ("linear",):
        raise ModelLoadError(f"Gemma 3 rope scaling {args.rope_scaling['rope_type']!r} is not supported (supported: "
                             "linear)")  # fmt: skip
