"""What short prefill chunks cost: the shapes a time-budgeted step runs beside decodes.

    python -m bench.chunk_shapes

1. cuDNN attention, a query slice of q tokens (28/4 heads of 128) against K cached keys,
   as one call, and with the keys cut into B pieces run as one batched call (B x the
   thread blocks: a 1024-query slice alone fills 224 blocks, 1.7 waves on 132 SMs).
2. The model's matmuls (Qwen2.5-7B shapes) at M = chunk tokens + a few decode rows: does
   a row count just past a multiple of 128 cost a whole extra tile?
Burst timings (median of repeats); compare rows with each other, not with sustained rates.
"""
from __future__ import annotations

import argparse

import torch

from engine.layers.attention_kernels import KERNELS

from .common import print_table, write_result

H, KVH, D, SCALE = 28, 4, 128, 0.088
HIDDEN, INTER, QKV = 3584, 18944, 4608


def median_ms(fn, reps=20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def attention_rows(queries, keys, splits):
    cudnn = KERNELS["cudnn"]
    cache = torch.randn(max(keys), 2, KVH, D, device="cuda", dtype=torch.bfloat16)
    rows_src = torch.randn(max(queries), (H + 2 * KVH) * D, device="cuda", dtype=torch.bfloat16)
    rows = []
    for q_len in queries:
        q = rows_src[:q_len, :H * D].view(q_len, H, D).transpose(0, 1).unsqueeze(0)   # workspace view
        for n in keys:
            for b in splits:
                if n % b:
                    continue
                k = cache[:n, 0].reshape(b, n // b, KVH, D).permute(0, 2, 1, 3)
                v = cache[:n, 1].reshape(b, n // b, KVH, D).permute(0, 2, 1, 3)
                for label, qb in (("expand", q.expand(b, -1, -1, -1)), ("copy", q.expand(b, -1, -1, -1).contiguous())):
                    if b == 1 and label == "copy":
                        continue
                    try:
                        ms = median_ms(lambda: cudnn(qb, k, v, False, SCALE))
                        rows.append({"part": "attention", "q": q_len, "keys": n, "splits": b, "q_batch": label,
                                     "ms": ms, "tflops": 4 * q_len * n * H * D / ms / 1e9})
                    except Exception as exc:
                        rows.append({"part": "attention", "q": q_len, "keys": n, "splits": b, "q_batch": label,
                                     "error": f"{type(exc).__name__}: {str(exc)[:100]}"})
                    print_table(rows[-1:], list(rows[-1]))
    return rows


def matmul_rows(ms_list):
    rows = []
    weights = {"qkv": (HIDDEN, QKV), "o": (HIDDEN, HIDDEN), "gate_up": (HIDDEN, 2 * INTER), "down": (INTER, HIDDEN)}
    for name, (k, n) in weights.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(max(ms_list), k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(max(ms_list), n, device="cuda", dtype=torch.bfloat16)
        for m in ms_list:
            ms = median_ms(lambda: torch.mm(x[:m], w.t(), out=out[:m]))
            rows.append({"part": "matmul", "weight": name, "m": m, "ms": ms, "tflops": 2 * m * k * n / ms / 1e9})
            print_table(rows[-1:], list(rows[-1]))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    p.add_argument("--keys", type=int, nargs="+", default=[32768])
    p.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--m", type=int, nargs="*", default=[1024, 1032, 1040, 1152, 2048, 2056, 3072, 3080, 4096, 4104, 8192])
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    rows = attention_rows(args.queries, args.keys, args.splits) + (matmul_rows(args.m) if args.m else [])
    write_result("chunk_shapes", "cuda", {"rows": rows}, args.out_dir)


if __name__ == "__main__":
    main()
