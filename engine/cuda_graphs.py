"""CUDA graphs for decode-only steps: one graph per batch-size bucket, captured at start.

A decode step is launch-bound (28 layers x ~20 kernels for a few microseconds of work each);
replaying a captured graph removes that overhead. Inputs live in static buffers that each
step overwrites; rows beyond the real batch point at a dummy KV block outside the pool, so
padding never touches a request's cache.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Sequence

import torch

from .layers.attention import AttentionMetadata
from .layers.triton_decode import choose_splits
from .models.step import StepContext
from .models.workspace_forward import forward_workspace
from .scheduler import ScheduledChunk

log = logging.getLogger("longread.graphs")

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)


class DecodeGraphs:
    def __init__(self, runner, max_batch: int, max_blocks_per_seq: int):
        self.runner = runner
        self.buckets = [b for b in BUCKETS if b <= max_batch] or [1]
        self.max_batch = self.buckets[-1]
        dev = runner.device
        self.input_ids = torch.zeros(self.max_batch, dtype=torch.long, device=dev)
        self.positions = torch.zeros(self.max_batch, dtype=torch.long, device=dev)
        self.slots = torch.zeros(self.max_batch, dtype=torch.long, device=dev)
        self.tables = torch.zeros(self.max_batch, max_blocks_per_seq, dtype=torch.int32, device=dev)
        self.lens = torch.ones(self.max_batch, dtype=torch.int32, device=dev)
        self.graphs: Dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: Dict[int, torch.Tensor] = {}
        self.pool = None
        # Host copy of the block table, updated incrementally: row i holds the first
        # _row_blocks[i] entries of the block list _row_owner[i] (so does the device table).
        # Block lists only grow; freeing gives a request a new list, so identity + length
        # says whether a row is current. Each step copies the rows it needs through a fresh
        # pinned buffer (_pinned), so they may be rewritten while that copy is in flight (the
        # next step is built before this one has run: engine/overlap.py).
        self.host_tables = torch.zeros(self.max_batch, max_blocks_per_seq, dtype=torch.int32)
        self._host_np = self.host_tables.numpy()
        self._row_owner: List[object] = [None] * self.max_batch
        self._row_blocks = [0] * self.max_batch
        self._padding_from = 0           # rows >= this hold padding inputs

    def _step(self, batch: int) -> torch.Tensor:
        r = self.runner
        meta = AttentionMetadata([], [], [], self.slots[:batch], [], r.block_size)
        meta.extra["prefills"] = []
        meta.extra["decode"] = (slice(0, batch), self.tables[:batch], self.lens[:batch],
                                choose_splits(batch, r.model.dims[1], r.attention.num_sms))
        cos, sin = r.rope.gather(self.positions[:batch])
        step = StepContext(self.positions[:batch], cos, sin, meta, r.attention, r.kv_caches)
        hidden = forward_workspace(r.model, self.input_ids[:batch], step, r.workspace)
        return r.model.compute_logits(hidden)

    @torch.inference_mode()
    def capture(self) -> None:
        self._reset_padding(0)
        for batch in reversed(self.buckets):               # largest first: it sizes the pool
            for _ in range(2):
                self._step(batch)                           # warm-up (Triton compile, cuBLAS)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                self.logits[batch] = self._step(batch)
            self.pool = graph.pool() if self.pool is None else self.pool
            self.graphs[batch] = graph
        torch.cuda.synchronize()
        log.info("captured decode graphs for batch sizes %s", self.buckets)

    def _reset_padding(self, start: int) -> None:
        """Rows >= start decode nothing: one key in the dummy block, writes go there too."""
        dummy = self.runner.dummy_block
        self.tables[start:, 0] = dummy
        self._row_owner[start:] = [None] * (self.max_batch - start)
        self._padding_from = start
        self.lens[start:] = 1
        self.slots[start:] = dummy * self.runner.block_size
        self.positions[start:] = 0
        self.input_ids[start:] = 0

    def can_run(self, chunks: Sequence[ScheduledChunk]) -> bool:
        return (0 < len(chunks) <= self.max_batch and
                all(c.num_tokens == 1 and c.start > 0 and c.completes for c in chunks))

    @torch.inference_mode()
    def run(self, chunks: Sequence[ScheduledChunk], input_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """input_ids: the batch's token ids on the device (decodes launched ahead), else
        each request's last token is read on the host."""
        batch = len(chunks)
        bucket = next(b for b in self.buckets if b >= batch)
        bs = self.runner.block_size
        ids, positions, slots, lens = [], [], [], []
        for c in chunks:
            req = c.request
            ids.append(req.token_slice(c.start, c.end)[0] if input_ids is None else 0)
            positions.append(c.start + req.mrope_delta)   # M-RoPE: generated tokens shift (0 for text)
            slots.append(req.block_ids[c.start // bs] * bs + c.start % bs)
            lens.append(c.start + 1)
        dev = self.runner.device
        # One host tensor, one copy: ids, positions, slots and lengths side by side.
        packed = _pinned(torch.tensor([ids, positions, slots, lens], dtype=torch.long)).to(dev, non_blocking=True)
        self.input_ids[:batch].copy_(packed[0] if input_ids is None else input_ids)
        self.positions[:batch].copy_(packed[1])
        self.slots[:batch].copy_(packed[2])
        self.lens[:batch].copy_(packed[3])
        width = self._update_tables(chunks)
        if width:
            self.tables[:batch, :width].copy_(_pinned(self.host_tables[:batch, :width]), non_blocking=True)
        if batch < self._padding_from:
            self._reset_padding(batch)
        self._padding_from = batch
        self.graphs[bucket].replay()
        return self.logits[bucket][:batch]

    def _update_tables(self, chunks: Sequence[ScheduledChunk]) -> int:
        """Write only the block ids the host table lacks (a request's new block every
        block_size steps, or a row taken by another request). Returns the width to copy
        to the device, 0 if nothing changed."""
        changed = False
        for row, chunk in enumerate(chunks):
            blocks = chunk.request.block_ids
            known = self._row_blocks[row] if self._row_owner[row] is blocks else 0
            if known != len(blocks):
                self._host_np[row, known:len(blocks)] = blocks[known:]
                self._row_owner[row], self._row_blocks[row] = blocks, len(blocks)
                changed = True
        return max(self._row_blocks[:len(chunks)]) if changed else 0


def _pinned(host: torch.Tensor) -> torch.Tensor:
    """A pinned copy of `host` for one asynchronous upload: from pageable memory the driver
    may wait for the stream, which would stall a step launched ahead. The caching host
    allocator reuses the buffer only once its copy has run."""
    if not torch.cuda.is_available():
        return host
    staging = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
    staging.copy_(host)
    return staging
