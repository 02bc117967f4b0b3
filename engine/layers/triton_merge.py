"""Log-sum-exp merge of two partial attention results in one Triton pass.

Prefill attention is computed in parts (a query slice's own causal keys, then pieces of
its cached prefix); each part gives an output normalised over its keys and the log-sum-exp
of its scores. Two parts combine exactly:
    lse = logaddexp(lse_a, lse_b),  out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse).
In torch that is ~10 passes in fp32; this kernel reads each operand once in whatever layout
the attention kernel left it and writes the result straight into its destination (an
fp32 accumulator, or the output rows in the model's dtype).

Each operand holds, for query position l and head h, a head_dim vector (last dim
contiguous) at out + h * head_stride + l * row_stride, and its lse at the same kind of address.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl


class Part(NamedTuple):
    out: torch.Tensor
    lse: torch.Tensor

    @classmethod
    def of_kernel(cls, out: torch.Tensor, lse: torch.Tensor) -> "Part":
        """A fused kernel's result: out [1, H, L, D], lse [1, H, >=L] or [1, H, L, 1]."""
        return cls(out[0].transpose(0, 1), lse.reshape(lse.shape[1], -1).t())      # [L, H, D], [L, H]


@triton.jit
def _merge_kernel(a_ptr, a_lse_ptr, b_ptr, b_lse_ptr, o_ptr, o_lse_ptr, num_rows,
                  a_sh, a_sr, a_lsh, a_lsr, b_sh, b_sr, b_lsh, b_lsr, o_sh, o_sr, o_lsh, o_lsr,
                  WRITE_LSE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_L: tl.constexpr):
    head = tl.program_id(1)
    ls = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    ok = ls < num_rows
    dims = tl.arange(0, HEAD_DIM)
    la = tl.load(a_lse_ptr + head * a_lsh + ls * a_lsr, mask=ok, other=0.0).to(tl.float32)
    lb = tl.load(b_lse_ptr + head * b_lsh + ls * b_lsr, mask=ok, other=0.0).to(tl.float32)
    m = tl.maximum(la, lb)
    m = tl.where(m == float("-inf"), 0.0, m)          # neither part saw a key: weights stay 0
    wa, wb = tl.exp(la - m), tl.exp(lb - m)
    total = wa + wb
    inv = tl.where(total > 0, 1.0 / total, 0.0)
    a = tl.load(a_ptr + head * a_sh + ls[:, None] * a_sr + dims[None, :], mask=ok[:, None], other=0.0)
    b = tl.load(b_ptr + head * b_sh + ls[:, None] * b_sr + dims[None, :], mask=ok[:, None], other=0.0)
    merged = a.to(tl.float32) * (wa * inv)[:, None] + b.to(tl.float32) * (wb * inv)[:, None]
    tl.store(o_ptr + head * o_sh + ls[:, None] * o_sr + dims[None, :], merged.to(o_ptr.dtype.element_ty),
             mask=ok[:, None])
    if WRITE_LSE:
        tl.store(o_lse_ptr + head * o_lsh + ls * o_lsr, m + tl.log(total), mask=ok)


def merge_parts(a: Part, b: Part, out: Part, write_lse: bool = True) -> None:
    """out = merge(a, b); every operand is out [L, H, D] and lse [L, H] (any strides, the
    last dim of out contiguous). `out` may be `a`: each element is read, then written, by
    the same program."""
    num_rows, num_heads, head_dim = out.out.shape
    if num_rows == 0:
        return
    block_l = 32
    _merge_kernel[(triton.cdiv(num_rows, block_l), num_heads)](
        a.out, a.lse, b.out, b.lse, out.out, out.lse, num_rows,
        a.out.stride(1), a.out.stride(0), a.lse.stride(1), a.lse.stride(0),
        b.out.stride(1), b.out.stride(0), b.lse.stride(1), b.lse.stride(0),
        out.out.stride(1), out.out.stride(0), out.lse.stride(1), out.lse.stride(0),
        WRITE_LSE=write_lse, HEAD_DIM=head_dim, BLOCK_L=block_l)
