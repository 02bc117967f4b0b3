"""Where a prefill step's GPU time goes: kernel-level profile of our engine (few layers).

    python -m bench.profile_prefill --layers 4 --lengths 4096 32768
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from engine import SamplingParams

from .gpu_model import kv_bytes_per_token, make_engine, make_hf_model, random_prompt


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 32768])
    p.add_argument("--budget", type=int, default=None, help="max_num_batched_tokens (default: the engine's)")
    p.add_argument("--rows", type=int, default=22)
    p.add_argument("--host", action="store_true", help="also profile the Python side (cProfile)")
    p.add_argument("--host-decode", type=int, default=0, help="profile the Python side of N decoding users")
    p.add_argument("--tail", type=int, default=0,
                   help="profile only T new tokens read after each length's prompt (cached first, cold)")
    p.add_argument("--churn", type=int, nargs="*", default=[],
                   help="prompts read first, so the KV pool (sized to the longest read) is reused")
    p.add_argument("--tail-reads", type=int, default=1,
                   help="profile the tail read this many times (other new tokens each time): one-time costs")
    p.add_argument("--loop-host", action="store_true",
                   help="profile the Python side of the engine loop's own steps (cProfile on its thread) "
                        "instead of the GPU kernels")
    args = p.parse_args(argv)
    hf = make_hf_model(num_hidden_layers=args.layers)
    longest = max(args.lengths) + args.tail + 64
    pool = int(kv_bytes_per_token(hf.config) * longest * 1.02) if args.tail else \
        int(kv_bytes_per_token(hf.config) * max(longest, 70000) * 1.1)
    engine = make_engine(hf, max_model_len=longest, max_num_batched_tokens=args.budget, max_num_seqs=64,
                         kv_cache_memory=pool)
    engine.generate([random_prompt(4000, seed=5)], SamplingParams(max_tokens=2, temperature=0))
    for length in args.churn:
        engine.generate([random_prompt(length, seed=length + 3)], SamplingParams(max_tokens=1, temperature=0))
    for length in args.lengths:
        base = random_prompt(length, seed=length + 9)
        if args.tail:
            engine.generate([base], SamplingParams(max_tokens=1, temperature=0))
        for read in range(args.tail_reads if args.tail else 1):
            prompt = base + random_prompt(args.tail, seed=length + 10 + read) if args.tail else base
            if args.loop_host:
                with LoopProfile(engine) as loop:
                    out = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0))[0]
                print(f"\n=== {length} tokens (+{args.tail} read, read {read + 1}), {args.layers} layers: "
                      f"TTFT {out.metrics.ttft:.3f} s, cached {out.num_cached_tokens}; loop steps (s): "
                      f"{[round(t, 4) for t in loop.step_seconds]} ===")
                loop.print(args.rows)
                continue
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                out = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0))[0]
            print(f"\n=== {length} tokens (+{args.tail} read, read {read + 1}), {args.layers} layers: "
                  f"TTFT {out.metrics.ttft:.3f} s, cached {out.num_cached_tokens} ===")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=60))
            if args.tail:            # host-side time too (first-use loads, plan builds)
                print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=60))
    if args.host_decode:
        host_profile(engine, [random_prompt(2048, seed=900 + i) for i in range(args.host_decode)], max_tokens=48)
    elif args.host and args.tail:           # the Python side of one more tail read
        host_profile(engine, [prompt[:-args.tail] + random_prompt(args.tail, seed=4243)])
    elif args.host:
        host_profile(engine, [random_prompt(max(args.lengths), seed=4242)])
    engine.shutdown()


class LoopProfile:
    """cProfile of the engine loop's steps, on the loop's own thread (its cuDNN plans, its
    Triton caches): the instance's `step` is wrapped while the block runs."""

    def __init__(self, engine):
        import cProfile
        self.engine, self.profiler, self.step_seconds = engine, cProfile.Profile(), []

    def __enter__(self):
        self.triton_before = triton_kernel_keys()
        original = self.engine.step

        def step():
            start = time.perf_counter()
            self.profiler.enable()
            try:
                original()
            finally:
                self.profiler.disable()
                self.step_seconds.append(time.perf_counter() - start)
        self.engine.step = step
        return self

    def __exit__(self, *exc):
        del self.engine.step                      # back to the class's method
        self.triton_after = triton_kernel_keys()

    def print(self, rows: int) -> None:
        import pstats
        for name, keys in self.triton_after.items():
            for key in sorted(keys - self.triton_before.get(name, set())):
                print(f"Triton compiled during the read: {name} {key}")
        pstats.Stats(self.profiler).sort_stats("cumulative").print_stats(rows)
        pstats.Stats(self.profiler).sort_stats("tottime").print_stats(rows)


def triton_kernel_keys() -> dict:
    """Specializations compiled so far of each of the engine's Triton kernels (name -> keys)."""
    import sys
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return {}
    out = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("engine.") or module is None:
            continue
        for attr, fn in vars(module).items():
            if isinstance(fn, JITFunction):
                keys = set()
                for caches in getattr(fn, "device_caches", {}).values():
                    keys |= {str(k) for k in caches[0]}
                out[f"{name}.{attr}"] = keys
    return out


def host_profile(engine, prompts, max_tokens=1, rows=25):
    """Python-side profile of the engine's steps (stepping in this thread, loop stopped)."""
    import cProfile
    import pstats

    from engine.output_processor import RequestStream
    from engine.request import Request
    engine.shutdown()                                   # stop the loop; we step by hand
    engine.runner.warm_up()           # cuDNN keeps plans per thread: build them on this one too
    for i, prompt in enumerate(prompts):
        request = Request(f"host-profile-{i}", prompt, SamplingParams(max_tokens=max_tokens, temperature=0,
                                                                     ignore_eos=True))
        engine._streams[request.request_id] = RequestStream(request, engine.tokenizer, engine.max_model_len)
        engine.scheduler.add(request)
    if max_tokens > 1:                                  # profile decode steps only
        while any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.running) \
                or engine.scheduler.waiting:
            engine.step()
    start = time.perf_counter()
    steps = engine.num_steps
    profiler = cProfile.Profile()
    profiler.enable()
    while engine.scheduler.has_work():
        engine.step()
    torch.cuda.synchronize()
    profiler.disable()
    print(f"{engine.num_steps - steps} steps in {time.perf_counter() - start:.3f} s (under cProfile)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(rows)


if __name__ == "__main__":
    main()

