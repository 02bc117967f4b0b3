"""Which fused attention kernel to use for prefill pieces, and what each shape costs.

Per kernel (cuDNN, flash) and shape: first-call time (cuDNN builds a plan per new shape),
steady-state time and TF/s, for (a) a GQA-folded query slice against a run of cached keys
(unmasked), (b) a slice's own causal keys with expanded heads, (c) native GQA (28 query
heads against 4 KV heads) if the kernel takes it, (d) a whole causal sequence in one call
(what transformers runs), plus which way a causal mask aligns when there are more keys
than queries, and the cost of one log-sum-exp merge (Triton vs torch).

    python -m bench.attn_kernels [--slices 2048 4096] [--keys 8192 32768 65536 131072]
"""
from __future__ import annotations

import argparse
import time

import torch

from engine.layers.attention_kernels import KERNELS

from .common import print_table, write_result

H, KVH, D, SCALE = 28, 4, 128, 0.088


def timed(fn, reps=1):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def measure(rows, kernel, part, fn, flops, **shape):
    try:
        first = timed(fn)
        steady = min(timed(fn, 3) for _ in range(3))
        rows.append({"kernel": kernel, "part": part, **shape, "first_ms": 1000 * first,
                     "steady_ms": 1000 * steady, "tflops": flops / steady / 1e12})
    except Exception as exc:                                 # not supported: say so
        rows.append({"kernel": kernel, "part": part, **shape, "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
    print_table(rows[-1:], list(rows[-1]))


def causal_alignment(name):
    """'bottom-right' if query i of L attends keys [0, K-L+i], 'top-left' if [0, i]."""
    g = torch.Generator(device="cpu").manual_seed(1)
    q = torch.randn(1, 2, 64, 128, generator=g).cuda().bfloat16()
    k, v = (torch.randn(1, 2, 192, 128, generator=g).cuda().bfloat16() for _ in range(2))
    try:
        out = KERNELS[name](q, k, v, True, SCALE)[0].float()
    except Exception as exc:
        return f"error {type(exc).__name__}: {str(exc)[:80]}"
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) * SCALE
    rows, cols = torch.arange(64, device="cuda")[:, None], torch.arange(192, device="cuda")[None, :]
    found = []
    for label, allowed in (("bottom-right", cols <= rows + 128), ("top-left", cols <= rows)):
        ref = torch.einsum("bhqk,bhkd->bhqd", s.masked_fill(~allowed, float("-inf")).softmax(-1), v.float())
        if (out - ref).abs().max().item() < 2e-2:
            found.append(label)
    return ",".join(found) or "neither"


def merge_costs(rows, length):
    from engine.layers.attention import merge_attention_states
    from engine.layers.triton_merge import Part, merge_parts
    own = torch.randn(1, H, length, D, device="cuda", dtype=torch.bfloat16)
    part = torch.randn(1, H, length, D, device="cuda", dtype=torch.bfloat16)
    lse_a, lse_b = torch.randn(1, H, length, device="cuda"), torch.randn(1, H, length, device="cuda")
    out = torch.empty(length, H, D, device="cuda", dtype=torch.bfloat16)

    def triton_merge():
        merge_parts(Part.of_kernel(own, lse_a), Part.of_kernel(part, lse_b), Part(out, lse_a[0].t()), write_lse=False)

    def torch_merge():
        out.copy_(merge_attention_states(own[0].float(), lse_a[0], part[0].float(), lse_b[0]).transpose(0, 1))
    nbytes = 3 * own.numel() * 2
    for label, fn in (("triton", triton_merge), ("torch", torch_merge)):
        steady = min(timed(fn, 10) for _ in range(3))
        rows.append({"kernel": label, "part": "lse-merge", "q": length, "steady_ms": 1000 * steady,
                     "gbps": nbytes / steady / 1e9})
        print_table(rows[-1:], list(rows[-1]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slices", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--keys", type=int, nargs="+", default=[8192, 32768, 65536, 131072])
    p.add_argument("--kernels", nargs="+", default=["cudnn", "flash"])
    p.add_argument("--whole", type=int, nargs="*", default=[32768], help="one causal call over T tokens")
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    dev, dt = "cuda", torch.bfloat16
    rows = []
    kv = torch.randn(max(args.keys), 2, KVH, D, device=dev, dtype=dt)
    alignment = {name: causal_alignment(name) for name in args.kernels}
    print("causal alignment with more keys than queries:", alignment)
    for name in args.kernels:
        fn = KERNELS[name]
        for L in args.slices:
            q = torch.randn(1, KVH, L * 7, D, device=dev, dtype=dt)
            for keys in args.keys:
                k, v = kv[:keys, 0].permute(1, 0, 2).unsqueeze(0), kv[:keys, 1].permute(1, 0, 2).unsqueeze(0)
                measure(rows, name, "prefix-folded", lambda: fn(q, k, v, False, SCALE), 4 * L * 7 * keys * KVH * D,
                        q=L, keys=keys)
            qh = torch.randn(1, H, L, D, device=dev, dtype=dt)
            kh = torch.randn(1, H, L, D, device=dev, dtype=dt)
            measure(rows, name, "own-causal", lambda: fn(qh, kh, kh, True, SCALE), 2 * L * L * H * D, q=L, keys=L)
            kg = kv[:32768, 0].permute(1, 0, 2).unsqueeze(0)
            measure(rows, name, "prefix-native-gqa", lambda: fn(qh, kg, kg, False, SCALE), 4 * L * 32768 * H * D,
                    q=L, keys=32768)
        for T in args.whole:
            qw = torch.randn(1, H, T, D, device=dev, dtype=dt)
            kw = torch.randn(1, H, T, D, device=dev, dtype=dt)
            measure(rows, name, "whole-causal", lambda: fn(qw, kw, kw, True, SCALE), 2 * T * T * H * D, q=T, keys=T)
    for L in args.slices:
        merge_costs(rows, L)
    write_result("attn_kernels", "cuda", {"causal_alignment": alignment, "rows": rows}, args.out_dir)
    print_table(rows, ["kernel", "part", "q", "keys", "first_ms", "steady_ms", "tflops", "error"])


if __name__ == "__main__":
    main()
