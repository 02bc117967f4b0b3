"""Gradio event handlers: ChatService results -> component updates.

Every handler catches what it can and turns it into a message for the user; an exception
escaping to Gradio would show a generic error and could lose what the user typed.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import gradio as gr

from . import charts
from .chat import ChatService
from .conversation import Conversation
from .metrics import MetricsHistory
from .plan import Settings
from .render_chat import chat_messages
from .render_panel import accuracy_table, precheck_html, request_card, status_line

log = logging.getLogger("longread.ui")
CHART_WINDOW_S = 180


def settings_from(truncate, max_new_tokens, temperature=0.0) -> Settings:
    return Settings(max_new_tokens=int(max_new_tokens or 512), temperature=float(temperature or 0.0),
                    truncate=bool(truncate))


def idle_textbox():
    return gr.MultimodalTextbox(submit_btn=True, stop_btn=False, interactive=True)


def busy_textbox():
    return gr.MultimodalTextbox(value=None, submit_btn=False, stop_btn=True)


class Handlers:
    def __init__(self, service: ChatService, history: MetricsHistory):
        self.service, self.history = service, history

    def last_record(self):
        records = self.history.records()
        return records[-1] if records else None

    # --- typing: the live pre-send check ---------------------------------------------------
    def preview(self, message, conversation: Conversation, truncate, max_new_tokens):
        try:
            plan = self.service.preview(conversation, message, settings_from(truncate, max_new_tokens))
        except Exception:
            log.exception("preview failed")
            return gr.skip(), gr.skip()
        show_truncate = plan.over_by_before_truncation > 0 and plan.truncation_possible
        return precheck_html(plan), gr.Checkbox(visible=show_truncate or bool(truncate))

    # --- send ----------------------------------------------------------------------------
    def accept(self, message, conversation: Conversation, truncate, max_new_tokens, temperature):
        """Queue the message, or explain why not and leave the textbox as it is."""
        try:
            plan = self.service.accept(conversation, message,
                                       settings_from(truncate, max_new_tokens, temperature))
        except Exception as exc:
            log.exception("accept failed")
            gr.Warning(f"Could not send the message: {exc}")
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        if not plan.sendable:
            gr.Warning(plan.blocking_reason())
            return gr.skip(), gr.skip(), precheck_html(plan), gr.skip()
        return (busy_textbox(), chat_messages(conversation, plan.turn), precheck_html(None),
                gr.Checkbox(value=False, visible=False))

    def respond(self, conversation: Conversation):
        """Stream the answer into the chat and the request card. On failure the user's text
        and files go back into the textbox."""
        turn = conversation.pending.turn if conversation.pending else None
        if turn is None:
            # Nothing was accepted. A generator that yields nothing makes Gradio set every
            # output to None (the textbox would silently lose its files), so skip explicitly.
            yield gr.skip(), gr.skip(), gr.skip()
            return
        view = None
        try:
            for view in self.service.respond(conversation):
                conversation.last_view = view
                yield chat_messages(conversation, turn, view), request_card(view), gr.skip()
        except Exception as exc:
            log.exception("respond failed")
            if turn is not None:
                turn.status, turn.error = "error", f"{type(exc).__name__}: {exc}"
        if turn is not None and turn.status == "error":
            restored = {"text": turn.typed_text, "files": turn.files}
            gr.Warning(f"The request failed: {turn.error}. Your message is back in the box.")
            yield (chat_messages(conversation), request_card(view, self.last_record()),
                   gr.MultimodalTextbox(value=restored))

    def stop(self, conversation: Conversation):
        """Abort in the engine right away; Gradio also cancels (closes) the streaming event."""
        running = conversation.busy
        self.service.stop(conversation)
        card = gr.skip()
        for turn in conversation.turns[-1:]:
            if running and turn.status in ("queued", "reading", "answering", "pending"):
                turn.status = "stopped"
                if conversation.last_view is not None:
                    card = request_card(dataclasses.replace(conversation.last_view, phase="stopped"))
        return chat_messages(conversation), card, idle_textbox()

    def new_chat(self, conversation: Conversation):
        self.service.new_chat(conversation)
        return [], idle_textbox()

    # --- the once-a-second refresh -----------------------------------------------------------
    def tick(self, seen_version: Optional[int]):
        sample = self.history.latest_sample()
        samples = self.history.samples(CHART_WINDOW_S)
        version = self.history.records_version
        records = self.history.records()
        # The TTFT plot is re-sent every tick: Gradio 6.31's plot draws the value it had before
        # the latest update when the update also changes props (sort, y_lim), so a single
        # update per new request would leave it one request behind.
        ttft = ttft_plot_update(records)
        accuracy = gr.skip() if seen_version == version else accuracy_table(records)
        return (status_line(sample), charts.plot_value(charts.memory_frame(sample)),
                charts.plot_value(charts.host_frame(samples)),
                charts.plot_value(charts.kv_frame(samples)), ttft, accuracy, version)

    # --- API: one call = send + stream -------------------------------------------------------
    def ask(self, message, truncate, max_new_tokens, temperature, conversation: Conversation):
        """For API clients: yields (answer so far, report dict) until the answer is complete."""
        plan = self.service.accept(conversation, message,
                                   settings_from(truncate, max_new_tokens, temperature))
        if not plan.sendable:
            raise gr.Error(plan.blocking_reason())
        turn = plan.turn
        for view in self.service.respond(conversation):
            yield turn.answer, report(view)

    def stats(self) -> dict:
        records = self.history.records()
        sample = self.history.latest_sample()
        return {"engine": self.service.engine.stats(),
                "requests": [r.as_dict() for r in records],
                "sample": dict(sample.__dict__) if sample else None,
                "forecast_model": [float(v) for v in self.service.model.theta],
                "forecast_samples": self.service.model.num_samples}


def ttft_plot_update(records):
    recent = records[-charts.TTFT_RECENT:]
    if not recent:
        return gr.skip()
    df = charts.ttft_frame(recent)
    top = float(df["TTFT (s)"].max()) if len(df) else 1.0
    # Request labels in request order (not string order); the y axis always starts at 0 so
    # warm requests show as the near-zero points they are.
    return gr.ScatterPlot(value=df, sort=[charts.request_label(r) for r in recent],
                          y_lim=[0, max(0.1, top * 1.15)])


def report(view) -> dict:
    out = {"phase": view.phase, "prompt_tokens": view.prompt_tokens,
           "cached_tokens": view.cached_tokens, "progress": round(view.progress, 4),
           "elapsed": view.elapsed, "eta": view.eta, "ttft": view.ttft,
           "generated_tokens": view.generated_tokens, "error": view.error,
           "forecast": None, "record": view.record.as_dict() if view.record else None}
    if view.forecast is not None:
        f = view.forecast
        out["forecast"] = {"cold": f.cold_seconds, "warm": f.warm_seconds,
                           "cached_tokens": f.cached_tokens, "expected": f.expected_seconds}
    return out
