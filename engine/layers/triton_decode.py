"""Paged decode attention in Triton: all decoding sequences of a step in one launch.

One program per (sequence, KV head, split). The program loads the G query heads that share
its KV head (GQA) as the rows of one tile, so each key/value is read from HBM once per
group, and walks its split of the context through the block table with an online softmax.
Splits are merged by log-sum-exp (flash-decoding), so even one long sequence fills the GPU.
Everything is tensor-driven (no host reads), so the launch can be captured in a CUDA graph.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


# Arguments that vary with the batch (split count, table width, batch-sized strides) are not
# specialized: Triton would compile a new variant (~1 s) the first time an eager mixed step
# meets a new value, a pause every reader sees. Graph capture compiles the one variant.
@triton.jit(do_not_specialize=["stride_bt_seq", "stride_out_split", "stride_lse_split", "num_splits"])
def _paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr, out_ptr, lse_ptr,
    scale, stride_q_tok, stride_q_head, stride_cache_slot, stride_cache_head,
    stride_bt_seq, stride_out_split, stride_out_tok, stride_out_head,
    stride_lse_split, stride_lse_tok, num_splits,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    per_split = tl.cdiv(tl.cdiv(context_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * per_split
    end = tl.minimum(start + per_split, context_len)

    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + rows
    row_ok = rows < GROUP
    q = tl.load(q_ptr + seq * stride_q_tok + heads[:, None] * stride_q_head + dims[None, :],
                mask=row_ok[:, None], other=0.0)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    n0 = start
    while n0 < end:        # (a while loop also runs under TRITON_INTERPRET=1, used by CPU tests)
        offs = n0 + tl.arange(0, BLOCK_N)
        ok = offs < end
        block = tl.load(block_tables_ptr + seq * stride_bt_seq + offs // BLOCK_SIZE, mask=ok, other=0)
        slots = block.to(tl.int64) * BLOCK_SIZE + offs % BLOCK_SIZE
        kv_off = slots[:, None] * stride_cache_slot + kv_head * stride_cache_head + dims[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * scale
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache_ptr + kv_off, mask=ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
        m_i = m_new
        n0 += BLOCK_N

    empty = l_i == 0.0                                   # a split past the context's end
    safe_l = tl.where(empty, 1.0, l_i)
    out = acc / safe_l[:, None]
    lse = tl.where(empty, float("-inf"), m_i + tl.log(safe_l))
    tl.store(out_ptr + split * stride_out_split + seq * stride_out_tok + heads[:, None] * stride_out_head
             + dims[None, :], out, mask=row_ok[:, None])
    tl.store(lse_ptr + split * stride_lse_split + seq * stride_lse_tok + heads, lse, mask=row_ok)


def paged_block_table(tables) -> torch.Tensor:
    """Block tables of a decode batch as one [B, width] int32 host tensor (zero padded),
    built in a single call: this runs every decode step."""
    width = max(len(t) for t in tables)
    return torch.tensor([list(t) + [0] * (width - len(t)) for t in tables], dtype=torch.int32)


# Programs per SM the split count aims for (memory-latency hiding; the kernel's loop is not
# software-pipelined) and warps per program. bench/ops.py --sweep-decode measures both.
PROGRAMS_PER_SM = 2
NUM_WARPS = 4
MAX_SPLITS = 32         # the reduction's tile: one compiled variant for every split count


def choose_splits(num_seqs: int, num_kv_heads: int, num_sms: int = 132) -> int:
    """Enough programs to cover the GPU PROGRAMS_PER_SM times; depends on the batch shape only."""
    programs = num_seqs * num_kv_heads
    return max(1, min(MAX_SPLITS, triton.cdiv(PROGRAMS_PER_SM * num_sms, programs)))


@triton.jit(do_not_specialize=["stride_part_split", "stride_lse_split", "num_splits"])
def _reduce_splits_kernel(part_ptr, lse_ptr, out_ptr, stride_part_split, stride_part_tok, stride_part_head,
                          stride_lse_split, stride_lse_tok, stride_out_tok, stride_out_head, num_splits,
                          SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Log-sum-exp combination of a (sequence, head)'s splits, written in the output dtype."""
    tok = tl.program_id(0)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    ok = splits < num_splits
    lse = tl.load(lse_ptr + splits * stride_lse_split + tok * stride_lse_tok + head, mask=ok,
                  other=float("-inf"))
    m = tl.max(lse, 0)
    weights = tl.exp(lse - m)                            # empty splits (-inf) weigh 0
    dims = tl.arange(0, HEAD_DIM)
    parts = tl.load(part_ptr + splits[:, None] * stride_part_split + tok * stride_part_tok
                    + head * stride_part_head + dims[None, :], mask=ok[:, None], other=0.0)
    out = tl.sum(parts * weights[:, None], 0) / tl.sum(weights, 0)
    tl.store(out_ptr + tok * stride_out_tok + head * stride_out_head + dims, out.to(out_ptr.dtype.element_ty))


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                           block_size: int, num_splits: int, out: torch.Tensor = None) -> torch.Tensor:
    """q: [B, H, D]; caches [slots, KVH, D]; block_tables [B, max_blocks] int32;
    context_lens [B] int32 (keys to attend, including the current token). Writes and
    returns out [B, H, D] (q's dtype; any row/head strides, last dim contiguous)."""
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    partial_out = torch.empty(num_splits, num_seqs, num_heads, head_dim, device=q.device, dtype=torch.float32)
    partial_lse = torch.empty(num_splits, num_seqs, num_heads, device=q.device, dtype=torch.float32)
    grid = (num_seqs, num_kv_heads, num_splits)
    _paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, context_lens, partial_out, partial_lse,
        scale, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
        block_tables.stride(0), partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
        partial_lse.stride(0), partial_lse.stride(1), num_splits,
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size, BLOCK_N=64 if head_dim <= 128 else 32,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",   # fp32 stays exact (no TF32)
        num_warps=NUM_WARPS)
    if out is None:
        out = torch.empty_like(q)
    _reduce_splits_kernel[(num_seqs, num_heads)](
        partial_out, partial_lse, out, partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
        partial_lse.stride(0), partial_lse.stride(1), out.stride(0), out.stride(1), num_splits,
        SPLITS_PAD=MAX_SPLITS, HEAD_DIM=head_dim)
    return out
