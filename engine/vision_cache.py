"""The vision pool: encoder outputs, in memory of their own.

One tensor [capacity_tokens, hidden] is allocated at start-up and never resized. It shares
nothing with the KV cache or any workspace, so images can never starve the KV cache of
memory or the reverse (the second failure in the article behind this project).

Each image item holds exactly image_token_count rows while it lives: row i is the input
embedding of the item's i-th prompt position (row 0 <|vision_start|>, then the merged
patches, last row <|vision_end|>), so a prefill chunk covering positions [a, b) of the item
reads rows [a - offset, b - offset).

Lifetime of an item's rows:
  reserved  -- by the scheduler, in the same decision that allocates the item's KV blocks
  encoded   -- the runner wrote the encoder output, in the step of the first chunk covering it
  released  -- as soon as all the item's positions are in the KV cache, or when its request
               is preempted, aborted or finished.
With no requests alive, every row is free.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Dict, List

import torch

from .request import MultiModalItem, Request


@dataclass
class _Entry:
    item: MultiModalItem          # kept referenced so id(item) stays unique while the entry lives
    host_rows: List[int]          # row indices into the pool
    rows: torch.Tensor            # the same, on the device
    encoded: bool = False


class VisionCache:
    def __init__(self, capacity_tokens: int, hidden_size: int, device, dtype: torch.dtype):
        self.capacity_tokens = capacity_tokens
        self.device = device
        self.pool = torch.zeros(capacity_tokens, hidden_size, device=device, dtype=dtype)
        self._free_rows: deque = deque(range(capacity_tokens))
        self._entries: Dict[int, _Entry] = {}
        self.peak_used_tokens = 0
        self.num_encoded = 0

    @property
    def nbytes(self) -> int:
        return self.pool.numel() * self.pool.element_size()

    @property
    def num_free_tokens(self) -> int:
        return len(self._free_rows)

    @property
    def num_used_tokens(self) -> int:
        return self.capacity_tokens - len(self._free_rows)

    @property
    def num_items(self) -> int:
        return len(self._entries)

    def holds(self, item: MultiModalItem) -> bool:
        return id(item) in self._entries

    def holds_any(self, request: Request) -> bool:
        return any(id(item) in self._entries for item in request.mm_items)

    def is_encoded(self, item: MultiModalItem) -> bool:
        entry = self._entries.get(id(item))
        return entry is not None and entry.encoded

    def reserve(self, item: MultiModalItem) -> None:
        """Take item.length rows (the scheduler checked num_free_tokens first)."""
        assert not self.holds(item) and item.length <= self.num_free_tokens, "caller must check capacity"
        rows = [self._free_rows.popleft() for _ in range(item.length)]
        self._entries[id(item)] = _Entry(item, rows, torch.tensor(rows, dtype=torch.long, device=self.device))
        self.peak_used_tokens = max(self.peak_used_tokens, self.num_used_tokens)

    def write(self, item: MultiModalItem, embeddings: torch.Tensor) -> None:
        entry = self._entries[id(item)]
        # The seed's crash was a count mismatch found on the device; here it is a host check.
        if embeddings.shape[0] != item.length:
            raise ValueError(f"encoder produced {embeddings.shape[0]} rows for an item of {item.length} tokens")
        self.pool.index_copy_(0, entry.rows, embeddings.to(self.pool.dtype))
        entry.encoded = True
        self.num_encoded += 1

    def rows(self, item: MultiModalItem, start: int, end: int) -> torch.Tensor:
        """Pool rows of the item's positions [start, end), relative to item.offset."""
        return self._entries[id(item)].rows[start:end]

    def release(self, item: MultiModalItem) -> None:
        entry = self._entries.pop(id(item), None)
        if entry is not None:
            self._free_rows.extend(entry.host_rows)

    def release_computed(self, request: Request) -> None:
        """Free every item whose positions are all in the KV cache now."""
        for item in request.mm_items:
            if item.end <= request.num_computed_tokens:
                self.release(item)

    def release_request(self, request: Request) -> None:
        for item in request.mm_items:
            self.release(item)

    def stats(self) -> Dict[str, int]:
        return {"vision_cache_tokens_total": self.capacity_tokens,
                "vision_cache_tokens_free": self.num_free_tokens,
                "vision_cache_tokens_peak": self.peak_used_tokens,
                "vision_cache_items": self.num_items,
                "num_images_encoded": self.num_encoded}
