"""Fused elementwise kernels for the GPU layer loop (Triton): one launch instead of many.

* add_rmsnorm: x += residual_in (optional), out = RMSNorm(x) * weight — per row, fp32 math.
* rope_inplace: rotate q and k in place (rotate-half convention) from the step's cos/sin rows.
* silu_mul: act = silu(gate) * up from the MLP's fused [gate | up] rows (one read, one write).
Both work on strided views (rows of the workspace's qkv buffer), so nothing is copied.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm_kernel(x_ptr, add_ptr, w_ptr, out_ptr, stride_x, stride_add, stride_out, n_cols, eps,
                        HAS_ADD: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
    if HAS_ADD:
        x = x + tl.load(add_ptr + row * stride_add + cols, mask=ok, other=0.0)
        tl.store(x_ptr + row * stride_x + cols, x, mask=ok)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0)
    normed = (xf * rstd).to(x.dtype)                  # round like HF: normalise, cast, scale
    tl.store(out_ptr + row * stride_out + cols, w * normed, mask=ok)


def add_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor,
                add: Optional[torch.Tensor] = None) -> None:
    """x: [T, N] (updated in place when `add` is given), out: [T, N]."""
    rows, cols = x.shape
    if rows == 0:
        return
    _add_rmsnorm_kernel[(rows,)](x, add if add is not None else x, weight, out, x.stride(0),
                                 add.stride(0) if add is not None else 0, out.stride(0), cols, eps,
                                 HAS_ADD=add is not None, BLOCK=triton.next_power_of_2(cols))


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, stride_tok, stride_head, stride_cs, num_heads,
                 HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    tok = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    dims = tl.arange(0, HALF)
    ok = heads[:, None] < num_heads
    cos = tl.load(cos_ptr + tok * stride_cs + dims).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + tok * stride_cs + dims).to(tl.float32)[None, :]
    base = x_ptr + tok * stride_tok + heads[:, None] * stride_head + dims[None, :]
    x1 = tl.load(base, mask=ok, other=0.0)
    x2 = tl.load(base + HALF, mask=ok, other=0.0)
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    tl.store(base, (a * cos - b * sin).to(x1.dtype), mask=ok)
    tl.store(base + HALF, (b * cos + a * sin).to(x1.dtype), mask=ok)


def rope_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """x: [T, heads, head_dim] view (last dim contiguous); cos/sin: [T, 1, head_dim] rows
    whose two halves are equal (the table is cat(freqs, freqs))."""
    tokens, heads, head_dim = x.shape
    if tokens == 0:
        return
    block_h = min(16, triton.next_power_of_2(heads))
    grid = (tokens, triton.cdiv(heads, block_h))
    _rope_kernel[grid](x, cos, sin, x.stride(0), x.stride(1), cos.stride(0), heads,
                       HALF=head_dim // 2, BLOCK_H=block_h)


@triton.jit
def _silu_mul_kernel(gate_up_ptr, out_ptr, stride_in, stride_out, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < n_cols
    gate = tl.load(gate_up_ptr + row * stride_in + cols, mask=ok, other=0.0)
    up = tl.load(gate_up_ptr + row * stride_in + n_cols + cols, mask=ok, other=0.0)
    g = gate.to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype)           # round like torch: silu, cast, multiply
    tl.store(out_ptr + row * stride_out + cols, silu * up, mask=ok)


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """gate_up: [T, 2I] (gate then up), out: [T, I]."""
    rows, cols = out.shape
    if rows == 0:
        return
    block = 1024
    _silu_mul_kernel[(rows, triton.cdiv(cols, block))](gate_up, out, gate_up.stride(0), out.stride(0), cols,
                                                        BLOCK=block)
