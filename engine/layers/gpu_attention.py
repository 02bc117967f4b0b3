"""GPU attention backend over the paged KV cache.

Prefill chunks: queries are processed in slices of `query_slice` tokens. Each slice attends
to (a) its own keys, causally, and (b) everything before it — the cached prefix and earlier
slices, already written to the cache — without a mask; the parts are merged by
log-sum-exp (triton_merge.py). The prefix is cut into canonical pieces by position; a
piece inside one run of consecutive cache blocks is a zero-copy view, one that spans runs
is gathered into a preallocated buffer. Queries are a view of the workspace, and GQA is the
kernel's (no head is expanded or folded when the kernel takes GQA natively). Fused
kernels: attention_kernels.py.
Decodes: one Triton launch for every decoding sequence (triton_decode.py).
"""
from __future__ import annotations

import logging
from typing import List, Optional, Tuple

import numpy as np
import torch

from ..step_shape import canonical_query_lengths
from .attention import AttentionMetadata
from .attention_kernels import Kernel, _math, probe_kernels
from .triton_decode import choose_splits, paged_block_table, paged_decode_attention
from .triton_merge import Part, merge_parts

log = logging.getLogger("longread.attention")

# Longest key piece handed to cuDNN in one call. Its workspace grows with the keys (+0.3 GiB
# measured at 64K on an H200) and past ~128K it falls off its fast path; 32K pieces run at
# the same TF/s as 64K ones (bench/attn_kernels.py) and the merges are cheap. Four slices of
# the default step: 4 x 8192 or 4 x 8448 (engine/step_shape.py).
MAX_PIECE = 33792
MIN_QUERY = 1024        # the shortest canonical query slice
MAX_KEY_SPLITS = 4      # batched parts a key piece is cut into for short query slices


def block_runs(block_table: List[int], begin: int, end: int, block_size: int) -> List[Tuple[int, int, int]]:
    """Maximal runs of consecutive physical blocks covering positions [begin, end):
    a list of (first slot, first position, length). Vectorized: a 128K prompt has 8K blocks
    and this runs every step of its prefill."""
    if begin >= end:
        return []
    first = begin // block_size
    blocks = np.asarray(block_table[first:(end - 1) // block_size + 1], dtype=np.int64)
    starts = np.flatnonzero(np.diff(blocks, prepend=blocks[0] - 2) != 1)      # a run begins here
    stops = np.append(starts[1:], len(blocks))
    runs = []
    for a, z, block in zip(starts.tolist(), stops.tolist(), blocks[starts].tolist()):
        lo = max(begin, (first + a) * block_size)
        hi = min(end, (first + z) * block_size)
        runs.append((block * block_size + lo - (first + a) * block_size, lo, hi - lo))
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
    """Kernel choice: cuDNN is the fastest (~600-680 TF/s measured) but builds a plan for
    every new shape and stride pattern (~40 ms each), so it only ever sees canonical shapes
    — a canonical query slice against its own keys, or against a key piece of a multiple of
    the slice (up to MAX_PIECE) — whose plans are built once at start-up on the real tensors.
    Any other shape (a short last slice, a remainder of keys) goes to a plan-free kernel."""

    name = "cuda"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, device,
                 dtype, query_slice: int = 8192, kernel: Optional[str] = None, max_keys: int = 0):
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale
        self.query_slice = query_slice
        if torch.device(device).type == "cuda":
            kernels = probe_kernels(device, dtype, kernel)
            self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        else:
            kernels, self.num_sms = [Kernel("math", _math)], 8
        self.kernel_name, self.canonical_kernel = kernels[0]
        plan_free = [k for k in kernels if not k.name.startswith("cudnn")] or kernels
        self.any_shape_kernel_name, self.any_shape_kernel = plan_free[0]
        # Canonical query lengths: the slice, then powers of two down to MIN_QUERY (a chunk of
        # the slice or of a multiple of the shortest is cut into these: step_shape.py);
        # canonical key pieces: multiples of the slice.
        self.query_lengths = canonical_query_lengths(query_slice, MIN_QUERY)
        self.chunk_granule = self.query_lengths[-1]
        self.pieces = list(range(query_slice, min(max(max_keys, query_slice), MAX_PIECE) + 1, query_slice))
        # A remainder of keys (a chunk that starts off a slice boundary: time-budgeted chunks,
        # prefix-cache hits) is cut into the shorter canonical lengths before the plan-free
        # kernel gets what is left (flash runs at about half cuDNN's speed).
        self.short_pieces = self.query_lengths[1:]
        # A short query slice fills few thread blocks (1024 queries x 28 heads: 224 blocks,
        # 1.7 waves on 132 SMs); its key pieces run as B batched parts instead, B times the
        # blocks (bench/chunk_shapes.py: 1024 queries x 32K keys 575 -> 644 TF/s at B=4,
        # 2048 queries 595 -> 665 at B=2). Used for time-budgeted chunks beside decodes.
        self.key_splits = {n: min(MAX_KEY_SPLITS, query_slice // (2 * n)) for n in self.query_lengths
                           if query_slice // (2 * n) >= 2}
        self.device, self.dtype = device, dtype
        # Keys and values of a piece that spans runs of blocks are gathered here (one piece
        # at a time: the stream runs each piece's kernel before the next gather).
        longest_read = max(self.pieces[-1], query_slice)
        self._gather = torch.empty(2, longest_read, num_kv_heads, head_dim, device=device, dtype=dtype)
        self._gather_slots: dict = {}      # per step: a piece's runs -> its slots on the device
        # Those slots live in one preallocated buffer (room for every key of a max_keys
        # prompt), built with `out=` kernels: a 241K read after others had filled the pool
        # spanned runs in enough pieces for their slot tensors to need a new allocator segment.
        self._slots = torch.empty(max(max_keys, longest_read), dtype=torch.long, device=device)
        self._slots_used = 0
        self._key_positions = torch.arange(longest_read, device=device)
        self._run_of_key = torch.empty(longest_read, dtype=torch.long, device=device)
        # fp32 running result of a slice with several prefix pieces: allocated once, here,
        # so prefill steps allocate nothing new for it.
        self._acc = Part(torch.empty(query_slice, num_heads, head_dim, device=device, dtype=torch.float32),
                         torch.empty(query_slice, num_heads, device=device, dtype=torch.float32))
        self.scratch_bytes = sum(t.numel() * t.element_size() for t in (
            *self._acc, self._gather, self._slots, self._key_positions, self._run_of_key))
        log.info("prefill attention: %s for canonical shapes, %s otherwise",
                 self.kernel_name, self.any_shape_kernel_name)

    def warm_up(self, kv_cache: Tuple[torch.Tensor, torch.Tensor], qkv_rows: torch.Tensor) -> None:
        """Run every canonical shape once, on a layer's cache and the workspace's query rows
        (their exact strides: cuDNN's plans depend on them), so no request builds a plan.
        Must run on the engine-loop thread: torch keeps cuDNN's plan cache per thread."""
        if torch.device(self.device).type != "cuda":
            return
        self._warm_merges(kv_cache, qkv_rows)
        torch.cuda.synchronize(self.device)
        if not self.kernel_name.startswith("cudnn") or kv_cache[0].shape[0] < self.pieces[-1]:
            return
        k_cache, v_cache = kv_cache
        for n in self.query_lengths:
            q = self._heads(qkv_rows[:n, :self.num_heads * self.head_dim].view(n, self.num_heads, self.head_dim))
            self.canonical_kernel(q, self._view(k_cache, 0, n), self._view(v_cache, 0, n), True, self.scale)
            for keys in self.pieces + self.short_pieces:
                self.canonical_kernel(q, self._view(k_cache, 0, keys), self._view(v_cache, 0, keys), False,
                                      self.scale)
                splits = self._splits(n, keys)
                if splits > 1:
                    self.canonical_kernel(q.expand(splits, -1, -1, -1), self._split(k_cache[:keys], splits),
                                          self._split(v_cache[:keys], splits), False, self.scale)
        torch.cuda.synchronize(self.device)

    def _warm_merges(self, kv_cache, qkv_rows: torch.Tensor) -> None:
        """Compile the Triton merge for the layouts requests meet: Triton specializes on row
        counts and strides (1, multiples of 16, others), and a first compile costs 0.25-1 s,
        which a reader would see as one long pause (found on the H200: a 241K read's last
        step, 360 rows after 10 key pieces, compiled the middle merge). Slices of 1, 17, 48
        and a canonical length against canonical key pieces plus a remainder; writes only a
        scratch output. Last, the shortest canonical slice against keys in two runs of
        blocks, so the first request whose pieces are gathered and run as batched parts
        meets nothing new either."""
        k_cache, v_cache = kv_cache
        # Keys before the slices: a canonical piece, the shortest canonical length (where there
        # is one) and one more, so each slice merges first, middle (fp32 accumulator in and
        # out) and last; each of these is its own compile for every row-count class.
        begin = self.query_slice + (self.short_pieces[-1] if self.short_pieces else 0) + 1
        whole = [(0, 0, begin + 48)]                       # (first slot, position, length): one run
        two_runs = [(0, 0, 16), (48, 16, begin + 32)]      # a break after the first 16 keys: slots +32
        for length, runs in ((1, whole), (17, whole), (48, whole), (self.query_lengths[-1], whole),
                             (self.query_lengths[-1], two_runs)):
            slots_needed = begin + length + (32 if runs is two_runs else 0)
            if slots_needed > k_cache.shape[0] or length > qkv_rows.shape[0]:
                continue
            q = qkv_rows[:length, :self.num_heads * self.head_dim].view(length, self.num_heads, self.head_dim)
            self._prefill_slice(q, k_cache, v_cache, runs, begin, begin + length, torch.empty_like(q))

    def split_pieces(self, runs: List[Tuple[int, int]]) -> List[Tuple[int, int, bool]]:
        """Cut key runs into (slot, length, canonical) pieces: multiples of the slice (at
        most MAX_PIECE), then the shorter canonical lengths, longest first (once each when
        the slice is a power of two), then a remainder."""
        out = []
        for slot, length in runs:
            while length >= self.query_slice:
                take = min(length // self.query_slice * self.query_slice, self.pieces[-1])
                out.append((slot, take, True))
                slot, length = slot + take, length - take
            for take in self.short_pieces:
                while length >= take:
                    out.append((slot, take, True))
                    slot, length = slot + take, length - take
            if length:
                out.append((slot, length, False))
        return out

    @staticmethod
    def _heads(x: torch.Tensor) -> torch.Tensor:
        """[L, heads, D] rows -> the kernels' [1, heads, L, D] (a view)."""
        return x.transpose(0, 1).unsqueeze(0)

    @staticmethod
    def _view(cache: torch.Tensor, slot: int, n: int) -> torch.Tensor:
        return cache[slot:slot + n].transpose(0, 1).unsqueeze(0)

    @staticmethod
    def _split(rows: torch.Tensor, parts: int) -> torch.Tensor:
        """[n, KV heads, D] rows -> [parts, KV heads, n / parts, D]: consecutive key parts as
        a batch (a view)."""
        n, kv_heads, head_dim = rows.shape
        return rows.view(parts, n // parts, kv_heads, head_dim).permute(0, 2, 1, 3)

    def _splits(self, query_len: int, keys: int) -> int:
        """Batched parts for a canonical query slice against a canonical piece of `keys`."""
        splits = self.key_splits.get(query_len, 1)
        return splits if keys >= self.query_slice and keys % splits == 0 else 1

    # --- per step --------------------------------------------------------------------------
    def prepare(self, meta: AttentionMetadata, device) -> None:
        self._gather_slots, self._slots_used = {}, 0
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
            c0 = 0
            while c0 < n:         # the longest canonical slice that fits, else the rest
                c1 = c0 + next((m for m in self.query_lengths if m <= n - c0), n - c0)
                self._prefill_slice(q[s + c0:s + c1], k_cache, v_cache, runs, start + c0, start + c1,
                                    out[s + c0:s + c1])
                c0 = c1
        return out

    def _prefill_slice(self, q, k_cache, v_cache, runs, begin, end, out):
        """Queries at positions [begin, end) attend to keys [0, end) (causal); writes `out`."""
        length = end - begin
        full = length in self.query_lengths
        q_heads = self._heads(q)
        k_own, v_own = self._read(k_cache, v_cache, runs_between(runs, begin, end))
        kernel = self.canonical_kernel if full else self.any_shape_kernel
        acc = Part.of_kernel(*kernel(q_heads, self._heads(k_own), self._heads(v_own), True, self.scale))
        pieces = self.key_pieces(runs_between(runs, 0, begin)) if begin else []
        if not pieces:
            out.copy_(acc.out)
            return
        plan = []
        for piece_runs, canonical in pieces:
            keys = sum(n for _, n in piece_runs)
            plan.append((piece_runs, canonical, self._splits(length, keys) if canonical and full else 1))
        remaining = sum(splits for _, _, splits in plan)         # parts still to merge
        for piece_runs, canonical, splits in plan:
            keys, values = self._read(k_cache, v_cache, piece_runs)
            if splits > 1:
                result = self.canonical_kernel(q_heads.expand(splits, -1, -1, -1), self._split(keys, splits),
                                               self._split(values, splits), False, self.scale)
            else:
                kernel = self.canonical_kernel if (canonical and full) else self.any_shape_kernel
                result = kernel(q_heads, self._heads(keys), self._heads(values), False, self.scale)
            for b in range(splits):
                remaining -= 1
                part = Part.of_kernel(result[0][b:b + 1], result[1][b:b + 1])
                target = Part(out, acc.lse) if not remaining else Part(self._acc.out[:length], self._acc.lse[:length])
                merge_parts(acc, part, target, write_lse=bool(remaining))
                acc = target
            result = part = keys = values = None      # free the kernel's buffers before its next call

    def _slots_of(self, runs: List[Tuple[int, int]], device) -> torch.Tensor:
        """Cache slots of the keys of `runs`, in order, on the device: slot = the run's first
        slot + (position - the run's first position), the run found by binary search."""
        lengths = np.array([n for _, n in runs], dtype=np.int64)
        ends = np.cumsum(lengths)
        total = int(ends[-1])
        deltas = np.array([slot for slot, _ in runs], dtype=np.int64) - (ends - lengths)
        small = torch.from_numpy(np.concatenate([deltas, ends])).to(device, non_blocking=True)
        if self._slots_used + total <= self._slots.shape[0]:
            slots = self._slots[self._slots_used:self._slots_used + total]
            self._slots_used += total
        else:                                   # several long prompts in one step: rare
            slots = torch.empty(total, dtype=torch.long, device=device)
        positions, run = self._key_positions[:total], self._run_of_key[:total]
        torch.searchsorted(small[len(runs):], positions, right=True, out=run)
        torch.index_select(small[:len(runs)], 0, run, out=slots)
        return slots.add_(positions)

    def key_pieces(self, runs: List[Tuple[int, int]]) -> List[Tuple[List[Tuple[int, int]], bool]]:
        """The keys of `runs` cut into pieces for one kernel call each: (runs of the piece,
        canonical). Cut by position, so every piece is canonical wherever the runs break
        (a piece within one run is a view; one across runs is gathered when read)."""
        located = _positions(runs)
        total = sum(n for _, n in runs)
        return [(runs_between(located, first, first + n), canonical)
                for first, n, canonical in self.split_pieces([(0, total)])]

    def _read(self, k_cache, v_cache, runs: List[Tuple[int, int]]):
        """Keys and values at the slots of `runs` as [n, KV heads, D] rows: a view of the
        cache for one run, else gathered into the preallocated buffer (slots built on the
        device, once per step for all layers)."""
        if len(runs) == 1:
            slot, n = runs[0]
            return k_cache[slot:slot + n], v_cache[slot:slot + n]
        key = tuple(runs)
        slots = self._gather_slots.get(key)
        if slots is None:
            slots = self._gather_slots[key] = self._slots_of(runs, k_cache.device)
        n = slots.shape[0]
        keys, values = self._gather[0, :n], self._gather[1, :n]
        torch.index_select(k_cache, 0, slots, out=keys)
        torch.index_select(v_cache, 0, slots, out=values)
        return keys, values


def _positions(runs: List[Tuple[int, int]]) -> List[Tuple[int, int, int]]:
    """(slot, length) runs -> (slot, position in their concatenation, length)."""
    out, position = [], 0
    for slot, n in runs:
        out.append((slot, position, n))
        position += n
    return out
