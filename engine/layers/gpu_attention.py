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

from .attention import AttentionMetadata
from .triton_decode import choose_splits, paged_block_table, paged_decode_attention
from .triton_merge import Part, kernel_part, merge_parts, rows_part

log = logging.getLogger("longread.attention")

MAX_VIEW_RUNS = 16      # more fragmented than this: gather the keys instead
MAX_PIECE = 65536       # longest key piece handed to cuDNN in one call
# Canonical key pieces: "compact" = multiples of 4 query slices (+ the 3 shorter multiples of
# a slice), fewer plans to build at start; "all" = every multiple of a slice, fewer pieces.
PIECES = "compact"


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


def probe_kernels(device, dtype, preferred: Optional[str] = None) -> List[Tuple[str, Callable]]:
    """Fused kernels that run here on strided (cache-view) inputs and match the math, best first."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    names = [preferred] if preferred else ["cudnn", "flash", "efficient"]
    found = []
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
                err = max((out.float() - ref_out).abs().max().item(), (lse - ref_lse).abs().max().item())
                if not err <= 2e-2:                        # NaN fails too (cuDNN on fp32 gives NaN)
                    raise RuntimeError(f"mismatch against the reference ({err})")
            found.append((name, KERNELS[name]))
        except Exception as exc:          # not built / not supported on this GPU or dtype
            log.info("attention kernel %s unavailable: %s", name, exc)
    if not found:
        raise RuntimeError("no fused attention kernel with log-sum-exp works on this device")
    return found


def block_runs(block_table: List[int], begin: int, end: int, block_size: int) -> List[Tuple[int, int, int]]:
    """Maximal runs of consecutive physical blocks covering positions [begin, end):
    a list of (first slot, first position, length)."""
    runs: List[Tuple[int, int, int]] = []
    pos = begin
    while pos < end:
        block_index = pos // block_size
        slot = block_table[block_index] * block_size + pos % block_size
        length = min(end, (block_index + 1) * block_size) - pos
        if runs and runs[-1][0] + runs[-1][2] == slot:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + length)
        else:
            runs.append((slot, pos, length))
        pos += length
    return runs


def runs_between(runs: List[Tuple[int, int, int]], begin: int, end: int) -> List[Tuple[int, int]]:
    """Clip runs (from block_runs) to positions [begin, end): a list of (first slot, length)."""
    out = []
    for slot, pos, length in runs:
        lo, hi = max(begin, pos), min(end, pos + length)
        if lo < hi:
            out.append((slot + lo - pos, hi - lo))
    return out


class CudaAttention:
    """Kernel choice: cuDNN is the fastest (~600 TF/s) but builds a plan for every new shape
    (50-800 ms each), so it only ever sees canonical shapes — a full query slice against key
    pieces of query_slice * 2^k tokens — whose plans are built once at start-up. Any other
    shape (a short last slice, a remainder of keys) goes to a plan-free kernel (flash)."""

    name = "cuda"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, device,
                 dtype, query_slice: int = 2048, kernel: Optional[str] = None, max_keys: int = 0):
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale
        self.group = num_heads // num_kv_heads
        self.query_slice = query_slice
        if torch.device(device).type == "cuda":
            kernels = probe_kernels(device, dtype, kernel)
            self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        else:
            kernels, self.num_sms = [("math", _math)], 8
        self.kernel_name, self.canonical_kernel = kernels[0]
        plan_free = [k for k in kernels if k[0] != "cudnn"] or kernels
        self.any_shape_kernel_name, self.any_shape_kernel = plan_free[0]
        # Canonical key-piece lengths; only these (and the full causal slice) reach cuDNN:
        # multiples of one unit (4 slices) up to max_keys, and the multiples of a slice below
        # one unit. Any key run splits into at most two canonical pieces and a remainder.
        self.unit = query_slice if PIECES == "all" else 4 * query_slice
        small = list(range(query_slice, self.unit, query_slice))
        # Pieces stop at MAX_PIECE keys: past ~128K keys cuDNN was measured to fall off its
        # fast path on an H200 (241K-token prefill 3.5x slower, +0.5 GiB workspace).
        big = list(range(self.unit, min(max(max_keys, self.unit), MAX_PIECE) + 1, self.unit))
        self.pieces = small + big
        self.device, self.dtype = device, dtype
        # fp32 running result of a slice with several prefix pieces: allocated once, here,
        # so prefill steps allocate nothing new for it.
        self._acc = (torch.empty(query_slice, num_heads, head_dim, device=device, dtype=torch.float32),
                     torch.empty(query_slice, num_heads, device=device, dtype=torch.float32))
        log.info("prefill attention: %s for canonical shapes, %s otherwise",
                 self.kernel_name, self.any_shape_kernel_name)

    def warm_up(self) -> None:
        """Run every canonical shape once so no request pays for cuDNN's plan building.
        Must run on the engine-loop thread: torch keeps cuDNN's plan cache per thread."""
        if self.kernel_name != "cudnn":
            return
        device, dtype = self.device, self.dtype
        rows = self.query_slice * self.group
        q = torch.zeros(1, self.num_kv_heads, rows, self.head_dim, device=device, dtype=dtype)
        kv = torch.zeros(max(self.pieces), 2, self.num_kv_heads, self.head_dim, device=device, dtype=dtype)
        for n in self.pieces:
            self.canonical_kernel(q, kv[:n, 0].permute(1, 0, 2).unsqueeze(0),
                                  kv[:n, 1].permute(1, 0, 2).unsqueeze(0), False, self.scale)
        own = torch.zeros(1, self.num_heads, self.query_slice, self.head_dim, device=device, dtype=dtype)
        self.canonical_kernel(own, own, own, True, self.scale)
        torch.cuda.synchronize(device)

    def split_pieces(self, runs: List[Tuple[int, int]]) -> List[Tuple[int, int, bool]]:
        """Cut key runs into (slot, length, canonical) pieces: a multiple of the unit, a
        multiple of the slice, then a remainder."""
        out = []
        for slot, length in runs:
            while length >= self.unit:
                take = min(length // self.unit * self.unit, self.pieces[-1])
                out.append((slot, take, True))
                slot, length = slot + take, length - take
            take = length // self.query_slice * self.query_slice
            if take:
                out.append((slot, take, True))
                slot, length = slot + take, length - take
            if length:
                out.append((slot, length, False))
        return out

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
                # Runs of consecutive blocks, once per step (not per layer or slice).
                prefills.append((i, block_runs(meta.block_tables[i], 0, start + n, meta.block_size)))
        meta.extra["prefills"] = prefills
        meta.extra["decode"] = None
        if decode_rows:
            table = paged_block_table(tables)
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
            if isinstance(rows, slice):      # the decode rows are adjacent: write in place
                paged_decode_attention(q[rows], k_cache, v_cache, table, lens, self.scale,
                                       meta.block_size, splits, out=out[rows])
            else:
                out[rows] = paged_decode_attention(q[rows], k_cache, v_cache, table, lens, self.scale,
                                                   meta.block_size, splits)
        for i, runs in meta.extra["prefills"]:
            s, n, start = meta.query_starts[i], meta.query_lens[i], meta.context_starts[i]
            for c0 in range(0, n, self.query_slice):
                c1 = min(n, c0 + self.query_slice)
                self._prefill_slice(q[s + c0:s + c1], k_cache, v_cache, runs, start + c0, start + c1,
                                    out[s + c0:s + c1])
        return out

    def _accumulator(self, rows: int) -> Part:
        return rows_part(self._acc[0][:rows], self._acc[1][:rows])

    def _prefill_slice(self, q, k_cache, v_cache, runs, begin, end, out):
        """Queries at positions [begin, end) attend to keys [0, end) (causal); writes `out`."""
        length = end - begin
        full = length == self.query_slice
        own = runs_between(runs, begin, end)
        if len(own) == 1:
            slot, _ = own[0]
            k_own, v_own = k_cache[slot:slot + length], v_cache[slot:slot + length]
        else:
            k_own, v_own = self._gather(k_cache, v_cache, own)
        q_heads = q.transpose(0, 1).unsqueeze(0)                          # [1, H, L, D]
        expand = lambda x: x.transpose(0, 1).repeat_interleave(self.group, 0).unsqueeze(0)
        kernel = self.canonical_kernel if full else self.any_shape_kernel
        o, lse = kernel(q_heads, expand(k_own), expand(v_own), True, self.scale)
        pieces = self._prefix_pieces(k_cache, v_cache, runs_between(runs, 0, begin)) if begin else []
        if not pieces:
            out.copy_(o[0].transpose(0, 1))
            return
        acc = kernel_part(o, lse, 1)
        folded = q.view(length, self.num_kv_heads, self.group, self.head_dim).permute(1, 0, 2, 3) \
                  .reshape(1, self.num_kv_heads, length * self.group, self.head_dim)
        for index, (keys, values, canonical) in enumerate(pieces):
            kernel = self.canonical_kernel if (canonical and full) else self.any_shape_kernel
            part_o, part_lse = kernel(folded, keys, values, False, self.scale)
            last = index == len(pieces) - 1
            target = rows_part(out, acc.lse) if last else self._accumulator(length)
            merge_parts(acc, kernel_part(part_o, part_lse, self.group), target, length, self.num_heads,
                        self.head_dim, write_lse=not last)
            acc = target

    @staticmethod
    def _gather(k_cache, v_cache, runs):
        slots = torch.cat([torch.arange(s, s + n) for s, n in runs]).to(k_cache.device)
        return k_cache.index_select(0, slots), v_cache.index_select(0, slots)

    def _prefix_pieces(self, k_cache, v_cache, runs):
        """The unmasked keys before a slice as (keys, values, canonical) pieces, each a
        [1, KV heads, n, D] view of the cache (a gathered copy if the cache is too fragmented)."""
        if len(runs) > MAX_VIEW_RUNS:
            k_cache, v_cache = self._gather(k_cache, v_cache, runs)
            runs = [(0, k_cache.shape[0])]
        view = lambda cache, slot, n: cache[slot:slot + n].permute(1, 0, 2).unsqueeze(0)
        return [(view(k_cache, slot, n), view(v_cache, slot, n), canonical)
                for slot, n, canonical in self.split_pieces(runs)]
