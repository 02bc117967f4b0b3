"""Host time of one cuDNN attention call (plan lookup, launch) for keys that are a view of
the paged cache vs the same shape gathered into the attention's buffer, before and after
a first call on the buffer, and for a buffer never seen before. Answer on the H200
(attn_host-cuda-20261130-125947.json): all ~0.05-0.2 ms, so plans do not depend on where
the keys live. (The ~5 ms per call that bench.profile_prefill --host showed came from
stepping on the main thread: cuDNN plans are kept per thread.)

    python -m bench.attn_host
"""
from __future__ import annotations

import time

import torch

from engine.layers.gpu_attention import CudaAttention

from .common import print_table, write_result

H, KVH, D = 28, 4, 128


def host_ms(fn, reps=6):
    """Host milliseconds of the first call and the median of the rest."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    torch.cuda.synchronize()
    rest = sorted(times[1:])
    return round(times[0], 3), round(rest[len(rest) // 2], 3)


def main():
    att = CudaAttention(H, KVH, D, D ** -0.5, "cuda", torch.bfloat16, query_slice=8192, max_keys=65536)
    cache = torch.randn(2, 70000, KVH, D, device="cuda", dtype=torch.bfloat16)
    rows = torch.randn(8192, (H + 2 * KVH) * D, device="cuda", dtype=torch.bfloat16)
    att.warm_up((cache[0], cache[1]), rows)
    kernel, out = att.canonical_kernel, []
    for q_len in (8192, 1024):
        q = att._heads(rows[:q_len, :H * D].view(q_len, H, D))
        for keys in (32768, 8192):
            view = cache[0, 16 * 7:16 * 7 + keys]
            gathered = att._gather[0, :keys]
            gathered.copy_(view)
            splits = att._splits(q_len, keys)
            qb = q.expand(splits, -1, -1, -1)

            def call(k):
                return kernel(qb, att._split(k, splits), att._split(k, splits), False, att.scale) if splits > 1 \
                    else kernel(q, att._heads(k), att._heads(k), False, att.scale)
            row = {"q": q_len, "keys": keys, "splits": splits, "view_ms": host_ms(lambda: call(view)),
                   "gathered_ms": host_ms(lambda: call(gathered))}
            other = torch.empty_like(gathered)
            other.copy_(view)
            row["fresh_buffer_ms"] = host_ms(lambda: call(other))
            out.append(row)
            print_table(out[-1:], list(row))
    write_result("attn_host", "cuda", {"rows": out})


if __name__ == "__main__":
    main()
