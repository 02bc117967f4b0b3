"""Per-request state: token ids, progress through the prompt, blocks, timings."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any, List, Optional

import torch

from .config import SamplingParams
from .outputs import RequestMetrics


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass
class MultiModalItem:
    """An image (or other encoder input) occupying prompt positions [offset, offset+length).

    Seam for the vision path: `content_hash` feeds the prefix-cache keys of every block the
    item overlaps, so two different images with the same text never share KV.
    """
    offset: int
    length: int
    content_hash: str
    data: Any = None

    @property
    def end(self) -> int:
        return self.offset + self.length


class Request:
    def __init__(self, request_id: str, prompt_token_ids: List[int], params: SamplingParams,
                 prompt: Optional[str] = None, mm_items: Optional[List[MultiModalItem]] = None,
                 eos_token_ids: tuple = ()):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: List[int] = []
        self.params = params
        self.mm_items = mm_items or []
        self.eos_token_ids = eos_token_ids
        self.status = RequestStatus.WAITING
        # Invariant: tokens [0, num_computed_tokens) have their KV in this request's blocks.
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0          # prompt tokens served by the prefix cache (first admission)
        self.block_ids: List[int] = []
        self.block_hashes: List[bytes] = []  # hashes of this request's full blocks, in order
        self.num_registered_blocks = 0       # leading blocks already findable in the prefix cache
        self.finish_reason: Optional[str] = None
        self.stop_reason: Any = None
        self.error: Optional[str] = None
        self.logprobs: Optional[list] = [] if params.logprobs is not None else None
        self.metrics = RequestMetrics(arrival_time=time.monotonic(),
                                      num_prompt_tokens=len(self.prompt_token_ids))
        self.generator: Optional[torch.Generator] = None
        if params.seed is not None:
            self.generator = torch.Generator().manual_seed(params.seed)
        self.admitted_once = False
        # Multimodal rotary positions (vision models): [3, num_prompt_tokens] t/h/w ids; a
        # generated token at index i has position i + mrope_delta on all three axes.
        self.mrope_positions: Optional[torch.Tensor] = None
        self.mrope_delta = 0

    @property
    def all_token_ids(self) -> List[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status == RequestStatus.FINISHED

    def token_slice(self, start: int, end: int) -> List[int]:
        """all_token_ids[start:end] without concatenating the lists (decode reads 1 token)."""
        n = len(self.prompt_token_ids)
        if end <= n:
            return self.prompt_token_ids[start:end]
        if start >= n:
            return self.output_token_ids[start - n:end - n]
        return self.prompt_token_ids[start:] + self.output_token_ids[:end - n]
