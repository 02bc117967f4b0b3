"""Attention backends over the paged KV cache.

The runner describes each step once (AttentionMetadata); a backend may add its own
per-step tensors in `prepare` (built once per step, shared by every layer) and then
computes attention per layer in `forward`. The torch backend here is the exact reference
that runs anywhere; a GPU backend implements the same two methods.

KV layout per layer: k_cache, v_cache of shape [num_slots, num_kv_heads, head_dim],
slot = block_id * block_size + offset_in_block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    query_starts: List[int]          # offset of each sequence's queries in the flat batch
    query_lens: List[int]            # new tokens per sequence this step
    context_starts: List[int]        # tokens already in the cache before this step
    slot_mapping: torch.Tensor       # [T] cache slot of every new token
    block_tables: List[List[int]]    # per sequence, its blocks in order
    block_size: int
    extra: Dict[str, Any] = field(default_factory=dict)   # backend-specific per-step state

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    def context_len(self, i: int) -> int:
        return self.context_starts[i] + self.query_lens[i]


def context_slots(block_table: List[int], length: int, block_size: int, device) -> torch.Tensor:
    """Cache slots of positions [0, length) for one sequence."""
    positions = torch.arange(length, device=device)
    blocks = torch.tensor(block_table, dtype=torch.long, device=device)
    return blocks[positions // block_size] * block_size + positions % block_size


class TorchAttention:
    """Reference backend: per-sequence SDPA over keys gathered from the paged cache."""

    name = "torch"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float):
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale

    def prepare(self, meta: AttentionMetadata, device) -> None:
        """Per-step gather indices and masks, computed once and shared by all layers."""
        indices: List[Optional[torch.Tensor]] = []
        masks: List[Optional[torch.Tensor]] = []
        for i in range(meta.num_seqs):
            start, n = meta.context_starts[i], meta.query_lens[i]
            if start == 0:
                indices.append(None)      # fresh prompt: attend to this step's own keys
                masks.append(None)
                continue
            total = start + n
            indices.append(context_slots(meta.block_tables[i], total, meta.block_size, device))
            if n == 1:
                masks.append(None)        # a decode query sees every cached key
            else:
                rows = torch.arange(n, device=device).unsqueeze(1) + start
                masks.append(torch.arange(total, device=device).unsqueeze(0) <= rows)
        meta.extra["indices"], meta.extra["masks"] = indices, masks

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                kv_cache: Tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata) -> torch.Tensor:
        """q: [T, H, D]; k, v: [T, KVH, D] (already rotated). Returns [T, H, D]."""
        k_cache, v_cache = kv_cache
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty_like(q)
        indices, masks = meta.extra["indices"], meta.extra["masks"]
        for i in range(meta.num_seqs):
            s, n = meta.query_starts[i], meta.query_lens[i]
            qi = q[s:s + n].transpose(0, 1)
            if indices[i] is None:
                ki, vi = k[s:s + n].transpose(0, 1), v[s:s + n].transpose(0, 1)
                causal, mask = n > 1, None
            else:
                ki = k_cache.index_select(0, indices[i]).transpose(0, 1)
                vi = v_cache.index_select(0, indices[i]).transpose(0, 1)
                causal, mask = False, masks[i]
            oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, is_causal=causal,
                                                scale=self.scale, enable_gqa=True)
            out[s:s + n] = oi.transpose(0, 1)
        return out
