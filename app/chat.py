"""Message -> prompt -> engine stream, with the bookkeeping the UI shows.

ChatService is UI-free (no Gradio imports): `accept` checks and queues a message, `respond`
streams LiveView snapshots while it runs, `stop` aborts. Invariant: a request that `respond`
submitted is always finished or aborted in the engine when `respond` ends, however it ends
(finished, Stop pressed, generator closed by a cancelled Gradio event).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from engine import RequestRejected, SamplingParams

from .conversation import Conversation, Turn
from .documents import DocumentLoader
from .forecast import Forecast, PrefillModel
from .metrics import MetricsHistory, RequestRecord, record_from_output
from .plan import Plan, Settings, plan_message
from .ticking import TickingStream

log = logging.getLogger("longread.chat")
TICK_S = 0.5


@dataclass
class PendingRequest:
    plan: Plan
    settings: Settings
    turn: Turn


@dataclass
class LiveView:
    """A snapshot of the running (or just finished) request for the performance card."""
    phase: str                        # queued | reading | answering | done | stopped | error
    prompt_tokens: int
    cached_tokens: int = 0
    done_tokens: int = 0              # prompt tokens in the KV cache (cached ones included)
    elapsed: float = 0.0              # since submission
    eta: Optional[float] = None       # seconds left in the prefill
    generated_tokens: int = 0
    ttft: Optional[float] = None
    decode_tokens_per_s: Optional[float] = None
    forecast: Optional[Forecast] = None
    record: Optional[RequestRecord] = None
    error: Optional[str] = None

    @property
    def progress(self) -> float:
        return 1.0 if not self.prompt_tokens else min(1.0, self.done_tokens / self.prompt_tokens)


def has_images(plan: Plan) -> bool:
    return any(isinstance(m["content"], list) for m in plan.messages)


def submission_prompt(plan: Plan):
    """Text prompts go in as the exact token ids that were counted and forecast; prompts with
    images go in as messages, so the engine gets the images themselves."""
    if has_images(plan):
        return plan.messages
    return {"prompt": plan.prompt_text, "prompt_token_ids": plan.token_ids}


class ChatService:
    def __init__(self, engine, history: MetricsHistory, model: PrefillModel,
                 loader: DocumentLoader):
        self.engine, self.history, self.model, self.loader = engine, history, model, loader

    # --- before sending ------------------------------------------------------------------
    def preview(self, conversation: Conversation, message: Optional[dict], settings: Settings) -> Plan:
        return plan_message(self.engine, self.loader, self.model, conversation, message, settings)

    def accept(self, conversation: Conversation, message: Optional[dict], settings: Settings) -> Plan:
        """Check a message; if it can be sent, queue it as the conversation's next turn."""
        plan = self.preview(conversation, message, settings)
        if conversation.busy:
            plan.errors.insert(0, "An answer is still being written: wait for it or press Stop.")
        if plan.sendable:
            plan.turn.status = "queued"
            conversation.turns.append(plan.turn)
            conversation.pending = PendingRequest(plan, settings, plan.turn)
        return plan

    # --- sending -------------------------------------------------------------------------
    def respond(self, conversation: Conversation) -> Iterator[LiveView]:
        pending, conversation.pending = conversation.pending, None
        if pending is None:
            return
        plan, turn = pending.plan, pending.turn
        params = SamplingParams(max_tokens=pending.settings.max_new_tokens,
                                temperature=pending.settings.temperature)
        index = self.history.next_index()
        prompt = submission_prompt(plan)
        try:
            request_id = self.engine.submit(prompt, params, request_id=f"chat-{index}")
        except RequestRejected as exc:
            turn.status, turn.error = "error", str(exc)
            yield LiveView("error", plan.num_tokens, forecast=plan.forecast, error=str(exc))
            return
        conversation.active_request_id = request_id
        submitted = time.monotonic()
        stream = TickingStream(self.engine.outputs(request_id), TICK_S)
        last, last_arrival = None, submitted
        try:
            for out in stream:
                if out is not None:
                    last, last_arrival = out, time.monotonic()
                view = self._view(turn, last, plan, submitted, last_arrival)
                if last is not None and last.finished:
                    view.record = turn.record = self._finish(turn, last, plan, index)
                    view.phase = turn.status
                yield view
        finally:
            if last is None or not last.finished:
                self.engine.abort(request_id)     # closed early: free the engine's work now
                if turn.status not in ("done", "error"):
                    turn.status = "stopped"
            conversation.active_request_id = None

    def _view(self, turn: Turn, out, plan: Plan, submitted: float, arrival: float) -> LiveView:
        view = LiveView("queued", plan.num_tokens, forecast=plan.forecast,
                        elapsed=time.monotonic() - submitted)
        if out is not None:
            m = out.metrics
            view.cached_tokens = out.num_cached_tokens
            view.done_tokens = m.num_computed_prompt_tokens
            view.generated_tokens = m.num_generated_tokens
            view.ttft = m.ttft
            view.decode_tokens_per_s = m.decode_tokens_per_s
            if m.first_token_time is not None:
                view.phase = "answering"
                turn.answer = out.outputs[0].text
            elif m.first_scheduled_time is not None:
                view.phase = "reading"
                # ETA as of the last progress report, counted down smoothly between reports.
                eta = self.model.eta(plan.num_tokens, view.cached_tokens, view.done_tokens,
                                     arrival - m.first_scheduled_time)
                view.eta = max(0.0, eta - (time.monotonic() - arrival))
        # Stop is final: reports still in flight when it was pressed must not bring the turn
        # back to "reading" (the chat would show progress and never "Stopped").
        if turn.status == "stopped":
            view.phase = "stopped"
        else:
            turn.status = view.phase
        return view

    def _finish(self, turn: Turn, out, plan: Plan, index: int) -> RequestRecord:
        turn.answer = out.outputs[0].text
        reason = out.outputs[0].finish_reason
        if reason == "error" or out.error:
            turn.status, turn.error = "error", out.error or "the engine failed on this request"
        else:
            turn.status = "stopped" if reason == "abort" else "done"
        forecast = plan.forecast
        record = record_from_output(out, index, forecast.expected_seconds if forecast else None,
                                    forecast.cached_tokens if forecast else 0)
        self.history.add_record(record)
        m = out.metrics
        if m.first_token_time is not None:
            self.model.observe(m.num_prompt_tokens - out.num_cached_tokens, out.num_cached_tokens,
                               m.prefill_time)
        return record

    # --- controls ------------------------------------------------------------------------
    def stop(self, conversation: Conversation) -> None:
        """Abort what this conversation is running (the engine frees it at its next step)."""
        pending, conversation.pending = conversation.pending, None
        if pending is not None:
            pending.turn.status = "stopped"
        if conversation.active_request_id:
            self.engine.abort(conversation.active_request_id)

    def new_chat(self, conversation: Conversation) -> None:
        self.stop(conversation)
        conversation.turns.clear()
