"""Model shapes: what the performance model and feasibility rules need of a model.

A shape comes from a Hugging Face ``config.json`` on disk or from a named
preset. Hybrid models (linear-attention layers beside full attention, as in
Qwen3-Next) carry a per-sequence recurrent state instead of per-token KV in
their linear layers; MoE models read only the active experts' weights per token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelShape", "PRESETS", "preset_names", "get_preset", "shape_from_hf_config",
           "load_shape"]


class ModelShape(BaseModel):
    """Dimensions of a decoder-only transformer (dense or MoE, optionally hybrid)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    full_attention_layers: int | None = None  # None: every layer is full attention
    linear_state_bytes_per_layer: int = 0  # recurrent state per sequence per linear layer
    experts: int = 0  # 0: dense MLP
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0

    @property
    def attn_layers(self) -> int:
        return self.layers if self.full_attention_layers is None else self.full_attention_layers

    @property
    def linear_layers(self) -> int:
        return self.layers - self.attn_layers

    def _attn_params(self) -> int:
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_o + k_v

    def _mlp_params(self, active: bool) -> int:
        if not self.experts:
            return 3 * self.hidden * self.intermediate
        n = self.experts_per_token if active else self.experts
        shared = 3 * self.hidden * self.shared_expert_intermediate
        return n * 3 * self.hidden * self.expert_intermediate + shared + self.hidden * self.experts

    def params(self, active: bool = False) -> int:
        """Parameter count; ``active`` counts only the experts one token uses."""
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        per_layer = self._attn_params() + self._mlp_params(active) + 2 * self.hidden
        return embed + self.layers * per_layer

    def kv_bytes_per_token(self, kv_bytes: float, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on one GPU (KV heads replicate when tp > kv_heads)."""
        heads_per_gpu = max(1.0, self.kv_heads / tp)
        return 2 * self.attn_layers * heads_per_gpu * self.head_dim * kv_bytes

    def state_bytes_per_seq(self, tp: int = 1) -> float:
        return self.linear_layers * self.linear_state_bytes_per_layer / tp


PRESETS: dict[str, ModelShape] = {
    s.name: s
    for s in [
        ModelShape(name="llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8,
                   head_dim=128, intermediate=14336, vocab=128256),
        ModelShape(name="llama-3.1-70b", layers=80, hidden=8192, heads=64, kv_heads=8,
                   head_dim=128, intermediate=28672, vocab=128256),
        ModelShape(name="qwen2.5-32b", layers=64, hidden=5120, heads=40, kv_heads=8,
                   head_dim=128, intermediate=27648, vocab=152064),
        # Qwen3-Next-80B-A3B-like: 3 of 4 layers Gated DeltaNet (state 32 heads x 128 x 128
        # in fp32 per sequence), 1 of 4 full attention; 512 experts, 10 active + 1 shared.
        ModelShape(name="qwen3-next-80b-a3b", layers=48, hidden=2048, heads=16, kv_heads=2,
                   head_dim=256, intermediate=5120, vocab=151936, full_attention_layers=12,
                   linear_state_bytes_per_layer=32 * 128 * 128 * 4, experts=512,
                   experts_per_token=10, expert_intermediate=512,
                   shared_expert_intermediate=512),
    ]
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_preset(name: str) -> ModelShape:
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known: {', '.join(preset_names())}")
    return PRESETS[name]


def shape_from_hf_config(cfg: dict[str, Any], name: str = "model") -> ModelShape:
    """Build a shape from a Hugging Face ``config.json`` dict (Llama, Qwen2/3, Qwen3-Next...)."""
    c = cfg.get("text_config", cfg)
    hidden = c["hidden_size"]
    heads = c["num_attention_heads"]
    layers = c["num_hidden_layers"]
    full = None
    state = 0
    if c.get("layer_types"):
        full = sum(1 for t in c["layer_types"] if t in ("full_attention", "attention"))
    elif c.get("full_attention_interval"):
        full = layers // int(c["full_attention_interval"])
    if full is not None and full < layers:
        v_heads = c.get("linear_num_value_heads", heads)
        k_dim, v_dim = c.get("linear_key_head_dim", 128), c.get("linear_value_head_dim", 128)
        state = v_heads * k_dim * v_dim * 4  # fp32 recurrent state
    return ModelShape(
        name=name, layers=layers, hidden=hidden, heads=heads,
        kv_heads=c.get("num_key_value_heads", heads),
        head_dim=c.get("head_dim") or hidden // heads,
        intermediate=c.get("intermediate_size", 4 * hidden), vocab=c["vocab_size"],
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        full_attention_layers=full, linear_state_bytes_per_layer=state,
        experts=c.get("num_experts", c.get("num_local_experts", 0)) or 0,
        experts_per_token=c.get("num_experts_per_tok", 0) or 0,
        expert_intermediate=c.get("moe_intermediate_size", 0) or 0,
        shared_expert_intermediate=c.get("shared_expert_intermediate_size", 0) or 0,
    )


def load_shape(preset: str | None = None, path: str | None = None) -> ModelShape:
    """A preset by name, or the ``config.json`` in a local model directory."""
    if preset is not None:
        return get_preset(preset)
    if path is None:
        raise ValueError("need a preset or a path")
    cfg_file = Path(path) / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file} not found (model.path must be a local model dir)")
    return shape_from_hf_config(json.loads(cfg_file.read_text()), name=Path(path).name)
