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


def context_slots(block_table: List[int], length: int, block_size: int, device):
    """Where positions [0, length) of one sequence live in the cache: a `slice` when its
    blocks happen to be consecutive (a zero-copy view), else a tensor of slots to gather."""
    num_blocks = -(-length // block_size)
    first = block_table[0]
    if block_table[num_blocks - 1] - first == num_blocks - 1 and \
            block_table[:num_blocks] == list(range(first, first + num_blocks)):
        return slice(first * block_size, first * block_size + length)
    positions = torch.arange(length, device=device)
    blocks = torch.tensor(block_table, dtype=torch.long, device=device)
    return blocks[positions // block_size] * block_size + positions % block_size


def read_context(cache: torch.Tensor, where) -> torch.Tensor:
    return cache[where] if isinstance(where, slice) else cache.index_select(0, where)


def merge_attention_states(out_a: torch.Tensor, lse_a: torch.Tensor,
                           out_b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    """Combine softmax attention over two disjoint key sets from their log-sum-exps.

    out_*: [..., L, D], lse_*: [..., L]. Exact: softmax over A∪B = weighted mix of the two.
    (Also the merge step of context-parallel attention.)
    """
    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * (lse_a - lse).exp().unsqueeze(-1) + out_b * (lse_b - lse).exp().unsqueeze(-1)


# torch's fused CPU flash kernel, which also returns the log-sum-exp we need to merge.
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


class TorchAttention:
    """Reference backend: per-sequence SDPA over keys gathered from the paged cache.

    A prefill chunk after cached context attends to (a) the cached prefix, unmasked, and
    (b) its own keys, causally; the two are merged by log-sum-exp. That avoids a dense
    [chunk, context] mask, which the fused kernels handle ~1.5x slower than causal.
    """

    name = "torch"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float):
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale

    def prepare(self, meta: AttentionMetadata, device) -> None:
        """Per-step gather indices and masks, computed once and shared by all layers."""
        indices: List[Optional[torch.Tensor]] = []
        masks: List[Optional[torch.Tensor]] = []
        split = _CPU_FLASH is not None and torch.device(device).type == "cpu"
        for i in range(meta.num_seqs):
            start, n = meta.context_starts[i], meta.query_lens[i]
            if start == 0:
                indices.append(None)      # fresh prompt: attend to this step's own keys
                masks.append(None)
            elif n == 1:                  # a decode query sees every cached key
                indices.append(context_slots(meta.block_tables[i], start + 1, meta.block_size, device))
                masks.append(None)
            elif split:                   # cached prefix only; the chunk's keys come fresh
                indices.append(context_slots(meta.block_tables[i], start, meta.block_size, device))
                masks.append(None)
            else:
                total = start + n
                indices.append(context_slots(meta.block_tables[i], total, meta.block_size, device))
                rows = torch.arange(n, device=device).unsqueeze(1) + start
                masks.append(torch.arange(total, device=device).unsqueeze(0) <= rows)
        meta.extra["indices"], meta.extra["masks"], meta.extra["split"] = indices, masks, split

    def _heads_first(self, x: torch.Tensor, repeat: bool = False) -> torch.Tensor:
        x = x.transpose(0, 1).unsqueeze(0)          # [1, heads, len, dim]
        if repeat and self.num_heads != self.num_kv_heads:
            x = x.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        return x

    def _decode(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """One query token against [ctx, KVH, D] keys/values, grouped by KV head (no copies)."""
        group = self.num_heads // self.num_kv_heads
        qg = q.reshape(self.num_kv_heads, group, self.head_dim).float()
        scores = torch.einsum("hgd,chd->hgc", qg, keys.float()) * self.scale
        out = torch.einsum("hgc,chd->hgd", scores.softmax(-1), values.float())
        return out.reshape(1, self.num_heads, 1, self.head_dim).to(q.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                kv_cache: Tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """q: [T, H, D]; k, v: [T, KVH, D] (already rotated). Returns [T, H, D] (in `out` if given)."""
        k_cache, v_cache = kv_cache
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty_like(q) if out is None else out.view_as(q)
        indices, masks, split = meta.extra["indices"], meta.extra["masks"], meta.extra["split"]
        for i in range(meta.num_seqs):
            s, n = meta.query_starts[i], meta.query_lens[i]
            # 4-D [1, heads, len, dim] views: torch's fused CPU kernels need the batch dim
            # (3-D inputs fall back to the slow math path, ~10x slower).
            qi = self._heads_first(q[s:s + n])
            if indices[i] is not None and n == 1:
                oi = self._decode(qi, read_context(k_cache, indices[i]), read_context(v_cache, indices[i]))
            elif indices[i] is not None and split:
                kp, vp = read_context(k_cache, indices[i]), read_context(v_cache, indices[i])
                o_prefix, lse_prefix = _CPU_FLASH(qi, self._heads_first(kp, True), self._heads_first(vp, True),
                                                  0.0, False, scale=self.scale)
                o_chunk, lse_chunk = _CPU_FLASH(qi, self._heads_first(k[s:s + n], True),
                                                self._heads_first(v[s:s + n], True), 0.0, True, scale=self.scale)
                oi = merge_attention_states(o_prefix, lse_prefix, o_chunk, lse_chunk)
            else:
                if indices[i] is None:
                    ki, vi = k[s:s + n], v[s:s + n]
                    causal = n > 1
                else:
                    ki, vi = read_context(k_cache, indices[i]), read_context(v_cache, indices[i])
                    causal = False
                oi = F.scaled_dot_product_attention(qi, self._heads_first(ki), self._heads_first(vi),
                                                    attn_mask=masks[i], is_causal=causal, scale=self.scale,
                                                    enable_gqa=True)
            out[s:s + n] = oi[0].transpose(0, 1)
        return out
