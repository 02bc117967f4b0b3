"""Cold prefill (TTFT) on the GPU: ours vs transformers, plus cold vs warm (prefix cache).

    python -m bench.prefill [--lengths 4096 32768 131072 241000] [--hf-lengths 4096 32768 131072]

Per length: TTFT, TF/s (2·W·T + 2·T²·hidden·layers over TTFT), fraction of the matmul peak
measured in the same run, and extra device memory during the prefill beyond what was
allocated before it (weights, KV pool, workspace, graphs), with allocator counters.
"""
from __future__ import annotations

import argparse
import gc
import threading
import time

import torch

from engine import SamplingParams

from .common import print_table, write_result
from .gpu_model import (kv_bytes_per_token, make_engine, make_hf_model, matmul_peak_tflops,
                        non_embedding_params, prefill_flops, random_prompt)

GiB = 1 << 30


def _mem_snapshot():
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "segments": stats.get("segment.all.allocated", 0), "alloc_retries": stats.get("num_alloc_retries", 0),
            "cuda_mallocs": stats.get("segment.all.allocated", 0)}


class SteadyStateWatch:
    """Allocator segments once the prefill's first two steps are done, read from this
    thread while the engine runs: segments created after that are steady-state allocations."""

    def __init__(self, engine):
        self.engine, self.first = engine, engine.num_steps
        self.segments = None
        self.by_pool = None                 # small / large pool segments at that point
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(0.002):
            if self.engine.num_steps >= self.first + 2:
                stats = torch.cuda.memory_stats()
                self.segments = stats.get("segment.all.allocated", 0)
                self.by_pool = pool_segments(stats)
                return

    def stop(self):
        self._stop.set()
        self._thread.join()


def pool_segments(stats) -> dict:
    return {pool: stats.get(f"segment.{pool}_pool.allocated", 0) for pool in ("small", "large")}


def run_ours(engine, prompt):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = _mem_snapshot()
    watch = SteadyStateWatch(engine)
    wall_start = time.monotonic()
    out = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))[0]
    wall = time.monotonic() - wall_start
    watch.stop()
    after = _mem_snapshot()
    steps = [[c[0][0], c[0][1], round(1000 * st["gap_s"], 2), round(1000 * st["gpu_s"], 2) if st["gpu_s"] else None]
             for st in engine.recent_steps() if st["time"] >= wall_start and st["gap_s"] and (c := st["prefill"])]
    return {"ttft_s": out.metrics.ttft, "wall_s": wall, "cached_tokens": out.num_cached_tokens,
            "extra_gib": (torch.cuda.max_memory_allocated() - before["allocated"]) / GiB,
            "new_segments": after["segments"] - before["segments"],
            "steady_new_segments": None if watch.segments is None else after["segments"] - watch.segments,
            "steady_new_segments_by_pool": None if watch.by_pool is None else
            {pool: n - watch.by_pool[pool] for pool, n in pool_segments(torch.cuda.memory_stats()).items()},
            "reserved_growth_gib": (after["reserved"] - before["reserved"]) / GiB,
            "steps": steps}


@torch.inference_mode()
def run_hf(model, prompt):
    ids = torch.tensor([prompt], device="cuda")
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    out = model(ids, use_cache=True, logits_to_keep=1)
    out.logits.argmax(-1).item()
    ttft = time.perf_counter() - start
    extra = (torch.cuda.max_memory_allocated() - base) / GiB
    del out
    gc.collect()
    torch.cuda.empty_cache()
    return {"ttft_s": ttft, "extra_gib": extra}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 32768, 131072, 241000])
    parser.add_argument("--hf-lengths", type=int, nargs="*", default=[4096, 32768, 131072])
    parser.add_argument("--budget", type=int, default=None, help="max_num_batched_tokens (default: the engine's)")
    parser.add_argument("--slice", type=int, default=None, help="workspace_slice_tokens (default: the engine's)")
    parser.add_argument("--query-slice", type=int, default=None, help="attention_query_slice")
    parser.add_argument("--max-piece", type=int, default=None, help="longest cuDNN key piece (bench knob)")
    parser.add_argument("--question", type=int, default=32, help="tokens appended for the warm run")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers for a quick check")
    parser.add_argument("--out-dir", default=None)
    args = parser.parse_args(argv)

    if args.max_piece:
        from engine.layers import gpu_attention
        gpu_attention.MAX_PIECE = args.max_piece                         # bench-only knob turning
    peak = matmul_peak_tflops()
    overrides = {"num_hidden_layers": args.layers} if args.layers else {}
    hf = make_hf_model(**overrides)
    cfg = hf.config
    longest = max(args.lengths) + args.question + 64
    startup = time.perf_counter()
    engine = make_engine(hf, max_model_len=longest, max_num_batched_tokens=args.budget,
                         workspace_slice_tokens=args.slice, attention_query_slice=args.query_slice,
                         max_num_seqs=8,
                         kv_cache_memory=int(kv_bytes_per_token(cfg) * longest * 1.02))
    startup = time.perf_counter() - startup
    memory = engine.stats()["memory"]
    params = non_embedding_params(hf)
    engine.generate([random_prompt(3000, seed=1)], SamplingParams(max_tokens=2, temperature=0))   # warm-up
    run_hf(hf, random_prompt(2048, seed=2))

    rows = []
    for length in args.lengths:
        prompt = random_prompt(length, seed=length)
        flops = prefill_flops(params, length, cfg.hidden_size, cfg.num_hidden_layers)
        ours = run_ours(engine, prompt)
        row = {"tokens": length, "ours_ttft_s": ours["ttft_s"], "ours_tflops": flops / ours["ttft_s"] / 1e12,
               "ours_extra_gib": ours["extra_gib"], "ours_new_segments": ours["new_segments"],
               "ours_reserved_growth_gib": ours["reserved_growth_gib"],
               "ours_steady_new_segments": ours["steady_new_segments"],
               "ours_steady_new_segments_by_pool": ours["steady_new_segments_by_pool"],
               "ours_steps_start_len_gap_ms_gpu_ms": ours["steps"]}
        row["ours_peak_fraction"] = row["ours_tflops"] / peak
        warm = run_ours(engine, prompt + random_prompt(args.question, seed=length + 1))
        row.update({"warm_ttft_s": warm["ttft_s"], "warm_cached_tokens": warm["cached_tokens"],
                    "warm_over_cold": warm["ttft_s"] / ours["ttft_s"]})
        if length in args.hf_lengths:
            hf_run = run_hf(hf, prompt)
            row.update({"hf_ttft_s": hf_run["ttft_s"], "hf_tflops": flops / hf_run["ttft_s"] / 1e12,
                        "hf_extra_gib": hf_run["extra_gib"], "speedup_vs_hf": hf_run["ttft_s"] / ours["ttft_s"]})
        rows.append(row)
        print_table([row], [k for k in row if not k.startswith(("ours_steps", "ours_steady_new_segments_by"))])
    columns = ["tokens", "ours_ttft_s", "ours_tflops", "ours_peak_fraction", "hf_ttft_s", "hf_tflops",
               "speedup_vs_hf", "ours_extra_gib", "hf_extra_gib", "ours_new_segments", "ours_steady_new_segments",
               "warm_ttft_s",
               "warm_over_cold"]
    payload = {"model": "Qwen2.5-7B shape, random bf16 weights", "layers": cfg.num_hidden_layers,
               "non_embedding_params": params, "matmul_peak_tflops": peak,
               "attention_kernel": engine.runner.attention.kernel_name,
               "max_num_batched_tokens": engine.config.max_num_batched_tokens,
               "workspace_slice_tokens": engine.config.workspace_slice_tokens,
               "attention_query_slice": engine.runner.attention.query_slice,
               "max_key_piece": engine.runner.attention.pieces[-1],
               "canonical_pieces": len(engine.runner.attention.pieces), "startup_s": startup,
               "memory": memory, "rows": rows}
    engine.shutdown()
    write_result("prefill", "cuda", payload, args.out_dir)
    print(f"matmul peak {peak:.0f} TF/s; workspace {memory['workspace_bytes'] / GiB:.2f} GiB")
    print_table(rows, columns)


if __name__ == "__main__":
    main()
