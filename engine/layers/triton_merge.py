"""Log-sum-exp merge of two partial attention results in one Triton pass.

Prefill attention is computed in parts (a query slice's own causal keys, then pieces of
its cached prefix); each part gives an output normalised over its keys and the log-sum-exp
of its scores. Two parts combine exactly:
    lse = logaddexp(lse_a, lse_b),  out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse).
Doing this in torch costs ~10 full passes in fp32 plus a copy to undo the GQA folding; this
kernel reads each operand once in whatever layout the attention kernel left it and writes
the result straight into its destination (an fp32 accumulator, or the bf16 output rows).

Layouts: an operand holds, for query position l and head h, a head_dim vector at
    ptr + (h // fold) * stride_group + (l * fold + h % fold) * stride_row
fold = G for GQA-folded kernel outputs ([KV heads, L*G rows]), 1 for [heads, L] or [L, heads].
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl


class Part(NamedTuple):
    """One operand: output vectors and their log-sum-exp, with the fold described above."""
    out: torch.Tensor
    out_group_stride: int
    out_row_stride: int
    lse: torch.Tensor
    lse_group_stride: int
    lse_row_stride: int
    fold: int


def kernel_part(out: torch.Tensor, lse: torch.Tensor, fold: int) -> Part:
    """A fused kernel's result: out [1, groups, rows, D] (any strides), lse [1, groups, >=rows]
    (or [1, groups, rows, 1]) as returned by torch's SDPA kernels."""
    lse2 = lse.reshape(lse.shape[1], -1)
    return Part(out, out.stride(1), out.stride(2), lse2, lse2.stride(0), lse2.stride(1), fold)


def rows_part(out: torch.Tensor, lse: torch.Tensor) -> Part:
    """An accumulator in token-major layout: out [L, H, D], lse [L, H]."""
    return Part(out, out.stride(1), out.stride(0), lse, lse.stride(1), lse.stride(0), 1)


@triton.jit
def _merge_kernel(a_ptr, a_lse_ptr, b_ptr, b_lse_ptr, o_ptr, o_lse_ptr, num_rows,
                  a_sg, a_sr, a_lsg, a_lsr, b_sg, b_sr, b_lsg, b_lsr, o_sg, o_sr, o_lsg, o_lsr,
                  A_FOLD: tl.constexpr, B_FOLD: tl.constexpr, O_FOLD: tl.constexpr,
                  WRITE_LSE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_L: tl.constexpr):
    head = tl.program_id(1)
    ls = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    ok = ls < num_rows
    dims = tl.arange(0, HEAD_DIM)
    a_row = (head // A_FOLD) * a_sg + (ls * A_FOLD + head % A_FOLD) * a_sr
    b_row = (head // B_FOLD) * b_sg + (ls * B_FOLD + head % B_FOLD) * b_sr
    la = tl.load(a_lse_ptr + (head // A_FOLD) * a_lsg + (ls * A_FOLD + head % A_FOLD) * a_lsr, mask=ok, other=0.0)
    lb = tl.load(b_lse_ptr + (head // B_FOLD) * b_lsg + (ls * B_FOLD + head % B_FOLD) * b_lsr, mask=ok, other=0.0)
    la, lb = la.to(tl.float32), lb.to(tl.float32)
    m = tl.maximum(la, lb)
    m = tl.where(m == float("-inf"), 0.0, m)          # neither part saw a key: weights stay 0
    wa, wb = tl.exp(la - m), tl.exp(lb - m)
    total = wa + wb
    inv = tl.where(total > 0, 1.0 / total, 0.0)
    a = tl.load(a_ptr + a_row[:, None] + dims[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
    b = tl.load(b_ptr + b_row[:, None] + dims[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
    merged = a * (wa * inv)[:, None] + b * (wb * inv)[:, None]
    o_row = (head // O_FOLD) * o_sg + (ls * O_FOLD + head % O_FOLD) * o_sr
    tl.store(o_ptr + o_row[:, None] + dims[None, :], merged.to(o_ptr.dtype.element_ty), mask=ok[:, None])
    if WRITE_LSE:
        tl.store(o_lse_ptr + (head // O_FOLD) * o_lsg + (ls * O_FOLD + head % O_FOLD) * o_lsr,
                 m + tl.log(total), mask=ok)


def merge_parts(a: Part, b: Part, out: Part, num_rows: int, num_heads: int, head_dim: int,
                write_lse: bool = True) -> None:
    """out = merge(a, b) for num_rows query positions x num_heads heads. `out` may be `a`
    (each element is read before it is written, by the same program)."""
    if num_rows == 0:
        return
    block_l = 32
    grid = (triton.cdiv(num_rows, block_l), num_heads)
    _merge_kernel[grid](a.out, a.lse, b.out, b.lse, out.out, out.lse, num_rows,
                        a.out_group_stride, a.out_row_stride, a.lse_group_stride, a.lse_row_stride,
                        b.out_group_stride, b.out_row_stride, b.lse_group_stride, b.lse_row_stride,
                        out.out_group_stride, out.out_row_stride, out.lse_group_stride, out.lse_row_stride,
                        A_FOLD=a.fold, B_FOLD=b.fold, O_FOLD=out.fold, WRITE_LSE=write_lse,
                        HEAD_DIM=head_dim, BLOCK_L=block_l)
