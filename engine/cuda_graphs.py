"""CUDA graphs for decode-only steps: one graph per batch-size bucket, captured at start.

A decode step is launch-bound (28 layers x ~20 kernels for a few microseconds of work each);
replaying a captured graph removes that overhead. Inputs live in static buffers that each
step overwrites; rows beyond the real batch point at a dummy KV block outside the pool, so
padding never touches a request's cache.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Sequence

import torch

from .layers.attention import AttentionMetadata
from .layers.triton_decode import choose_splits, paged_block_table
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
        self.lens[start:] = 1
        self.slots[start:] = dummy * self.runner.block_size
        self.positions[start:] = 0
        self.input_ids[start:] = 0

    def can_run(self, chunks: Sequence[ScheduledChunk]) -> bool:
        return (0 < len(chunks) <= self.max_batch and
                all(c.num_tokens == 1 and c.start > 0 and c.completes for c in chunks))

    @torch.inference_mode()
    def run(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        batch = len(chunks)
        bucket = next(b for b in self.buckets if b >= batch)
        bs = self.runner.block_size
        ids, positions, slots, lens = [], [], [], []
        for c in chunks:
            req = c.request
            ids.append(req.token_slice(c.start, c.end)[0])
            positions.append(c.start + req.mrope_delta)   # M-RoPE: generated tokens shift (0 for text)
            slots.append(req.block_ids[c.start // bs] * bs + c.start % bs)
            lens.append(c.start + 1)
        table = paged_block_table([c.request.block_ids for c in chunks])
        dev = self.runner.device
        # One host tensor, one copy: ids, positions, slots and lengths side by side.
        packed = torch.tensor([ids, positions, slots, lens], dtype=torch.long).to(dev, non_blocking=True)
        self.input_ids[:batch].copy_(packed[0])
        self.positions[:batch].copy_(packed[1])
        self.slots[:batch].copy_(packed[2])
        self.lens[:batch].copy_(packed[3])
        self.tables[:batch, :table.shape[1]].copy_(table.to(dev, non_blocking=True))
        self._reset_padding(batch)
        self.graphs[bucket].replay()
        return self.logits[bucket][:batch]
