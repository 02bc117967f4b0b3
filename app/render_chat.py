"""Conversation -> Chatbot messages (Gradio's messages format: role + markdown content)."""
from __future__ import annotations

from typing import List, Optional

from .conversation import Conversation, Turn
from .format import fmt_eta, fmt_rate, fmt_seconds

KIND_LABEL = {"text": "Attached", "image": "Image"}


def user_bubble(turn: Turn) -> str:
    lines = []
    for doc in turn.documents:
        summary = doc.summary()
        lines.append(f"{KIND_LABEL.get(doc.kind, 'Attached')} **{doc.name}**" + (f" · {summary}" if summary else ""))
        lines += [f"<small>{note}</small>" for note in doc.notes]
    lines.append(turn.question if turn.typed_text.strip() else f"*{turn.question}*")
    return "\n\n".join(lines)


def progress_line(view) -> str:
    if view is None or view.phase == "queued":
        return "Waiting for the engine…"
    pct = int(100 * view.progress)
    eta = f" · {fmt_eta(view.eta)}" if view.eta is not None else ""
    cached = f" ({view.cached_tokens:,} from cache)" if view.cached_tokens else ""
    return (f"Reading {view.prompt_tokens:,} tokens{cached}: {view.done_tokens:,} done, "
            f"{pct}%{eta}")


def footer(turn: Turn) -> str:
    r = turn.record
    if r is None:
        return ""
    bits = []
    if r.ttft is not None:
        bits.append(f"TTFT {fmt_seconds(r.ttft)} · {r.cache_state}")
    bits.append(f"{r.generated_tokens:,} tokens")
    if r.decode_tokens_per_s:
        bits.append(f"{fmt_rate(r.decode_tokens_per_s)}")
    return "<small>" + " · ".join(bits) + "</small>"


def assistant_bubble(turn: Turn, view=None) -> str:
    if turn.status in ("queued", "reading", "pending"):
        return progress_line(view)
    text = turn.answer
    if turn.status == "stopped":
        text = (text + "\n\n" if text else "") + "*■ Stopped.*"
    elif turn.status == "error":
        text = (text + "\n\n" if text else "") + f"⚠ {turn.error}"
    elif turn.status == "done":
        text = (text or "*(empty answer)*") + "\n\n" + footer(turn)
    return text or "…"


def chat_messages(conversation: Conversation, live_turn: Optional[Turn] = None,
                  view=None) -> List[dict]:
    messages = []
    for turn in conversation.turns:
        messages.append({"role": "user", "content": user_bubble(turn)})
        for doc in turn.documents:
            if doc.kind == "image" and doc.path:
                messages.append({"role": "user", "content": {"path": doc.path}})
        messages.append({"role": "assistant",
                         "content": assistant_bubble(turn, view if turn is live_turn else None)})
    return messages
