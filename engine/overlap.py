"""Decode overlap: launch decode step N+1 before step N's tokens reach the host.

A decode step's host work (reading the sampled tokens, detokenizing, publishing outputs,
waking the callers' threads, building the next step's inputs) is ~1.5-4 ms at 32 users,
against ~6 ms of GPU time. Done in turn, the GPU waits for all of it every step. Instead,
while step N runs, the engine launches step N+1 with N's sampled tokens read on the device,
then processes N's tokens while N+1 runs. (Unseeded sampled tokens then come from a device
generator seeded with the engine's seed rather than the host one: still reproducible.)

Only when nothing else needs scheduling: every running request samples on the device (no
logprobs, no seed of its own: sampler.sample_on_device), none waits, and each continuing
request's next KV slot can be allocated without preempting anyone. A request that stops on
a token of step N (EOS, stop string) has a wasted row in step N+1, whose token is dropped;
its freed blocks are written by that row only before any later step (one stream orders
them), and they are never cached with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from .kv_cache import KVCacheManager
from .request import Request, RequestStatus
from .scheduler import ScheduledChunk


class PendingTokens:
    """Sampled token ids on the device, with their copy to the host under way."""

    def __init__(self, device_tokens: torch.Tensor):
        self.device = device_tokens
        if device_tokens.is_cuda:
            self.host = torch.empty(device_tokens.shape, dtype=device_tokens.dtype, pin_memory=True)
            self.host.copy_(device_tokens, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host, self.event = device_tokens, None

    def wait(self) -> List[int]:
        if self.event is not None:
            self.event.synchronize()      # releases the GIL: callers' threads run meanwhile
        return self.host.tolist()


@dataclass
class InFlight:
    chunks: List[ScheduledChunk]
    tokens: PendingTokens
    span: Optional[tuple] = None      # CUDA events around its forward (runner.last_span)


def samples_on_device(request: Request) -> bool:
    """No logprobs and no seed of its own: the token can be drawn on the device (the
    engine-wide device generator), so the next step can read it there."""
    return request.params.logprobs is None and (request.params.greedy or request.generator is None)


def can_launch_ahead(chunks: List[ScheduledChunk]) -> bool:
    """A step whose every chunk samples on the device may be followed before its tokens land."""
    return bool(chunks) and all(c.completes and samples_on_device(c.request) for c in chunks)


def _certainly_finishes(request: Request, max_model_len: int) -> bool:
    """The token on its way ends the request by length (so it needs no next step)."""
    params = request.params
    generated = len(request.output_token_ids) + 1
    return (params.max_tokens is not None and generated >= params.max_tokens) or \
        request.num_tokens + 1 >= max_model_len


def next_decode_step(flight: InFlight, running: List[Request], kv: KVCacheManager,
                     max_model_len: int) -> Optional[tuple]:
    """The decode step that follows `flight` for its requests that keep running, with their
    next KV slot allocated: (chunks, input ids on the device), or None when the scheduler
    must decide (a request runs outside this batch, a slot is short, nobody continues).
    The caller has checked that no request is waiting and no new one arrived."""
    live = [(row, c) for row, c in enumerate(flight.chunks) if c.request.status == RequestStatus.RUNNING]
    if len(live) != len(running):
        return None                     # someone else (a prefill in progress) needs scheduling
    keep = [(row, c) for row, c in live if not _certainly_finishes(c.request, max_model_len)]
    if not keep:
        return None
    needed = sum(max(0, kv.blocks_for(c.end + 1) - len(c.request.block_ids)) for _, c in keep)
    if needed > kv.num_free_blocks:
        return None                     # the scheduler preempts, not this shortcut
    for _, c in keep:
        # num_computed_tokens is still c.start here: room for c's token and the next one.
        if not kv.allocate(c.request, c.end + 1 - c.request.num_computed_tokens):
            raise RuntimeError("KV blocks counted free could not be allocated")
    chunks = [ScheduledChunk(c.request, c.end, 1, ahead=True) for _, c in keep]
    ids = flight.tokens.device
    if len(keep) != len(flight.chunks):
        ids = ids[torch.tensor([row for row, _ in keep], device=ids.device)]
    return chunks, ids
