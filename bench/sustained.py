"""Does the chip hold its speed under a long tensor-core load? Throughput per window of a
kernel repeated for many seconds, with the SM clock, power and temperature (nvidia-smi)
read at the end of each window.

    python -m bench.sustained [--seconds 20] [--window 1.0]

Kernels: the cuDNN attention piece a long prefill runs most (8192 queries, 28/4 heads of
128, against 32768 unmasked keys) and an 8192^3 bf16 matmul. A short micro-benchmark
(bench/attn_kernels.py) sees the first second; a 241K prefill runs ~25 s.
"""
from __future__ import annotations

import argparse
import subprocess
import time

import torch

from engine.layers.attention_kernels import KERNELS

from .common import print_table, write_result

H, KVH, D, SCALE = 28, 4, 128, 0.088
SMI_FIELDS = ["clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active"]


def smi() -> dict:
    """The card's state now (empty where nvidia-smi cannot say)."""
    for fields in (SMI_FIELDS, SMI_FIELDS[:3]):
        try:
            line = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=5, check=True).stdout.splitlines()[0]
            return dict(zip(fields, (v.strip() for v in line.split(","))))
        except Exception:
            continue
    return {}


def windows(fn, flops_per_call: float, seconds: float, window: float, label: str) -> list:
    """Calls `fn` back to back for `seconds`; one row per window of about `window` s."""
    fn()
    torch.cuda.synchronize()
    probe = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    calls = max(1, int(window / max(time.perf_counter() - probe, 1e-6)))
    rows, begin = [], time.perf_counter()
    while time.perf_counter() - begin < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end) / 1000
        rows.append({"kernel": label, "t_s": time.perf_counter() - begin, "tflops": flops_per_call * calls / elapsed,
                     **smi()})
        print_table(rows[-1:], list(rows[-1]))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--queries", type=int, default=8192)
    p.add_argument("--keys", type=int, default=32768)
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(1, H, args.queries, D, device=dev, dtype=dt)
    cache = torch.randn(args.keys, 2, KVH, D, device=dev, dtype=dt)
    k, v = cache[:, 0].permute(1, 0, 2).unsqueeze(0), cache[:, 1].permute(1, 0, 2).unsqueeze(0)
    attention = KERNELS["cudnn"]
    rows = [{"kernel": "idle", **smi()}]
    rows += windows(lambda: attention(q, k, v, False, SCALE), 4 * args.queries * args.keys * H * D,
                    args.seconds, args.window, f"cudnn q{args.queries} k{args.keys}")
    a = torch.randn(8192, 8192, device=dev, dtype=dt)
    b = torch.randn(8192, 8192, device=dev, dtype=dt)
    rows += windows(lambda: a @ b, 2 * 8192 ** 3, args.seconds / 2, args.window, "matmul 8192^3")
    summary = {}
    for label in dict.fromkeys(r["kernel"] for r in rows if "tflops" in r):
        rates = [r["tflops"] for r in rows if r["kernel"] == label]
        summary[label] = {"first_window": rates[0], "last_window": rates[-1], "min": min(rates), "max": max(rates),
                          "mean": sum(rates) / len(rates)}
    write_result("sustained", "cuda", {"seconds": args.seconds, "summary": summary, "rows": rows}, args.out_dir)
    print(summary)


if __name__ == "__main__":
    main()
