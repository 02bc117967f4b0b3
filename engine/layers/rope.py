"""Rotary position embeddings: inverse frequencies for the HF rope types, and one table.

The cos/sin table for every position up to max_model_len is computed once at start-up;
each step gathers its rows once and all layers share them (never recomputed per layer).
"""
from __future__ import annotations

import math
from typing import Tuple

import torch


def rope_parameters(hf_config) -> dict:
    """Normalise transformers 4.x (rope_theta + rope_scaling) and 5.x (rope_parameters)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    legacy = getattr(hf_config, "rope_scaling", None) or {}
    for key, value in legacy.items():
        params.setdefault(key, value)
    params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    rope_type = params.get("rope_type") or params.get("type") or "default"
    params["rope_type"] = rope_type
    return params


def _default(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _llama3(inv_freq: torch.Tensor, p: dict) -> torch.Tensor:
    factor, low, high = p["factor"], p.get("low_freq_factor", 1.0), p.get("high_freq_factor", 4.0)
    old_len = p["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(base: float, dim: int, p: dict, max_position_embeddings: int) -> Tuple[torch.Tensor, float]:
    factor = p["factor"]
    original = p.get("original_max_position_embeddings") or max_position_embeddings
    attention_factor = p.get("attention_factor")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction_dim(num_rotations):
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep, attention_factor


def inverse_frequencies(hf_config, head_dim: int, max_model_len: int) -> Tuple[torch.Tensor, float]:
    """(inv_freq float32 [head_dim/2], attention scaling applied to cos and sin)."""
    p = rope_parameters(hf_config)
    base, kind = float(p["rope_theta"]), p["rope_type"]
    dim = int(head_dim * p.get("partial_rotary_factor", 1.0))
    max_pos = getattr(hf_config, "max_position_embeddings", max_model_len)
    if kind == "default":
        return _default(base, dim), 1.0
    if kind == "linear":
        return _default(base, dim) / p["factor"], 1.0
    if kind == "llama3":
        return _llama3(_default(base, dim), p), 1.0
    if kind == "yarn":
        return _yarn(base, dim, p, max_pos)
    if kind == "dynamic":
        # HF rescales with the live sequence length; within the original length the
        # frequencies are the defaults. Beyond it we use the scaling for max_model_len.
        original = p.get("original_max_position_embeddings") or max_pos
        if max_model_len > original:
            factor = p["factor"]
            base = base * ((factor * max_model_len / original) - (factor - 1)) ** (dim / (dim - 2))
        return _default(base, dim), 1.0
    raise ValueError(f"unsupported rope_type {kind!r} (supported: default, linear, llama3, yarn, dynamic)")


class RotaryTable:
    """cos/sin for positions [0, max_positions), in the model dtype, built once."""

    def __init__(self, hf_config, head_dim: int, max_positions: int, device, dtype):
        inv_freq, scaling = inverse_frequencies(hf_config, head_dim, max_positions)
        # float32 throughout, as transformers computes it (it is our correctness oracle).
        positions = torch.arange(max_positions, dtype=torch.int64).float()
        freqs = torch.outer(positions, inv_freq.float())
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = (emb.cos() * scaling).to(device=device, dtype=dtype)
        self.sin = (emb.sin() * scaling).to(device=device, dtype=dtype)
        self.rotary_dim = emb.shape[-1]

    def gather(self, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Rows for this step's positions: [T, 1, rotary_dim] each, broadcast over heads."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, head_dim]; rotate-half convention (HF Llama/Qwen)."""
    rot = cos.shape[-1]
    if rot < x.shape[-1]:
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        return torch.cat([apply_rotary(x_rot, cos, sin), x_pass], dim=-1)
    half = rot // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin
