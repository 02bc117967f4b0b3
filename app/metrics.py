"""What the performance panel remembers: finished requests and once-a-second engine samples.

One MetricsHistory per server (the engine is shared by every browser tab), thread-safe.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional

MAX_RECORDS = 50
MAX_SAMPLES = 600                 # 10 minutes at one sample a second
COLD_BELOW = 0.1                  # cached share of the prompt under which a request is "cold"
WARM_FROM = 0.5                   # ... and from which it is "warm"; in between "partial"


def cache_state(cached_tokens: int, prompt_tokens: int) -> str:
    """"cold", "partial" or "warm". A shared system prompt (a block or two) still counts cold."""
    if prompt_tokens <= 0:
        return "cold"
    share = cached_tokens / prompt_tokens
    if share < COLD_BELOW:
        return "cold"
    return "warm" if share >= WARM_FROM else "partial"


@dataclass
class RequestRecord:
    index: int                    # 1, 2, ... in order of completion on this server
    request_id: str
    finished_at: float            # wall-clock time
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    ttft: Optional[float]
    queue_time: Optional[float]
    prefill_time: Optional[float]
    first_decode_time: Optional[float]
    prefill_tokens_per_s: Optional[float]
    decode_tokens_per_s: Optional[float]
    finish_reason: Optional[str]
    forecast_ttft: Optional[float] = None     # what the forecast said before sending
    forecast_cached_tokens: int = 0           # cache hit the forecast assumed

    @property
    def cache_state(self) -> str:
        return cache_state(self.cached_tokens, self.prompt_tokens)

    @property
    def forecast_error(self) -> Optional[float]:
        """(measured - forecast) / forecast, e.g. +0.12 = took 12% longer than forecast."""
        if self.ttft is None or not self.forecast_ttft:
            return None
        return (self.ttft - self.forecast_ttft) / self.forecast_ttft

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["cache_state"] = self.cache_state
        out["forecast_error"] = self.forecast_error
        return out


def record_from_output(out, index: int, forecast_ttft: Optional[float] = None,
                       forecast_cached_tokens: int = 0) -> RequestRecord:
    """Build a record from the engine's final RequestOutput (metrics and token counts)."""
    m = out.metrics
    return RequestRecord(
        index=index, request_id=out.request_id, finished_at=time.time(),
        prompt_tokens=m.num_prompt_tokens, cached_tokens=out.num_cached_tokens,
        generated_tokens=m.num_generated_tokens, ttft=m.ttft, queue_time=m.queue_time,
        prefill_time=m.prefill_time, first_decode_time=m.first_decode_time,
        prefill_tokens_per_s=m.prefill_tokens_per_s, decode_tokens_per_s=m.decode_tokens_per_s,
        finish_reason=out.outputs[0].finish_reason if out.outputs else None,
        forecast_ttft=forecast_ttft, forecast_cached_tokens=forecast_cached_tokens)


@dataclass
class Sample:
    """One look at the engine and the host, taken by the sampler thread."""
    time: float                   # wall clock
    kv_blocks_total: int
    kv_blocks_free: int
    kv_blocks_cached: int         # free but holding a reusable prefix
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_running: int
    num_waiting: int
    process_rss: int              # bytes
    system_used: int
    system_total: int
    # device name -> {"weights": bytes, "kv_used": ..., "kv_cached": ..., "kv_free": ...,
    #                 "workspace": ..., "other": ...}
    devices: Dict[str, Dict[str, int]] = field(default_factory=dict)

    @property
    def kv_used_fraction(self) -> float:
        """Blocks referenced by live requests."""
        if not self.kv_blocks_total:
            return 0.0
        return (self.kv_blocks_total - self.kv_blocks_free) / self.kv_blocks_total

    @property
    def kv_cached_fraction(self) -> float:
        """Free blocks that still hold a reusable prefix."""
        return self.kv_blocks_cached / self.kv_blocks_total if self.kv_blocks_total else 0.0

    @property
    def hit_rate(self) -> Optional[float]:
        if not self.prefix_cache_queries:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


class MetricsHistory:
    def __init__(self, max_records: int = MAX_RECORDS, max_samples: int = MAX_SAMPLES):
        self._records: deque = deque(maxlen=max_records)
        self._samples: deque = deque(maxlen=max_samples)
        self._lock = threading.Lock()
        self._next_index = 1
        self.records_version = 0          # bumps when a request finishes (charts redraw then)

    def next_index(self) -> int:
        with self._lock:
            index, self._next_index = self._next_index, self._next_index + 1
            return index

    def add_record(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)
            self.records_version += 1

    def add_sample(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def records(self) -> List[RequestRecord]:
        with self._lock:
            return list(self._records)

    def samples(self, window_s: Optional[float] = None) -> List[Sample]:
        with self._lock:
            samples = list(self._samples)
        if window_s is not None and samples:
            cutoff = samples[-1].time - window_s
            samples = [s for s in samples if s.time >= cutoff]
        return samples

    def latest_sample(self) -> Optional[Sample]:
        with self._lock:
            return self._samples[-1] if self._samples else None
