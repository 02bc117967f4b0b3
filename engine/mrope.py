"""Multimodal rotary positions (M-RoPE) of Qwen2-VL / Qwen2.5-VL.

Each token has three position ids (temporal, height, width). Text tokens use the same id
on all three axes, counting up by one. An image's merged patches at grid cell (t, y, x) get
(start + t, start + y, start + x), where start is the position after the preceding text; the
text after the image resumes at start + max(grid_h, grid_w) / merge. (This is transformers'
`get_rope_index` for images.) Generated token i has position i + delta on every axis, where
delta = max prompt position + 1 - prompt length (<= 0).

The rotary dimensions are split into three sections (config `mrope_section`, summing to
head_dim / 2); section s rotates by the position on axis s.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from .multimodal import NUM_SEPARATORS


def mrope_positions(num_tokens: int, items: Sequence, merge_size: int) -> Tuple[torch.Tensor, int]:
    """([3, num_tokens] int64 positions, delta) for a prompt whose images are `items`."""
    pieces: List[torch.Tensor] = []
    next_pos, done = 0, 0
    for item in sorted(items, key=lambda it: it.offset):
        first_patch = item.offset + 1                       # after <|vision_start|>
        text = first_patch - done
        pieces.append((torch.arange(text) + next_pos).expand(3, -1))
        next_pos += text
        t, h, w = item.data.grid_thw
        gh, gw = h // merge_size, w // merge_size
        assert t * gh * gw == item.length - NUM_SEPARATORS, "grid and placeholder count disagree"
        tt, yy, xx = torch.meshgrid(torch.arange(t), torch.arange(gh), torch.arange(gw), indexing="ij")
        pieces.append(torch.stack([tt, yy, xx]).reshape(3, -1) + next_pos)
        next_pos += max(gh, gw)
        done = item.end - 1                                 # <|vision_end|> is text again
    pieces.append((torch.arange(num_tokens - done) + next_pos).expand(3, -1))
    positions = torch.cat(pieces, dim=1)
    return positions, int(positions.max()) + 1 - num_tokens


def positions_for(request, start: int, end: int) -> torch.Tensor:
    """[3, end - start] positions of tokens [start, end) of a request."""
    table = request.mrope_positions
    prompt_len = request.num_prompt_tokens
    if table is None:                                       # text only: plain positions
        return torch.arange(start, end).expand(3, -1)
    if end <= prompt_len:
        return table[:, start:end]
    generated = (torch.arange(max(start, prompt_len), end) + request.mrope_delta).expand(3, -1)
    if start >= prompt_len:
        return generated
    return torch.cat([table[:, start:], generated], dim=1)


class MropeRows:
    """cos/sin rows for 3-axis positions, from the runner's 1-D RotaryTable (built once)."""

    def __init__(self, rope_table, mrope_section: Sequence[int]):
        half = rope_table.rotary_dim // 2
        if sum(mrope_section) != half:
            raise ValueError(f"mrope_section {list(mrope_section)} must sum to head_dim/2 = {half}")
        axis = torch.cat([torch.full((n,), i) for i, n in enumerate(mrope_section)])
        self.table = rope_table
        # Column j of cos/sin takes its row from axis axis_of_column[j] (both halves alike).
        self.axis_of_column = torch.cat([axis, axis]).to(rope_table.cos.device)

    def gather(self, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """positions [3, T] on the device -> cos, sin [T, 1, rotary_dim]."""
        index = self.axis_of_column.view(1, 1, -1).expand(1, positions.shape[1], -1)
        cos = self.table.cos[positions].gather(0, index).squeeze(0)
        sin = self.table.sin[positions].gather(0, index).squeeze(0)
        return cos.unsqueeze(1), sin.unsqueeze(1)
