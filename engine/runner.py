"""Turns a scheduled step into one flat (varlen) batch, runs the model, samples.

Per step, built once and shared by every layer: positions, RoPE rows, slot mapping and the
attention backend's metadata. Logits are computed only for sequences that sample this step.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from .layers.attention import AttentionMetadata
from .layers.rope import RotaryTable
from .layers.sampler import sample, sample_on_device
from .models.step import StepContext
from .models.workspace_forward import forward_workspace
from .overlap import PendingTokens
from .scheduler import ScheduledChunk


class ModelRunner:
    def __init__(self, model, hf_config, device: torch.device, dtype: torch.dtype,
                 num_blocks: int, block_size: int, max_model_len: int, attention, workspace=None,
                 seed: int = 0):
        self.model, self.device, self.dtype = model, device, dtype
        self.block_size = block_size
        num_heads, num_kv_heads, head_dim = model.dims
        layers = len(model.layers)
        # The KV pool: allocated once, never resized. [layer, k/v, slot, kv_head, head_dim].
        # One extra block past the pool is a write target for padded CUDA-graph rows.
        self.dummy_block = num_blocks
        self.kv_cache = torch.zeros(layers, 2, (num_blocks + 1) * block_size, num_kv_heads, head_dim,
                                    device=device, dtype=dtype)
        self.kv_caches = [(self.kv_cache[i, 0], self.kv_cache[i, 1]) for i in range(layers)]
        self.rope = RotaryTable(hf_config, head_dim, max_model_len, device, dtype)
        self.attention = attention
        self.workspace = workspace
        self.graphs = None
        self.multimodal = None          # vision models: a VisionInputs (vision_inputs.py)
        self.generator = torch.Generator().manual_seed(seed)   # for requests without a seed
        # ... when their tokens are drawn on the device (steps launched ahead: engine/overlap.py)
        self.device_generator = torch.Generator(device=device).manual_seed(seed)
        # GPU span of the last step launched (CUDA events around its forward), for the step
        # log: a step's wall gap minus its GPU span is host time with the GPU idle.
        self._timed = torch.device(device).type == "cuda"
        self.last_span: Optional[Tuple[torch.cuda.Event, torch.cuda.Event]] = None

    def warm_up(self) -> None:
        """Let the attention backend build its kernel plans on this layer's cache and the
        workspace's query rows (call on the thread that will run the steps)."""
        warm = getattr(self.attention, "warm_up", None)
        if warm is None:
            return
        heads, kv_heads, head_dim = self.model.dims
        rows = self.workspace.qkv if self.workspace is not None else \
            torch.zeros(self.attention.query_slice, (heads + 2 * kv_heads) * head_dim, device=self.device,
                        dtype=self.dtype)
        warm(self.kv_caches[0], rows)

    def enable_cuda_graphs(self, max_batch: int, max_model_len: int) -> None:
        from .cuda_graphs import DecodeGraphs
        self.graphs = DecodeGraphs(self, max_batch, -(-max_model_len // self.block_size))
        self.graphs.capture()

    def _forward(self, input_ids: torch.Tensor, step: StepContext) -> torch.Tensor:
        if self.workspace is not None:
            return forward_workspace(self.model, input_ids, step, self.workspace)
        return self.model(input_ids, step)

    @staticmethod
    def kv_bytes_per_token(model, dtype: torch.dtype) -> int:
        _, num_kv_heads, head_dim = model.dims
        return len(model.layers) * 2 * num_kv_heads * head_dim * torch.finfo(dtype).bits // 8

    def _build(self, chunks: Sequence[ScheduledChunk], input_ids: Optional[torch.Tensor] = None
               ) -> Tuple[torch.Tensor, StepContext, List[int]]:
        """input_ids: the step's token ids already on the device (decodes launched ahead)."""
        bs = self.block_size
        ids: List[int] = []
        positions, slots = [], []
        query_starts, query_lens, context_starts, tables, sample_rows = [], [], [], [], []
        for chunk in chunks:
            req = chunk.request
            query_starts.append(len(ids))
            query_lens.append(chunk.num_tokens)
            context_starts.append(chunk.start)
            tables.append(req.block_ids)
            ids.extend(req.token_slice(chunk.start, chunk.end) if input_ids is None else [0] * chunk.num_tokens)
            pos = torch.arange(chunk.start, chunk.end)
            positions.append(pos)
            blocks = torch.tensor(req.block_ids, dtype=torch.long)
            slots.append(blocks[pos // bs] * bs + pos % bs)
            if chunk.completes:
                sample_rows.append(len(ids) - 1)
        dev = self.device
        positions_t = torch.cat(positions).to(dev, non_blocking=True)
        meta = AttentionMetadata(query_starts, query_lens, context_starts,
                                 torch.cat(slots).to(dev, non_blocking=True), tables, bs)
        self.attention.prepare(meta, dev)
        image_embeds = None
        if self.multimodal is None:
            cos, sin = self.rope.gather(positions_t)
        else:      # encodes images due this step; 3-axis rotary rows; image rows of the batch
            cos, sin, image_embeds = self.multimodal.prepare(chunks)
        step = StepContext(positions_t, cos, sin, meta, self.attention, self.kv_caches, image_embeds)
        if input_ids is None:
            input_ids = torch.tensor(ids, dtype=torch.long).to(dev, non_blocking=True)
        return input_ids, step, sample_rows

    def _logits(self, chunks: Sequence[ScheduledChunk], input_ids: Optional[torch.Tensor] = None
                ) -> Optional[torch.Tensor]:
        """Run the step's forward (a CUDA graph when one fits); logits of the chunks that
        complete, in order, or None if none does."""
        if self.graphs is not None and self.graphs.can_run(chunks):
            start = self._event()
            logits = self.graphs.run(chunks, input_ids)
        else:
            ids, step, sample_rows = self._build(chunks, input_ids)
            start = self._event()             # after the host built the inputs
            hidden = self._forward(ids, step)
            logits = self.model.compute_logits(hidden[sample_rows]) if sample_rows else None
        self.last_span = (start, self._event()) if self._timed else None
        return logits

    def _event(self) -> Optional[torch.cuda.Event]:
        if not self._timed:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @torch.inference_mode()
    def execute(self, chunks: Sequence[ScheduledChunk]) -> Tuple[List[int], List[Optional[dict]]]:
        """Run one step. Returns sampled tokens (and logprobs) for the chunks that complete,
        in the order of `chunks`."""
        logits = self._logits(chunks)
        if logits is None:
            return [], []
        requests = [c.request for c in chunks if c.completes]
        return sample(logits, [r.params for r in requests], [r.generator or self.generator for r in requests])

    @torch.inference_mode()
    def launch_ahead(self, chunks: Sequence[ScheduledChunk], input_ids: Optional[torch.Tensor] = None
                     ) -> PendingTokens:
        """Run a step whose every chunk samples on the device (overlap.samples_on_device)
        without waiting for it: the tokens stay on the device (the next step may read them)
        and are on their way to the host. input_ids: the step's ids on the device, if known there."""
        logits = self._logits(chunks, input_ids)
        return PendingTokens(sample_on_device(logits, [c.request.params for c in chunks], self.device_generator))

    @torch.inference_mode()
    def prompt_logits(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        """Logits of every scheduled token (for parity tests; not used when serving)."""
        input_ids, step, _ = self._build(chunks)
        return self.model.compute_logits(self._forward(input_ids, step))
