"""Per-request output state: sampled tokens -> text, stop conditions, RequestOutput."""
from __future__ import annotations

import copy
import queue
from typing import Optional

from .detokenizer import IncrementalDetokenizer
from .outputs import CompletionOutput, RequestOutput
from .request import Request


class RequestStream:
    """Owned by the engine loop; the caller's thread only reads `queue`."""

    def __init__(self, request: Request, tokenizer, max_model_len: int):
        self.request = request
        self.max_model_len = max_model_len
        self.detok = IncrementalDetokenizer(tokenizer, request.params.skip_special_tokens,
                                            request.params.stop)
        self.queue: "queue.Queue[RequestOutput]" = queue.Queue()

    def append_token(self, token: int, logprobs: Optional[dict], now: float) -> bool:
        """Record a sampled token; returns True if the request is now finished."""
        req, params, m = self.request, self.request.params, self.request.metrics
        req.output_token_ids.append(token)
        if req.logprobs is not None:
            req.logprobs.append(logprobs)
        m.num_generated_tokens = len(req.output_token_ids)
        if m.first_token_time is None:
            m.first_token_time = now
        elif m.second_token_time is None:
            m.second_token_time = now
        m.last_token_time = now
        if not params.ignore_eos and token in req.eos_token_ids:
            return self._finish("stop", None)
        if token in params.stop_token_ids:
            return self._finish("stop", token)
        stop_string = self.detok.add(token)
        if stop_string is not None:
            return self._finish("stop", stop_string)
        if params.max_tokens is not None and m.num_generated_tokens >= params.max_tokens:
            return self._finish("length", None)
        if req.num_tokens >= self.max_model_len:
            return self._finish("length", None)
        return False

    def _finish(self, reason: str, stop_reason) -> bool:
        self.request.finish_reason, self.request.stop_reason = reason, stop_reason
        return True

    def output(self, finished: bool) -> RequestOutput:
        req = self.request
        completion = CompletionOutput(
            index=0, text=self.detok.stable_text(finished), token_ids=list(req.output_token_ids),
            finish_reason=req.finish_reason if finished else None,
            stop_reason=req.stop_reason if finished else None,
            logprobs=list(req.logprobs) if req.logprobs is not None else None)
        return RequestOutput(request_id=req.request_id, prompt=req.prompt,
                             prompt_token_ids=req.prompt_token_ids, outputs=[completion],
                             finished=finished, num_cached_tokens=req.num_cached_tokens,
                             metrics=copy.copy(req.metrics), error=req.error)

    def publish(self, finished: bool = False) -> None:
        self.queue.put(self.output(finished))
