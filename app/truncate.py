"""Cutting documents to fit the context window, only when the user asked for it.

Over the limit, the overflow is taken from the largest documents first (water-filling: every
document keeps min(its size, a common cap)), each cut at a token boundary and marked with a
note the model and the user can both see.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Sequence

from .conversation import Document

CountTokens = Callable[[str], int]
NOTE = ("\n[… Longread truncated this document to fit the context window: kept the first "
        "{kept:,} of {total:,} tokens …]")
NOTE_TOKENS = 40                     # room the note itself takes, generously


def water_fill(sizes: Sequence[int], allowed: int) -> List[int]:
    """Per-item budgets summing to at most `allowed`, taking from the largest items first."""
    if sum(sizes) <= allowed:
        return list(sizes)
    allowed = max(0, allowed)
    remaining, items = allowed, sorted(range(len(sizes)), key=lambda i: sizes[i])
    budgets = [0] * len(sizes)
    for rank, i in enumerate(items):
        cap = remaining // (len(items) - rank)          # equal share of what is left
        budgets[i] = min(sizes[i], cap)
        remaining -= budgets[i]
    return budgets


def cut_to_tokens(text: str, max_tokens: int, count_tokens: CountTokens) -> str:
    """Longest prefix of `text` with at most `max_tokens` tokens (binary search on length)."""
    if max_tokens <= 0:
        return ""
    if count_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)                # invariant: text[:lo] fits, text[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return text[:lo]


def truncate_documents(documents: Sequence[Document], overflow: int,
                       count_tokens: CountTokens) -> List[Document]:
    """New documents whose text tokens shrink by at least `overflow` in total. Raises
    ValueError when even empty documents would not make room."""
    text_docs = [i for i, d in enumerate(documents) if d.kind == "text" and d.num_tokens > 0]
    sizes = [documents[i].num_tokens for i in text_docs]
    room = sum(sizes) - overflow - NOTE_TOKENS * len(text_docs)
    if not text_docs or room <= 0:
        raise ValueError("the documents cannot be cut enough to fit")
    budgets = water_fill(sizes, room)
    out = list(documents)
    for i, budget in zip(text_docs, budgets):
        doc = documents[i]
        if budget >= doc.num_tokens:
            continue
        total = doc.truncated[1] if doc.truncated else doc.num_tokens
        text = cut_to_tokens(doc.text, budget, count_tokens) + NOTE.format(kept=budget, total=total)
        out[i] = dataclasses.replace(doc, text=text, num_tokens=count_tokens(text),
                                     truncated=(budget, total))
    return out
