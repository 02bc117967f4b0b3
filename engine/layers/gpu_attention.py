"""GPU attention backend over the paged KV cache.

Prefill chunks: queries are processed in sub-chunks of `query_slice` tokens. Each
sub-chunk attends to (a) everything before it — the cached prefix and earlier sub-chunks,
already written to the cache — without a mask, and (b) its own keys causally; the parts are
merged by log-sum-exp. (a) is read from the cache as zero-copy views of runs of
consecutive blocks, and GQA is handled by folding the G query heads of each KV head into
the query length (legal because (a) has no mask), so keys are never expanded. (b) is small
and uses expanded heads. The fused kernel is torch's cuDNN (or flash) SDPA, probed at start.
Decodes: one Triton launch for every decoding sequence (triton_decode.py).
"""
from __future__ import annotations

import logging
from typing import Callable, List, Optional, Tuple

import torch

from .attention import AttentionMetadata, merge_attention_states
from .triton_decode import choose_splits, paged_decode_attention

log = logging.getLogger("longread.attention")

MAX_VIEW_RUNS = 16      # more fragmented than this: gather the keys instead


def _cudnn(q, k, v, causal, scale):
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    return out[0], out[1]


def _flash(q, k, v, causal, scale):
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    return out[0], out[1]


def _efficient(q, k, v, causal, scale):
    out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal, scale=scale)
    return out[0], out[1]


def _reference(q, k, v, causal, scale):
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v.float()), torch.logsumexp(s, -1)


def _math(q, k, v, causal, scale):
    out, lse = _reference(q, k, v, causal, scale)
    return out.to(q.dtype), lse


# "math" is exact and runs anywhere: it lets CPU tests drive this backend's logic.
KERNELS = {"cudnn": _cudnn, "flash": _flash, "efficient": _efficient, "math": _math}


def probe_kernel(device, dtype, preferred: Optional[str] = None) -> Tuple[str, Callable]:
    """First fused kernel that runs here on strided (cache-view) inputs and matches the math."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    names = [preferred] if preferred else ["cudnn", "flash", "efficient"]
    for name in names:
        try:
            q = torch.randn(1, 2, 96, 128, generator=gen).to(device, dtype)
            kv = torch.randn(200, 2, 2, 128, generator=gen).to(device, dtype)  # [slots, k/v, heads, dim]
            k, v = kv[:130, 0].permute(1, 0, 2).unsqueeze(0), kv[:130, 1].permute(1, 0, 2).unsqueeze(0)
            for causal in (False, True):
                kk, vv = (k[:, :, :96], v[:, :, :96]) if causal else (k, v)
                out, lse = KERNELS[name](q, kk, vv, causal, 0.088)
                ref_out, ref_lse = _reference(q, kk, vv, causal, 0.088)
                lse = lse.reshape(ref_lse.shape[0], ref_lse.shape[1], -1)[..., :96].float()
                if (out.float() - ref_out).abs().max() > 2e-2 or (lse - ref_lse).abs().max() > 2e-2:
                    raise RuntimeError("mismatch against the reference")
            return name, KERNELS[name]
        except Exception as exc:          # not built / not supported on this GPU
            log.info("attention kernel %s unavailable: %s", name, exc)
    raise RuntimeError("no fused attention kernel with log-sum-exp works on this device")


def block_runs(block_table: List[int], begin: int, end: int, block_size: int) -> List[Tuple[int, int]]:
    """Maximal runs of consecutive physical blocks covering positions [begin, end):
    a list of (first slot, length)."""
    runs: List[Tuple[int, int]] = []
    pos = begin
    while pos < end:
        block_index = pos // block_size
        slot = block_table[block_index] * block_size + pos % block_size
        length = min(end, (block_index + 1) * block_size) - pos
        if runs and runs[-1][0] + runs[-1][1] == slot:
            runs[-1] = (runs[-1][0], runs[-1][1] + length)
        else:
            runs.append((slot, length))
        pos += length
    return runs


class CudaAttention:
    name = "cuda"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, device,
                 dtype, query_slice: int = 2048, kernel: Optional[str] = None):
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale
        self.group = num_heads // num_kv_heads
        self.query_slice = query_slice
        if torch.device(device).type == "cuda":
            self.kernel_name, self.kernel = probe_kernel(device, dtype, kernel)
            self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        else:
            self.kernel_name, self.kernel, self.num_sms = "math", _math, 8
        log.info("prefill attention kernel: %s", self.kernel_name)

    # --- per step --------------------------------------------------------------------------
    def prepare(self, meta: AttentionMetadata, device) -> None:
        decode_rows, tables, lens, prefills = [], [], [], []
        for i in range(meta.num_seqs):
            start, n = meta.context_starts[i], meta.query_lens[i]
            if n == 1 and start > 0:
                decode_rows.append(meta.query_starts[i])
                tables.append(meta.block_tables[i])
                lens.append(start + 1)
            else:
                prefills.append(i)
        meta.extra["prefills"] = prefills
        meta.extra["decode"] = None
        if decode_rows:
            width = max(len(t) for t in tables)
            table = torch.zeros(len(tables), width, dtype=torch.int32)
            for row, t in enumerate(tables):
                table[row, :len(t)] = torch.tensor(t, dtype=torch.int32)
            contiguous = decode_rows == list(range(decode_rows[0], decode_rows[0] + len(decode_rows)))
            rows = slice(decode_rows[0], decode_rows[0] + len(decode_rows)) if contiguous else \
                torch.tensor(decode_rows, device=device)
            meta.extra["decode"] = (rows, table.to(device, non_blocking=True),
                                    torch.tensor(lens, dtype=torch.int32).to(device, non_blocking=True),
                                    choose_splits(len(decode_rows), self.num_kv_heads, self.num_sms))

    # --- per layer -------------------------------------------------------------------------
    def forward(self, q, k, v, kv_cache, meta: AttentionMetadata, out: Optional[torch.Tensor] = None):
        k_cache, v_cache = kv_cache
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty_like(q) if out is None else out.view_as(q)
        decode = meta.extra["decode"]
        if decode is not None:
            rows, table, lens, splits = decode
            out[rows] = paged_decode_attention(q[rows], k_cache, v_cache, table, lens, self.scale,
                                               meta.block_size, splits)
        for i in meta.extra["prefills"]:
            s, n, start = meta.query_starts[i], meta.query_lens[i], meta.context_starts[i]
            for c0 in range(0, n, self.query_slice):
                c1 = min(n, c0 + self.query_slice)
                out[s + c0:s + c1] = self._prefill_slice(q[s + c0:s + c1], k_cache, v_cache,
                                                         meta.block_tables[i], start + c0, start + c1,
                                                         meta.block_size)
        return out

    def _prefill_slice(self, q, k_cache, v_cache, table, begin, end, block_size):
        """Queries at positions [begin, end) attend to keys [0, end) (causal)."""
        own = block_runs(table, begin, end, block_size)
        if len(own) == 1:
            slot, _ = own[0]
            k_own, v_own = k_cache[slot:slot + end - begin], v_cache[slot:slot + end - begin]
        else:
            slots = torch.cat([torch.arange(s, s + n) for s, n in own]).to(k_cache.device)
            k_own, v_own = k_cache.index_select(0, slots), v_cache.index_select(0, slots)
        q_heads = q.transpose(0, 1).unsqueeze(0)                          # [1, H, L, D]
        expand = lambda x: x.transpose(0, 1).repeat_interleave(self.group, 0).unsqueeze(0)
        o, lse = self.kernel(q_heads, expand(k_own), expand(v_own), True, self.scale)
        o, lse = o[0].transpose(0, 1), lse.reshape(self.num_heads, -1)[:, :end - begin].t()   # [L,H,D], [L,H]
        if begin == 0:
            return o
        for part_o, part_lse in self._prefix(q, k_cache, v_cache, table, begin, block_size):
            o = merge_attention_states(o.float(), lse, part_o.float(), part_lse).to(q.dtype)
            lse = torch.logaddexp(lse, part_lse)
        return o

    def _prefix(self, q, k_cache, v_cache, table, begin, block_size):
        """Attention of q to keys [0, begin), unmasked, GQA folded: yields (out, lse) per key run."""
        L = q.shape[0]
        folded = q.view(L, self.num_kv_heads, self.group, self.head_dim).permute(1, 0, 2, 3) \
                  .reshape(1, self.num_kv_heads, L * self.group, self.head_dim)
        runs = block_runs(table, 0, begin, block_size)
        if len(runs) > MAX_VIEW_RUNS:
            slots = torch.cat([torch.arange(s, s + n) for s, n in runs]).to(k_cache.device)
            keyed = [(k_cache.index_select(0, slots), v_cache.index_select(0, slots))]
        else:
            keyed = [(k_cache[s:s + n], v_cache[s:s + n]) for s, n in runs]
        for keys, values in keyed:
            o, lse = self.kernel(folded, keys.permute(1, 0, 2).unsqueeze(0),
                                 values.permute(1, 0, 2).unsqueeze(0), False, self.scale)
            o = o.reshape(self.num_kv_heads, L, self.group, self.head_dim).permute(1, 0, 2, 3) \
                 .reshape(L, self.num_heads, self.head_dim)
            lse = lse.reshape(self.num_kv_heads, -1)[:, :L * self.group] \
                     .reshape(self.num_kv_heads, L, self.group).permute(1, 0, 2).reshape(L, self.num_heads)
            yield o, lse.float()
