"""Preallocated scratch for the layer loop (GPU path).

Allocated once at start-up from the token budget and the model shape; every layer of every
step writes its large intermediates here instead of asking the allocator, so a long prefill
does not grow or fragment device memory. Elementwise work (norms, RoPE) and the MLP run in
slices of `slice_tokens`, which bounds the few temporaries the allocator still serves (they
are reused from its cache in steady state).
"""
from __future__ import annotations

import torch


class Workspace:
    def __init__(self, model, max_tokens: int, slice_tokens: int, device, dtype):
        cfg = model.config
        heads, kv_heads, head_dim = model.dims
        hidden, inter = cfg.hidden_size, cfg.intermediate_size
        self.max_tokens, self.slice_tokens = max_tokens, min(slice_tokens, max_tokens)
        make = lambda *shape: torch.empty(*shape, device=device, dtype=dtype)
        self.residual = make(max_tokens, hidden)
        self.hidden = make(max_tokens, hidden)
        self.qkv = make(max_tokens, (heads + 2 * kv_heads) * head_dim)
        self.attn = make(max_tokens, heads * head_dim)
        self.sublayer_out = make(max_tokens, hidden)         # a sublayer's output before the residual add
        self.gate_up = make(self.slice_tokens, 2 * inter)
        self.act = make(self.slice_tokens, inter)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in
                   (self.residual, self.hidden, self.qkv, self.attn, self.sublayer_out, self.gate_up, self.act))

    def slices(self, num_tokens: int):
        for start in range(0, num_tokens, self.slice_tokens):
            yield start, min(num_tokens, start + self.slice_tokens)
