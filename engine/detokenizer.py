"""Incremental detokenization with stop strings.

Text is emitted only once it is stable: a token that ends mid-way through a multi-byte
character decodes to U+FFFD and is held back until the character completes. Decoding a
sliding window (prefix_offset..) keeps the per-token cost constant.
"""
from __future__ import annotations

from typing import List, Optional, Sequence


class IncrementalDetokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = True, stop: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = [s for s in stop if s]
        self.token_ids: List[int] = []
        self.text = ""
        self.prefix_offset = 0
        self.read_offset = 0

    def _decode(self, ids: List[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def add(self, token_id: int) -> Optional[str]:
        """Append one token. Returns the matched stop string if the text now contains one
        (the text is truncated before it), else None."""
        self.token_ids.append(token_id)
        prefix = self._decode(self.token_ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.token_ids[self.prefix_offset:])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return None                              # incomplete character or nothing new
        delta = full[len(prefix):]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        start = max(0, len(self.text) - max((len(s) for s in self.stop), default=0))
        self.text += delta
        for s in self.stop:
            idx = self.text.find(s, start)
            if idx != -1:
                self.text = self.text[:idx]
                return s
        return None

    def stable_text(self, finished: bool) -> str:
        """Text safe to show now: while running, hold back a possible stop-string prefix."""
        if finished or not self.stop:
            return self.text
        hold = max(len(s) for s in self.stop) - 1
        for n in range(min(hold, len(self.text)), 0, -1):
            tail = self.text[-n:]
            if any(s.startswith(tail) for s in self.stop):
                return self.text[:-n]
        return self.text
