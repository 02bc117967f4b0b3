"""One browser tab's chat: turns (question + attached documents + answer) and what is running.

Invariant: once a turn has been sent, its documents' text and its question never change, so
the prompt of every later turn starts with byte-identical text and hits the prefix cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple


@dataclass
class Document:
    name: str
    kind: str                          # "text" or "image"
    text: str = ""                     # exactly what goes into the prompt
    image: Any = None                  # PIL image for kind == "image"
    num_tokens: int = 0                # tokens of `text` on its own
    notes: List[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    truncated: Optional[Tuple[int, int]] = None    # (kept tokens, original tokens)
    path: Optional[str] = None         # the uploaded file (images are shown in the chat)

    def summary(self) -> str:
        """Short description for the chat, e.g. "11 pages · 2,794 tokens"."""
        bits = []
        if self.meta.get("pages"):
            bits.append(f"{self.meta['pages']} pages")
        if self.kind == "image" and self.meta.get("width"):
            bits.append(f"{self.meta['width']}×{self.meta['height']}")
        if self.kind == "text":
            bits.append(f"{self.num_tokens:,} tokens")
        if self.truncated:
            bits.append(f"truncated to {self.truncated[0]:,} of {self.truncated[1]:,} tokens")
        return " · ".join(bits)


@dataclass
class Turn:
    question: str                      # as sent (a default question when the user typed none)
    documents: List[Document] = field(default_factory=list)
    answer: str = ""
    status: str = "pending"            # pending | queued | reading | answering | done | stopped | error
    error: Optional[str] = None
    record: Any = None                 # metrics.RequestRecord once finished
    typed_text: str = ""               # what the user typed, to give back if the send fails
    files: List[str] = field(default_factory=list)   # uploaded paths, ditto

    @property
    def in_history(self) -> bool:
        """Finished turns (stopped ones with their partial answer) are part of the context."""
        return self.status == "done" or (self.status == "stopped" and bool(self.answer))


@dataclass
class Conversation:
    turns: List[Turn] = field(default_factory=list)
    pending: Any = None                # chat.PendingRequest accepted but not yet submitted
    active_request_id: Optional[str] = None
    last_view: Any = None              # newest chat.LiveView, for redrawing after Stop

    def history(self) -> List[Turn]:
        return [t for t in self.turns if t.in_history]

    @property
    def busy(self) -> bool:
        return self.pending is not None or self.active_request_id is not None
