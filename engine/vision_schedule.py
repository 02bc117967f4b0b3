"""How a prefill chunk that reaches an image gets its two resources: vision rows and KV blocks.

An image is atomic for the encoder: encoded whole, once, in the step of the first chunk that
covers any of its positions. Later chunks may split the image's positions across steps; each
reads its slice of the encoded rows.

Why not encode at admission? A request may spend many steps reading text before its image;
holding the image's rows all that time would shrink the pool for everyone. Encoding at the
first covering chunk keeps rows alive only from the step that needs them to the step that
writes their last KV entry.

No deadlock (the article's second failure), by design:
  1. Rows for an image are reserved only in the same scheduling decision that allocates the
     KV blocks through the image's last position: both or neither. The engine loop is one
     thread, so nothing changes between the check and the grant.
  2. So a request holding vision rows never needs another KV block before the image is fully
     in the KV cache: it needs only step budget, which every step renews, and holders are
     scheduled before other prefills. It releases the rows within a bounded number of steps
     (or sooner, if preempted: preemption frees both resources).
  3. A request waiting for rows may hold KV blocks of its earlier text, but it waits only on
     holders, and holders wait on nothing (2). The wait-for graph has no cycle.
  4. The pool holds at least the largest admissible image (checked at start-up; larger
     images are refused at submission), so a waiter fits once the holders drain. After one
     request is refused rows in a step, no later request may take new rows in that step, so
     waiters are served in order and a large image is not starved by small ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .request import MultiModalItem, Request
from .vision_cache import VisionCache


@dataclass
class ImagePlan:
    num_tokens: int                  # chunk length; stops before an image that does not fit
    kv_tokens: int                   # tokens to allocate KV for: through the last new image
    new_items: List[MultiModalItem] = field(default_factory=list)
    blocked: bool = False            # an image in reach could not get rows this step


def plan_images(cache: VisionCache, request: Request, num_new: int, may_reserve: bool) -> ImagePlan:
    """Shape the chunk [num_computed, num_computed + num_new) around the request's images."""
    start = request.num_computed_tokens
    end = start + num_new
    kv_end = start
    new_items: List[MultiModalItem] = []
    free = cache.num_free_tokens
    blocked = False
    for item in request.mm_items:                    # sorted by offset, non-overlapping
        if item.end <= start or item.offset >= end or cache.holds(item):
            continue
        if not may_reserve or item.length > free:
            end = max(start, item.offset)            # read the text up to the image, no further
            blocked = True
            break
        new_items.append(item)
        free -= item.length
        kv_end = max(kv_end, item.end)               # KV through the image's last position
    return ImagePlan(end - start, max(kv_end, end) - start, new_items, blocked)


def reserve_images(cache: Optional[VisionCache], plan: ImagePlan) -> None:
    """Grant the plan's rows (after its KV blocks were allocated: both or neither).
    A plan without new images (always so for text models) touches nothing."""
    for item in plan.new_items:
        cache.reserve(item)
