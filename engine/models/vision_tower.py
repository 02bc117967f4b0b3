"""The vision towers of Qwen2-VL and Qwen2.5-VL, in our own torch code.

Pixels arrive as the processor's flattened patches [N, channels*temporal*patch*patch] in
2x2-merge-block order. A linear patch embedding (HF's stride = kernel Conv3d), transformer
blocks with 2-D rotary positions (row, column), then the merger: norm, group each 2x2 block
of patches into one vector, MLP to the language model's width.

  Qwen2-VL:   LayerNorm, fc1 -> quick_gelu -> fc2, full attention over each image.
  Qwen2.5-VL: RMSNorm, gated MLP with bias, window attention (windows of
              window_size pixels) except in `fullatt_block_indexes` blocks.

An image is encoded whole, on its own (the encoder's unit of work is one image).
"""
from __future__ import annotations

from collections import defaultdict
from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.norm import RMSNorm
from ..layers.rope import apply_rotary

ACTIVATIONS = {
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def activation(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"unsupported vision activation {name!r} (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class Segments:
    """Independent attention groups (one per image frame, or per window), batched by length.
    Built once per image and shared by every block."""

    def __init__(self, lengths: Sequence[int], device):
        starts, offset = defaultdict(list), 0
        for length in lengths:
            if length:
                starts[length].append(offset)
            offset += length
        self.whole = len(starts) == 1 and len(next(iter(starts.values()))) == 1   # one group: all of it
        self.groups: List[Tuple[torch.Tensor, int, int]] = []
        for length, firsts in starts.items():
            index = (torch.tensor(firsts).unsqueeze(1) + torch.arange(length)).flatten()
            self.groups.append((index.to(device), len(firsts), length))

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """q, k, v: [N, heads, head_dim] -> [N, heads, head_dim], attending within groups."""
        if self.whole:            # a single image frame: no gather, no scatter (4-D: fused kernels)
            def heads_first(x):
                return x.transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), scale=scale)
            return o[0].transpose(0, 1)
        out = torch.empty_like(q)
        heads, dim = q.shape[1], q.shape[2]
        for index, count, length in self.groups:
            def take(x):
                return x[index].view(count, length, heads, dim).transpose(1, 2)
            o = F.scaled_dot_product_attention(take(q), take(k), take(v), scale=scale)
            out[index] = o.transpose(1, 2).reshape(count * length, heads, dim)
        return out


class VisionAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim, bias=True)

    def forward(self, x, cos, sin, segments: Segments):
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.num_heads, self.head_dim).unbind(1)
        # Rotary in float32, as transformers does, then back to the model dtype.
        q = apply_rotary(q.float(), cos, sin).to(x.dtype)
        k = apply_rotary(k.float(), cos, sin).to(x.dtype)
        out = segments.attention(q, k, v, self.head_dim ** -0.5)
        return self.proj(out.reshape(n, -1))


class VisionMlp(nn.Module):           # Qwen2-VL
    def __init__(self, dim: int, hidden: int, act: str):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(dim, hidden), nn.Linear(hidden, dim), activation(act)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class GatedVisionMlp(nn.Module):      # Qwen2.5-VL
    def __init__(self, dim: int, hidden: int, act: str):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(dim, hidden), nn.Linear(dim, hidden)
        self.down_proj, self.act = nn.Linear(hidden, dim), activation(act)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class VisionBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp: nn.Module, norm):
        super().__init__()
        self.norm1, self.norm2 = norm(dim), norm(dim)
        self.attn = VisionAttention(dim, num_heads)
        self.mlp = mlp

    def forward(self, x, cos, sin, segments: Segments):
        x = x + self.attn(self.norm1(x), cos, sin, segments)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    def __init__(self, dim: int, out_dim: int, merge_size: int, norm):
        super().__init__()
        self.merged_dim = dim * merge_size * merge_size
        self.ln_q = norm(dim)
        self.mlp = nn.Sequential(nn.Linear(self.merged_dim, self.merged_dim), nn.GELU(),
                                 nn.Linear(self.merged_dim, out_dim))

    def forward(self, x):
        return self.mlp(self.ln_q(x).view(-1, self.merged_dim))


def patch_positions(grid_thw: Sequence[int], merge_size: int) -> torch.Tensor:
    """[N, 2] (row, column) of every patch, in the processor's merge-block order."""
    t, h, w = grid_thw
    rows = torch.arange(h).view(h, 1).expand(h, w)
    cols = torch.arange(w).view(1, w).expand(h, w)
    block = (h // merge_size, merge_size, w // merge_size, merge_size)
    rows = rows.reshape(block).transpose(1, 2).flatten()
    cols = cols.reshape(block).transpose(1, 2).flatten()
    return torch.stack([rows, cols], dim=-1).repeat(t, 1)


def window_order(grid_thw: Sequence[int], merge_size: int, window_merged: int) -> Tuple[torch.Tensor, List[int]]:
    """Merged-token order that makes each window contiguous, and the windows' patch counts."""
    t, h, w = grid_thw
    gh, gw = h // merge_size, w // merge_size
    index = torch.arange(t * gh * gw).view(t, gh, gw)
    order, lengths = [], []
    for frame in range(t):
        for y in range(0, gh, window_merged):
            for x in range(0, gw, window_merged):
                window = index[frame, y:y + window_merged, x:x + window_merged].flatten()
                order.append(window)
                lengths.append(window.numel() * merge_size * merge_size)
    return torch.cat(order), lengths


class VisionTower(nn.Module):
    def __init__(self, vcfg, windowed: bool):
        super().__init__()
        self.windowed = windowed
        if windowed:    # Qwen2.5-VL names: hidden_size is the tower width
            dim, out_dim, mlp_hidden = vcfg.hidden_size, vcfg.out_hidden_size, vcfg.intermediate_size
            norm = lambda d: RMSNorm(d, 1e-6)                               # noqa: E731
            mlp = lambda: GatedVisionMlp(dim, mlp_hidden, vcfg.hidden_act)  # noqa: E731
            self.full_attention_blocks = set(vcfg.fullatt_block_indexes)
            self.window_merged = vcfg.window_size // vcfg.spatial_merge_size // vcfg.patch_size
        else:           # Qwen2-VL names: embed_dim is the width, hidden_size the output
            dim, out_dim = vcfg.embed_dim, vcfg.hidden_size
            mlp_hidden = int(dim * vcfg.mlp_ratio)
            norm = lambda d: nn.LayerNorm(d, eps=1e-6)                      # noqa: E731
            mlp = lambda: VisionMlp(dim, mlp_hidden, vcfg.hidden_act)       # noqa: E731
        self.dim, self.out_dim = dim, out_dim
        self.num_heads = vcfg.num_heads
        self.merge_size = vcfg.spatial_merge_size
        self.patch_dim = vcfg.in_channels * vcfg.temporal_patch_size * vcfg.patch_size ** 2
        rope = getattr(vcfg, "rope_parameters", None) or {}
        self.rope_theta = float(rope.get("rope_theta", 10000.0))
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv3d(vcfg.in_channels, dim, bias=False,
                                          kernel_size=(vcfg.temporal_patch_size, vcfg.patch_size, vcfg.patch_size))
        self.blocks = nn.ModuleList(VisionBlock(dim, self.num_heads, mlp(), norm) for _ in range(vcfg.depth))
        self.merger = PatchMerger(dim, out_dim, self.merge_size, norm)

    def _rotary(self, grid_thw, device) -> Tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [N, 1, head_dim], float32: half the frequencies rotate by row, half by column."""
        spatial = self.dim // self.num_heads // 2             # rotary dims per axis pair
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, spatial, 2, dtype=torch.float) / spatial))
        freqs = patch_positions(grid_thw, self.merge_size).float().unsqueeze(-1) * inv_freq
        emb = freqs.flatten(1)                                   # [N, row freqs + column freqs]
        emb = torch.cat([emb, emb], dim=-1).to(device)
        return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)

    def forward(self, pixels: torch.Tensor, grid_thw: Sequence[int]) -> torch.Tensor:
        """pixels [N, patch_dim] of one image -> [N / merge², out_dim]."""
        t, h, w = grid_thw
        weight = self.patch_embed.proj.weight
        x = F.linear(pixels.to(weight.dtype), weight.view(self.dim, -1))   # == the stride-kernel Conv3d
        cos, sin = self._rotary(grid_thw, x.device)
        full = Segments([h * w] * t, x.device)
        windows, order = full, None
        if self.windowed:
            order, lengths = window_order(grid_thw, self.merge_size, self.window_merged)
            unit = self.merge_size ** 2
            patch_order = (order.unsqueeze(1) * unit + torch.arange(unit)).flatten().to(x.device)
            x, cos, sin = x[patch_order], cos[patch_order], sin[patch_order]
            windows = Segments(lengths, x.device)
        for i, block in enumerate(self.blocks):
            use_full = not self.windowed or i in self.full_attention_blocks
            x = block(x, cos, sin, full if use_full else windows)
        merged = self.merger(x)
        if order is not None:
            merged = merged[torch.argsort(order).to(x.device)]
        return merged
