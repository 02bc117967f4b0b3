"""What the engine hands back to callers: RequestOutput and friends (vLLM's shape)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional


@dataclass
class Logprob:
    logprob: float
    rank: int
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    finish_reason: Optional[str] = None          # "stop", "length", "abort", "error" or None
    stop_reason: Optional[object] = None         # the stop string / token id that ended it
    logprobs: Optional[List[Dict[int, Logprob]]] = None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: Optional[float] = None
    first_token_time: Optional[float] = None
    second_token_time: Optional[float] = None
    finished_time: Optional[float] = None
    last_token_time: Optional[float] = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    num_computed_prompt_tokens: int = 0          # prefill progress, for progress bars
    num_generated_tokens: int = 0
    num_preemptions: int = 0

    @property
    def ttft(self) -> Optional[float]:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def queue_time(self) -> Optional[float]:
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time

    @property
    def prefill_time(self) -> Optional[float]:
        if self.first_token_time is None or self.first_scheduled_time is None:
            return None
        return self.first_token_time - self.first_scheduled_time

    @property
    def first_decode_time(self) -> Optional[float]:
        if self.second_token_time is None or self.first_token_time is None:
            return None
        return self.second_token_time - self.first_token_time

    @property
    def prefill_tokens_per_s(self) -> Optional[float]:
        t = self.prefill_time
        computed = self.num_prompt_tokens - self.num_cached_tokens
        return computed / t if t and t > 0 else None

    @property
    def decode_tokens_per_s(self) -> Optional[float]:
        """Tokens after the first one, over the time since the first one."""
        if self.first_token_time is None or self.num_generated_tokens < 2:
            return None
        end = self.finished_time or self.last_token_time
        span = end - self.first_token_time if end else 0.0
        return (self.num_generated_tokens - 1) / span if span > 0 else None

    def as_dict(self) -> dict:
        keys = ["arrival_time", "first_scheduled_time", "first_token_time", "finished_time",
                "num_prompt_tokens", "num_cached_tokens", "num_computed_prompt_tokens",
                "num_generated_tokens", "num_preemptions", "ttft", "queue_time",
                "prefill_time", "first_decode_time", "prefill_tokens_per_s",
                "decode_tokens_per_s"]
        return {k: getattr(self, k) for k in keys}


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    num_cached_tokens: int
    metrics: RequestMetrics
    error: Optional[str] = None

    @property
    def progress(self) -> float:
        """Fraction of the prompt already read (prefill progress), 0..1."""
        n = self.metrics.num_prompt_tokens
        return 1.0 if n == 0 else min(1.0, self.metrics.num_computed_prompt_tokens / n)
