"""Per-step inputs of a vision model: encode images due this step, M-RoPE rows, image rows.

Called by the runner once per step (never per layer). For every scheduled chunk it
  * encodes each image the chunk reaches that is not encoded yet (rows were reserved by the
    scheduler together with the image's KV blocks), writing into the vision pool;
  * collects the pool rows of the image positions the chunk covers, to replace those
    positions' token embeddings;
  * gathers cos/sin for the chunk's 3-axis positions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch

from .mrope import MropeRows, positions_for
from .vision_cache import VisionCache


@dataclass
class ImageEmbeds:
    rows: torch.Tensor        # [N] rows of the flat batch that hold image positions
    values: torch.Tensor      # [N, hidden] their input embeddings, from the vision pool


class VisionInputs:
    def __init__(self, model, cache: VisionCache, rope_table, device):
        self.model, self.cache, self.device = model, cache, device
        self.mrope = MropeRows(rope_table, model.mrope_section)

    def _encode(self, item) -> None:
        assert self.cache.holds(item), "the scheduler reserves an image's rows before its first chunk"
        data = item.data
        pixels = data.pixel_values.to(self.device, non_blocking=True)
        features = self.model.encode_image(pixels, data.grid_thw)
        start, end = self.model.separator_embeddings()
        self.cache.write(item, torch.cat([start, features, end]))

    def prepare(self, chunks: Sequence) -> Tuple[torch.Tensor, torch.Tensor, "ImageEmbeds | None"]:
        positions: List[torch.Tensor] = []
        batch_rows: List[torch.Tensor] = []
        pool_rows: List[torch.Tensor] = []
        base = 0                                   # first row of this chunk in the flat batch
        for chunk in chunks:
            request, start, end = chunk.request, chunk.start, chunk.end
            positions.append(positions_for(request, start, end))
            for item in request.mm_items:
                lo, hi = max(start, item.offset), min(end, item.end)
                if lo >= hi:
                    continue
                if not self.cache.is_encoded(item):
                    self._encode(item)
                batch_rows.append(torch.arange(lo - start, hi - start) + base)
                pool_rows.append(self.cache.rows(item, lo - item.offset, hi - item.offset))
            base += chunk.num_tokens
        cos, sin = self.mrope.gather(torch.cat(positions, dim=1).to(self.device, non_blocking=True))
        if not batch_rows:
            return cos, sin, None
        values = self.cache.pool.index_select(0, torch.cat(pool_rows))
        return cos, sin, ImageEmbeds(torch.cat(batch_rows).to(self.device, non_blocking=True), values)
