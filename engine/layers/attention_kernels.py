"""Fused attention kernels that return the log-sum-exp, behind one signature, and a probe
that picks the ones that work (and match an exact reference) on this device.

    kernel(q [1, H, L, D], k [1, KVH, N, D], v [1, KVH, N, D], causal, scale) -> (out, lse)

q, k and v may be strided views (queries of the workspace, keys of the paged cache). With
causal=True, queries and keys must be the same positions (cuDNN aligns the mask top-left).
GQA (H a multiple of KVH): kernels that take it natively get the KV heads as they are;
for the others the wrapper expands them.
"""
from __future__ import annotations

import logging
from typing import Callable, List, NamedTuple, Optional

import torch

log = logging.getLogger("longread.attention")


def _expand(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def _cudnn(q, k, v, causal, scale):
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    return out[0], out[1]


def _flash(q, k, v, causal, scale):
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    return out[0], out[1]


def _efficient(q, k, v, causal, scale):
    k, v = _expand(k, q.shape[1]), _expand(v, q.shape[1])
    out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal, scale=scale)
    return out[0], out[1]


def reference(q, k, v, causal, scale):
    """Exact attention in fp32 with its log-sum-exp."""
    k, v = _expand(k, q.shape[1]), _expand(v, q.shape[1])
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v.float()), torch.logsumexp(s, -1)


def _math(q, k, v, causal, scale):
    out, lse = reference(q, k, v, causal, scale)
    return out.to(q.dtype), lse


# "math" is exact and runs anywhere: it lets CPU tests drive the GPU backend's logic.
KERNELS = {"cudnn": _cudnn, "flash": _flash, "efficient": _efficient, "math": _math}


class Kernel(NamedTuple):
    name: str
    fn: Callable


def _expanding(fn: Callable) -> Callable:
    return lambda q, k, v, causal, scale: fn(q, _expand(k, q.shape[1]), _expand(v, q.shape[1]), causal, scale)


def _matches_reference(fn: Callable, device, dtype, gen) -> None:
    qkv = torch.randn(96, 4 + 2, 128, generator=gen).to(device, dtype)      # like the workspace
    q = qkv[:, :4].transpose(0, 1).unsqueeze(0)                             # 4 query heads
    cache = torch.randn(200, 2, 128, generator=gen).to(device, dtype)       # 2 KV heads, like the cache
    k, v = cache[:130].permute(1, 0, 2).unsqueeze(0), cache[30:160].permute(1, 0, 2).unsqueeze(0)
    for causal in (False, True):
        kk, vv = (k[:, :, :96], v[:, :, :96]) if causal else (k, v)
        out, lse = fn(q, kk, vv, causal, 0.088)
        ref_out, ref_lse = reference(q, kk, vv, causal, 0.088)
        lse = lse.reshape(1, 4, -1)[..., :96].float()
        err = max((out.float() - ref_out).abs().max().item(), (lse - ref_lse).abs().max().item())
        if not err <= 2e-2:                        # NaN fails too (cuDNN on fp32 gives NaN)
            raise RuntimeError(f"mismatch against the reference ({err})")


def probe_kernels(device, dtype, preferred: Optional[str] = None) -> List[Kernel]:
    """Fused kernels that run here on strided GQA inputs and match the reference, best first.
    A kernel that does not take GQA natively is kept with its KV heads expanded."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    names = [preferred] if preferred else ["cudnn", "flash", "efficient"]
    found = []
    for name in names:
        for label, fn in ((name, KERNELS[name]), (name + "+expand", _expanding(KERNELS[name]))):
            try:
                _matches_reference(fn, device, dtype, gen)
                found.append(Kernel(label, fn))
                break
            except Exception as exc:          # not built / not supported on this GPU or dtype
                log.info("attention kernel %s unavailable: %s", label, exc)
    if not found:
        raise RuntimeError("no fused attention kernel with log-sum-exp works on this device")
    return found
