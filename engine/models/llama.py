"""The Llama family in our own torch code: Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM2.

Differences are read from the HF config: qkv bias (Qwen2 always, Llama's attention_bias),
q/k RMSNorm before RoPE (Qwen3), tied or untied embeddings, head_dim, rope scaling.
Projections are fused (qkv, gate_up) so each layer runs four matmuls; the loader maps
HF's separate weights into the fused shards.
"""
from __future__ import annotations

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.norm import RMSNorm
from ..layers.rope import apply_rotary
from .step import StepContext


class Attention(nn.Module):
    def __init__(self, cfg, layer_idx: int, dims, qkv_bias: bool, o_bias: bool, qk_norm: bool):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = dims
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_size, self.kv_size = q_size, kv_size
        self.qkv_proj = nn.Linear(cfg.hidden_size, q_size + 2 * kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(q_size, cfg.hidden_size, bias=o_bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if qk_norm else None

    def forward(self, x: torch.Tensor, step: StepContext) -> torch.Tensor:
        T = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(T, self.num_heads, self.head_dim)
        k = k.view(T, self.num_kv_heads, self.head_dim)
        v = v.view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, step.cos, step.sin), apply_rotary(k, step.cos, step.sin)
        out = step.attention.forward(q, k, v, step.kv_caches[self.layer_idx], step.attn_meta)
        return self.o_proj(out.reshape(T, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg, bias: bool):
        super().__init__()
        if getattr(cfg, "hidden_act", "silu") not in ("silu", "swish"):
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r} (only silu)")
        self.intermediate = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx: int, dims, variant: dict):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx, dims, variant["qkv_bias"], variant["o_bias"],
                                   variant["qk_norm"])
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, variant["mlp_bias"])

    def forward(self, x: torch.Tensor, step: StepContext) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), step)
        return x + self.mlp(self.post_attention_layernorm(x))


def variant_of(cfg) -> dict:
    kind = cfg.model_type
    attention_bias = bool(getattr(cfg, "attention_bias", False))
    return {
        "qkv_bias": True if kind == "qwen2" else attention_bias,
        "o_bias": False if kind == "qwen2" else attention_bias,
        "qk_norm": kind == "qwen3",
        "mlp_bias": bool(getattr(cfg, "mlp_bias", False)),
    }


class LlamaForCausalLM(nn.Module):
    model_types = ("llama", "mistral", "qwen2", "qwen3")

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.dims = (cfg.num_attention_heads, kv_heads, head_dim)
        variant = variant_of(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, self.dims, variant)
                                    for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.tie_word_embeddings = bool(getattr(cfg, "tie_word_embeddings", False))
        self.lm_head = None if self.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, step: StepContext) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, step)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head, only for the rows that sample (float32 logits)."""
        h = self.norm(hidden)
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(h, weight).float()

    # --- weights ---------------------------------------------------------------------------
    def _target(self, name: str) -> Tuple[str, int, int]:
        """Map an HF parameter name to (our name, shard offset, shard rows); rows -1 = whole."""
        name = name.replace("model.", "", 1) if name.startswith("model.") else name
        n_h, n_kv, d = self.dims
        for proj, offset, rows in (("q_proj", 0, n_h * d), ("k_proj", n_h * d, n_kv * d),
                                   ("v_proj", (n_h + n_kv) * d, n_kv * d)):
            if f"self_attn.{proj}." in name:
                return name.replace(proj, "qkv_proj"), offset, rows
        inter = self.config.intermediate_size
        for proj, offset in (("gate_proj", 0), ("up_proj", inter)):
            if f"mlp.{proj}." in name:
                return name.replace(proj, "gate_up_proj"), offset, inter
        return name, 0, -1

    @torch.no_grad()
    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        params = dict(self.named_parameters())
        loaded = set()
        for hf_name, tensor in weights:
            if "rotary_emb" in hf_name:
                continue
            if hf_name == "lm_head.weight" and self.lm_head is None:
                continue
            name, offset, rows = self._target(hf_name)
            if name not in params:
                raise ValueError(f"checkpoint has an unexpected weight {hf_name!r}")
            param = params[name]
            target = param if rows < 0 else param.narrow(0, offset, rows)
            if target.shape != tensor.shape:
                raise ValueError(f"weight {hf_name!r} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}")
            target.copy_(tensor)
            loaded.add((name, offset))
        expected = {(n, 0) for n in params}
        missing = sorted(n for n, _ in expected - {(n, 0) for n, _ in loaded})
        if missing:
            raise ValueError(f"checkpoint is missing weights: {', '.join(missing[:8])}"
                             + (" ..." if len(missing) > 8 else ""))
