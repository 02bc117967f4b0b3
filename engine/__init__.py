"""Longread's inference engine: paged KV cache, prefix caching, chunked prefill."""
from .config import EngineConfig, SamplingParams
from .engine import Engine
from .errors import EngineDeadError, ImageTooLargeError, PromptTooLongError, RequestRejected
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput

__all__ = ["Engine", "EngineConfig", "SamplingParams", "RequestOutput", "CompletionOutput",
           "RequestMetrics", "Logprob", "RequestRejected", "PromptTooLongError", "ImageTooLargeError",
           "EngineDeadError"]
