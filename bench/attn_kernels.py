"""Which fused attention kernel to use for prefill pieces: first-call (plan build) and
steady-state time per shape, TF/s, for cuDNN / flash / efficient on folded-GQA shapes.

    python -m bench.attn_kernels
"""
from __future__ import annotations

import time

import torch

from engine.layers.gpu_attention import KERNELS

from .common import print_table, write_result


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def main():
    dev, dt = "cuda", torch.bfloat16
    rows = []
    q = torch.randn(1, 4, 2048 * 7, 128, device=dev, dtype=dt)          # a folded 2048-token slice
    kv = torch.randn(65536, 2, 4, 128, device=dev, dtype=dt)
    for name in ("cudnn", "flash", "efficient"):
        fn = KERNELS[name]
        try:
            for keys in (2048, 6144, 10240, 30720, 63488):
                k = kv[:keys, 0].permute(1, 0, 2).unsqueeze(0)
                v = kv[:keys, 1].permute(1, 0, 2).unsqueeze(0)
                first = timed(lambda: fn(q, k, v, False, 0.088))
                steady = min(timed(lambda: fn(q, k, v, False, 0.088)) for _ in range(5))
                flops = 4 * q.shape[2] * keys * 4 * 128
                rows.append({"kernel": name, "part": "prefix", "keys": keys, "first_ms": 1000 * first,
                             "steady_ms": 1000 * steady, "tflops": flops / steady / 1e12})
            qc = torch.randn(1, 28, 2048, 128, device=dev, dtype=dt)
            kc = torch.randn(1, 28, 2048, 128, device=dev, dtype=dt)
            first = timed(lambda: fn(qc, kc, kc, True, 0.088))
            steady = min(timed(lambda: fn(qc, kc, kc, True, 0.088)) for _ in range(5))
            rows.append({"kernel": name, "part": "own-causal", "keys": 2048, "first_ms": 1000 * first,
                         "steady_ms": 1000 * steady, "tflops": 2 * 2048 * 2048 * 28 * 128 / steady / 1e12})
        except Exception as exc:
            rows.append({"kernel": name, "part": f"error {type(exc).__name__}: {str(exc)[:80]}"})
    write_result("attn_kernels", "cuda", {"rows": rows})
    print_table(rows, ["kernel", "part", "keys", "first_ms", "steady_ms", "tflops"])


if __name__ == "__main__":
    main()
