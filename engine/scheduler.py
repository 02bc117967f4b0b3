"""One token budget per step: running decodes first, then prefill chunks (vLLM v1 style).

There are no prefill/decode phases: every request's num_computed_tokens catches up to its
num_tokens, a chunk at a time. Decodes are scheduled before any prefill chunk so a long
prompt never stalls users who are already reading an answer.

With a vision model, a chunk that reaches an image also needs the image's rows in the vision
pool; vision_schedule.py shapes such chunks and argues why this cannot deadlock.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .kv_cache import KVCacheManager
from .request import Request, RequestStatus
from .vision_cache import VisionCache
from .vision_schedule import ImagePlan, plan_images, reserve_images


@dataclass
class ScheduledChunk:
    request: Request
    start: int          # first token position computed this step (== num_computed_tokens)
    num_tokens: int     # tokens computed this step
    # A decode launched before its input token reached the host (engine/overlap.py): the
    # token is read on the device, and the chunk samples although num_tokens lags behind.
    ahead: bool = False

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def completes(self) -> bool:
        """After this chunk the request has computed all its tokens and samples a new one."""
        return self.ahead or self.end == self.request.num_tokens


@dataclass
class SchedulerOutput:
    chunks: List[ScheduledChunk] = field(default_factory=list)
    preempted: List[Request] = field(default_factory=list)

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_batched_tokens: int, max_num_seqs: int,
                 cost_model=None, max_step_time: Optional[float] = None,
                 vision: Optional[VisionCache] = None, chunk_granule: int = 1, chunk_slice: int = 1):
        self.kv = kv
        self.vision = vision                 # the vision pool (vision models only)
        self._vision_open = True             # may a request still take new vision rows this step
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        # Optional time budget per step: prefill chunks shrink so a step's estimated cost
        # (StepCostModel) stays under max_step_time; decodes are always scheduled. Steps
        # without decodes are not budgeted (nobody is waiting for a token).
        self.cost_model = cost_model
        self.max_step_time = max_step_time
        self._time_left = 0.0
        self._timed = False                  # is this step budgeted in time (decodes share it)
        self.last_estimate: Optional[float] = None   # modelled seconds of the last budgeted prefill step
        # Prefill chunks that do not end a prompt: multiples of the slice, or shorter ones of
        # the granule (the GPU attention's fast kernels take those lengths only).
        self.chunk_granule, self.chunk_slice = chunk_granule, max(chunk_slice, chunk_granule)
        self.waiting: deque = deque()
        self.running: List[Request] = []     # admission order; the tail is preempted first
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, request: Request) -> None:
        """Drop a request (finished or aborted) and return its blocks."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self._free(request)

    def _free(self, request: Request) -> None:
        """Return both resources a request may hold: KV blocks and vision rows."""
        self.kv.free(request)
        if self.vision is not None:
            self.vision.release_request(request)

    def release_consumed(self, request: Request) -> None:
        """After a step: free the vision rows of images whose positions are all in the KV cache."""
        if self.vision is not None:
            self.vision.release_computed(request)

    def _preempt(self, victim: Request, out: SchedulerOutput, scheduled: Dict[int, ScheduledChunk]) -> int:
        """Recompute-style preemption: free all blocks, re-queue at the front. Returns tokens freed."""
        self.running.remove(victim)
        freed = 0
        chunk = scheduled.pop(id(victim), None)
        if chunk is not None:
            out.chunks.remove(chunk)
            freed = chunk.num_tokens
        self._free(victim)
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.PREEMPTED
        victim.metrics.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        out.preempted.append(victim)
        return freed

    def _limit(self, request: Request, num_new: int) -> int:
        """Shape a prefill chunk: the time budget, then a multiple of the chunk slice or of
        the granule unless it ends the prompt (the GPU attention's fast kernels take those
        lengths only)."""
        if num_new <= 1:
            return num_new
        start = request.num_computed_tokens
        timed = self._timed
        if timed:
            num_new = max(1, min(num_new, self.cost_model.max_chunk(start, self._time_left)))
            if num_new < self.chunk_granule:             # off the fast kernel: at its speed
                num_new = max(1, min(num_new, self.cost_model.max_chunk(start, self._time_left, slow=True)))
        if num_new < request.num_tokens - start and num_new >= self.chunk_granule:
            num_new -= num_new % (self.chunk_slice if num_new >= self.chunk_slice else self.chunk_granule)
        if timed:
            self._time_left -= self.cost_model.chunk_cost(start, num_new, slow=num_new < self.chunk_granule)
        return num_new

    def _plan(self, request: Request, num_new: int) -> ImagePlan:
        """The chunk's length and KV need once the request's images are accounted for."""
        if self.vision is None or not request.mm_items:
            return ImagePlan(num_new, num_new)
        plan = plan_images(self.vision, request, num_new, self._vision_open)
        if plan.blocked:
            self._vision_open = False            # first come, first served for vision rows
        return plan

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        scheduled: Dict[int, ScheduledChunk] = {}
        self._vision_open = True
        # Pass 1: decodes (one token behind); pass 2: running prefills, in admission order,
        # except that requests holding vision rows go first (others may be waiting for them).
        decodes = [r for r in self.running if r.num_tokens - r.num_computed_tokens == 1]
        # The step-time budget protects readers: with nobody decoding, prefill runs unbudgeted.
        self._timed = self.max_step_time is not None and self.cost_model is not None and bool(decodes)
        if self._timed:
            decode_cost = sum(self.cost_model.chunk_cost(r.num_computed_tokens, 1) for r in self.running)
            self._time_left = self.max_step_time - self.cost_model.overhead_s - decode_cost
        prefills = [r for r in self.running if r.num_tokens - r.num_computed_tokens > 1]
        if self.vision is not None:
            prefills.sort(key=lambda r: not self.vision.holds_any(r))
        for request in decodes + prefills:
            if budget <= 0:
                break
            if request not in self.running:      # preempted earlier in this loop
                continue
            num_new = self._limit(request, min(request.num_tokens - request.num_computed_tokens, budget))
            plan = self._plan(request, num_new)
            if plan.num_tokens == 0:
                continue                         # its next image waits for vision rows
            while not self.kv.allocate(request, plan.kv_tokens):
                victim = self.running[-1]
                budget += self._preempt(victim, out, scheduled)
                if victim is request:
                    break
            if request.status != RequestStatus.RUNNING:
                continue
            reserve_images(self.vision, plan)        # KV is allocated: take the rows too
            chunk = ScheduledChunk(request, request.num_computed_tokens, plan.num_tokens)
            out.chunks.append(chunk)
            scheduled[id(request)] = chunk
            budget -= plan.num_tokens

        # Pass 3: admit waiting requests while budget, sequence slots and blocks allow.
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hits = self.kv.find_cached_prefix(request)
            request.num_computed_tokens = len(hits) * self.kv.block_size
            num_new = self._limit(request, min(request.num_tokens - request.num_computed_tokens, budget))
            plan = self._plan(request, num_new)
            if plan.num_tokens == 0 or not self.kv.allocate(request, plan.kv_tokens, hits):
                request.num_computed_tokens = 0
                break                            # wait for blocks or rows; never preempt for newcomers
            reserve_images(self.vision, plan)
            self.kv.record_lookup(request, len(hits))
            self.waiting.popleft()
            if not request.admitted_once:
                request.num_cached_tokens = request.num_computed_tokens
                request.metrics.num_cached_tokens = request.num_computed_tokens
                request.admitted_once = True
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            chunk = ScheduledChunk(request, request.num_computed_tokens, plan.num_tokens)
            out.chunks.append(chunk)
            scheduled[id(request)] = chunk
            budget -= plan.num_tokens
        has_prefill = any(c.num_tokens > 1 for c in out.chunks)
        self.last_estimate = self.max_step_time - self._time_left if self._timed and has_prefill else None
        return out

    def observe_step(self, seconds: float) -> None:
        """The last scheduled step took `seconds` from scheduling to its tokens: calibrate
        the time model when that step was budgeted."""
        if self.last_estimate is not None:
            self.cost_model.observe(self.last_estimate, seconds)
            self.last_estimate = None
