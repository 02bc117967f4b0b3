"""HTML for the pre-send check, the request card, forecast accuracy and the status line.

Elements carry ids and data-* attributes (lr-ttft data-seconds, lr-cache-badge data-state,
lr-progress data-progress) so tests can read numbers without parsing prose.
"""
from __future__ import annotations

import html
import statistics
from typing import List, Optional

from .format import fmt_bytes, fmt_error, fmt_eta, fmt_rate, fmt_seconds
from .metrics import RequestRecord, Sample, cache_state
from .plan import Plan

BADGE_TEXT = {"cold": "COLD", "warm": "WARM", "partial": "PARTLY WARM", "pending": "…"}


def esc(text) -> str:
    return html.escape(str(text))


# --- before sending ---------------------------------------------------------------------
def forecast_text(plan: Plan) -> str:
    f = plan.forecast
    if f is None or not plan.num_tokens:
        return ""
    basis = "prior estimate" if f.num_samples == 0 else f"fitted to {f.num_samples} measured prefills"
    if f.is_warm:
        return (f"Forecast TTFT <b>~{fmt_seconds(f.warm_seconds)}</b> "
                f"<span class='lr-badge lr-warm'>WARM</span> the cache holds {f.cached_tokens:,} "
                f"of {f.num_tokens:,} tokens · cold would be ~{fmt_seconds(f.cold_seconds)} "
                f"<span class='lr-muted'>({basis})</span>")
    cached = (f"only {f.cached_tokens:,} of {f.num_tokens:,} tokens cached" if f.cached_tokens
              else "nothing cached")
    return (f"Forecast TTFT <b>~{fmt_seconds(f.expected_seconds)}</b> "
            f"<span class='lr-badge lr-cold'>COLD</span> {cached} "
            f"<span class='lr-muted'>({basis}; follow-ups on the same document will be warm)</span>")


def precheck_html(plan: Optional[Plan]) -> str:
    if plan is None:
        return "<div id='lr-precheck' class='lr-precheck'></div>"
    share = min(1.0, plan.num_tokens / plan.budget) if plan.budget > 0 else 1.0
    over = plan.over_by > 0
    what = "Conversation so far" if plan.empty else "Prompt"
    parts = [f"<div class='lr-meter{' lr-meter-over' if over else ''}'>"
             f"<div style='width:{share * 100:.1f}%'></div></div>",
             f"<div>{what}: <b id='lr-token-count' data-tokens='{plan.num_tokens}'>"
             f"{plan.num_tokens:,}</b> / {plan.budget:,} tokens "
             f"<span class='lr-muted'>({plan.max_model_len:,}-token context − {plan.reserve:,} "
             f"for the answer)</span></div>"]
    if not plan.empty and not plan.errors:
        parts.append(f"<div>{forecast_text(plan)}</div>")
    if plan.over_by_before_truncation and plan.truncated and not over:
        parts.append(f"<div class='lr-warn'>✂ Over the limit by "
                     f"{plan.over_by_before_truncation:,} tokens: the documents will be cut to "
                     f"fit, as you asked.</div>")
    for note in plan.notes:
        parts.append(f"<div class='lr-note'>{esc(note)}</div>")
    reason = plan.blocking_reason() if not plan.empty else None
    if reason:
        parts.append(f"<div class='lr-error' id='lr-precheck-error'>⚠ {esc(reason)}</div>")
    state = "over" if over else ("error" if plan.errors else "ok")
    return f"<div id='lr-precheck' class='lr-precheck' data-state='{state}'>{''.join(parts)}</div>"


# --- the request card -------------------------------------------------------------------
def badge(state: str, cached: int, prompt: int) -> str:
    return (f"<span id='lr-cache-badge' class='lr-badge lr-{state}' data-state='{state}'>"
            f"{BADGE_TEXT[state]}</span> <span class='lr-muted' id='lr-cached'>"
            f"{cached:,} / {prompt:,} prompt tokens cached</span>")


def split_bar(queue: Optional[float], prefill: Optional[float], first_decode: Optional[float]) -> str:
    parts = [("queue", queue or 0.0), ("prefill", prefill or 0.0), ("first decode", first_decode or 0.0)]
    total = sum(v for _, v in parts) or 1.0
    bars = "".join(f"<div class='lr-seg lr-seg-{i}' style='width:{max(0.5, 100 * v / total):.1f}%' "
                   f"title='{name} {fmt_seconds(v)}'></div>" for i, (name, v) in enumerate(parts))
    legend = " · ".join(f"<span class='lr-dot lr-seg-{i}'></span>{name} "
                        f"<b>{fmt_seconds(v) if v else '–'}</b>" for i, (name, v) in enumerate(parts))
    return f"<div class='lr-split'>{bars}</div><div class='lr-legend'>{legend}</div>"


def stat(label: str, value: str, elem_id: str = "") -> str:
    ident = f" id='{elem_id}'" if elem_id else ""
    return f"<div class='lr-stat'><span>{label}</span><b{ident}>{value}</b></div>"


def request_card(view, record: Optional[RequestRecord] = None) -> str:
    """The running request (a chat.LiveView), or else the last finished one."""
    record = (view.record if view is not None else None) or record
    if view is None and record is None:
        return ("<div class='lr-card' id='lr-request' data-phase='idle'><div class='lr-card-head'>"
                "<b>This request</b></div><p class='lr-muted'>No request yet. Attach a document "
                "and ask: time to first token, cache state and speeds appear here.</p></div>")
    phase = view.phase if view is not None else (
        "stopped" if record.finish_reason == "abort" else "done")
    head = f"<b>Request #{record.index}</b>" if record else "<b>This request</b>"
    if record is not None:
        prompt, cached = record.prompt_tokens, record.cached_tokens
        state = record.cache_state
    else:
        prompt, cached = view.prompt_tokens, view.cached_tokens
        state = "pending" if phase == "queued" else cache_state(cached, prompt)
    out = [f"<div class='lr-card' id='lr-request' data-phase='{phase}'>",
           f"<div class='lr-card-head'>{head} {badge(state, cached, prompt)}</div>"]
    if view is not None and phase in ("queued", "reading"):
        pct = 100 * view.progress
        eta = f" · {fmt_eta(view.eta)}" if view.eta is not None else ""
        label = ("waiting in the engine queue" if phase == "queued" else
                 f"prefill {view.done_tokens:,} / {view.prompt_tokens:,} tokens · {pct:.0f}%{eta}")
        out.append(f"<div class='lr-progress' id='lr-progress' data-progress='{view.progress:.3f}'>"
                   f"<div style='width:{pct:.1f}%'></div></div>"
                   f"<div class='lr-muted'>{label} · {fmt_seconds(view.elapsed)} elapsed</div>")
    ttft = record.ttft if record else (view.ttft if view else None)
    forecast = record.forecast_ttft if record else (
        view.forecast.expected_seconds if view and view.forecast else None)
    ttft_attr = f"{ttft:.4f}" if ttft is not None else ""
    fc = ""
    if forecast is not None:
        err = f" ({fmt_error(record.forecast_error)})" if record and record.forecast_error is not None else ""
        fc = f"<span class='lr-muted'>forecast {fmt_seconds(forecast)}{err}</span>"
    out.append(f"<div class='lr-big'><span>TTFT</span> <b id='lr-ttft' data-seconds='{ttft_attr}'>"
               f"{fmt_seconds(ttft)}</b> {fc}</div>")
    if record is not None:
        out.append(split_bar(record.queue_time, record.prefill_time, record.first_decode_time))
        out.append("<div class='lr-grid'>" + "".join([
            stat("prefill", fmt_rate(record.prefill_tokens_per_s), "lr-prefill-rate"),
            stat("decode", fmt_rate(record.decode_tokens_per_s), "lr-decode-rate"),
            stat("prompt", f"{record.prompt_tokens:,}"),
            stat("cached", f"{record.cached_tokens:,}"),
            stat("generated", f"{record.generated_tokens:,}")]) + "</div>")
    elif view is not None and phase == "answering":
        out.append("<div class='lr-grid'>" + "".join([
            stat("decode", fmt_rate(view.decode_tokens_per_s), "lr-decode-rate"),
            stat("generated", f"{view.generated_tokens:,}")]) + "</div>")
    if view is not None and view.error:
        out.append(f"<div class='lr-error'>⚠ {esc(view.error)}</div>")
    out.append("</div>")
    return "".join(out)


# --- forecast accuracy and status -------------------------------------------------------
def accuracy_table(records: List[RequestRecord], limit: int = 6) -> str:
    rows = [r for r in records if r.ttft is not None and r.forecast_ttft][-limit:]
    if not rows:
        return ("<div class='lr-card' id='lr-accuracy'><b>Forecast vs measured</b>"
                "<p class='lr-muted'>Each answered request is compared with the TTFT forecast "
                "shown before sending.</p></div>")
    body = "".join(
        f"<tr><td>#{r.index}</td><td>{r.prompt_tokens:,}</td><td>{r.cached_tokens:,}</td>"
        f"<td>{fmt_seconds(r.forecast_ttft)}</td><td>{fmt_seconds(r.ttft)}</td>"
        f"<td class='lr-err'>{fmt_error(r.forecast_error)}</td></tr>" for r in reversed(rows))
    typical = statistics.median(abs(r.forecast_error) for r in rows) * 100
    return ("<div class='lr-card' id='lr-accuracy'><b>Forecast vs measured</b> "
            f"<span class='lr-muted'>median error {typical:.0f}%</span><table class='lr-table'>"
            "<tr><th>req</th><th>prompt</th><th>cached</th><th>forecast</th><th>TTFT</th>"
            f"<th>error</th></tr>{body}</table></div>")


def status_line(sample: Optional[Sample]) -> str:
    if sample is None:
        return "<span id='lr-status'></span>"
    busy = "busy" if sample.num_running or sample.num_waiting else "idle"
    hit = f"{sample.hit_rate * 100:.0f}%" if sample.hit_rate is not None else "–"
    return (f"<span id='lr-status' class='lr-status-{busy}'>engine {busy} · "
            f"{sample.num_running} running, {sample.num_waiting} waiting · KV "
            f"{sample.kv_used_fraction * 100:.0f}% in use · prefix hits {hit} · process "
            f"{fmt_bytes(sample.process_rss)}</span>")
