"""Uploaded files -> Documents, through app.attachments, with a small cache.

The pre-send preview runs on every keystroke; the cache makes sure a 30-page PDF is parsed and
tokenized once per upload, not once per key. Keyed by (path, size, mtime): Gradio gives each
upload its own path.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, List, Sequence, Tuple

from app.attachments import AttachmentError, AttachmentLimits, load_attachment

from .conversation import Document

MAX_CACHED = 32


@dataclass
class LoadResult:
    documents: List[Document] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)      # user-facing, one per failed file


def display_name(path: str) -> str:
    return os.path.basename(path)


class DocumentLoader:
    def __init__(self, limits: AttachmentLimits, count_tokens: Callable[[str], int]):
        self.limits = limits
        self.count_tokens = count_tokens
        self._cache: "OrderedDict[tuple, object]" = OrderedDict()
        self._lock = threading.Lock()

    def _key(self, path: str) -> Tuple:
        try:
            st = os.stat(path)
            return (path, st.st_size, st.st_mtime_ns)
        except OSError:
            return (path, None, None)

    def load_one(self, path: str) -> Document:
        """A Document for one upload; raises AttachmentError (user-facing message)."""
        key = self._key(path)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is None:
            cached = self._load_uncached(path)
            with self._lock:
                self._cache[key] = cached
                while len(self._cache) > MAX_CACHED:
                    self._cache.popitem(last=False)
        if isinstance(cached, AttachmentError):
            raise cached
        return cached

    def _load_uncached(self, path: str):
        try:
            att = load_attachment(path, limits=self.limits)
        except AttachmentError as exc:
            return exc
        except Exception as exc:          # a parser bug must not take the chat down
            return AttachmentError(f"“{display_name(path)}” could not be read ({type(exc).__name__}).")
        num_tokens = self.count_tokens(att.text) if att.kind == "text" and att.text else 0
        return Document(name=att.name, kind=att.kind, text=att.text, image=att.image,
                        num_tokens=num_tokens, notes=list(att.notes), meta=dict(att.meta),
                        path=path)

    def load(self, paths: Sequence[str]) -> LoadResult:
        result = LoadResult()
        for path in paths:
            try:
                result.documents.append(self.load_one(path))
            except AttachmentError as exc:
                result.errors.append(getattr(exc, "message", None) or str(exc))
        return result
