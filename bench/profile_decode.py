"""Where a decode step's time goes with N users decoding: wall time per engine step, GPU
time of one CUDA-graph replay, the kernels of one eager step, and the Python side.

    python -m bench.profile_decode --users 1 32 --context 2048
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

from engine import SamplingParams
from engine.output_processor import RequestStream
from engine.overlap import PendingTokens
from engine.request import Request

from .common import print_table, write_result
from .gpu_model import kv_bytes_per_token, make_engine, make_hf_model, random_prompt


def add_users(engine, users, context, tag):
    for i in range(users):
        request = Request(f"{tag}-{i}", random_prompt(context, seed=7000 + i),
                          SamplingParams(max_tokens=100000, temperature=0, ignore_eos=True))
        engine._streams[request.request_id] = RequestStream(request, engine.tokenizer, engine.max_model_len)
        engine.scheduler.add(request)
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.running) \
            or engine.scheduler.waiting:
        engine.step()


def clear(engine):
    for stream in list(engine._streams.values()):
        engine._finish(stream, "abort")


def phase_times(engine, steps):
    """Host wall time per step spent in each phase (timers wrapped around engine methods)."""
    totals = {}

    def timed(owner, attr, label):
        fn = getattr(owner, attr)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                totals[label] = totals.get(label, 0.0) + time.perf_counter() - t
        setattr(owner, attr, wrapper)
        return fn
    runner, graphs = engine.runner, engine.runner.graphs
    originals = [(engine.scheduler, "schedule", timed(engine.scheduler, "schedule", "schedule")),
                 (runner, "execute", timed(runner, "execute", "execute (prep+replay+sample)")),
                 (graphs.graphs[next(b for b in graphs.buckets if b >= len(engine.scheduler.running))], "replay", None),
                 (runner, "launch_ahead", timed(runner, "launch_ahead", "launch ahead (prep+replay)")),
                 (PendingTokens, "wait", timed(PendingTokens, "wait", "wait for tokens")),
                 (engine, "_apply", timed(engine, "_apply", "apply outputs"))]
    bucket_graph = originals[2][0]
    originals[2] = (bucket_graph, "replay", timed(bucket_graph, "replay", "graph replay call"))
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        engine.step()
    torch.cuda.synchronize()
    total = time.perf_counter() - t
    for owner, attr, fn in originals:
        setattr(owner, attr, fn)
    result = {label: 1000 * v / steps for label, v in totals.items()}
    result["step total"] = 1000 * total / steps
    return result


def gpu_replay_ms(engine, users):
    graphs = engine.runner.graphs
    bucket = next(b for b in graphs.buckets if b >= users)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graphs.graphs[bucket].replay()
    start.record()
    for _ in range(20):
        graphs.graphs[bucket].replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 20


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, nargs="+", default=[1, 32])
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    hf = make_hf_model(**({"num_hidden_layers": args.layers} if args.layers else {}))
    capacity = max(args.users) * (args.context + 4 * args.steps + 256)
    engine = make_engine(hf, max_model_len=args.context + 4096, max_num_batched_tokens=8192, max_num_seqs=64,
                         kv_cache_memory=int(kv_bytes_per_token(hf.config) * capacity * 1.1))
    del hf
    engine.shutdown()                                   # stop the loop; this thread steps by hand
    rows = []
    for users in args.users:
        add_users(engine, users, args.context, f"u{users}")
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(args.steps):
            engine.step()
        torch.cuda.synchronize()
        step_ms = 1000 * (time.perf_counter() - t) / args.steps
        replay_ms = gpu_replay_ms(engine, users)
        row = {"users": users, "step_ms": step_ms, "graph_replay_ms": replay_ms,
               "host_ms_not_overlapped": step_ms - replay_ms, "tok_s": users / step_ms * 1000}
        row["phases_ms"] = phase_times(engine, args.steps)
        rows.append(row)
        print_table([row], [c for c in row if c != "phases_ms"])
        print("host phases (ms/step):", {k: round(v, 3) for k, v in row["phases_ms"].items()})
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(10):
            engine.step()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        graphs, engine.runner.graphs = engine.runner.graphs, None      # one eager step: kernel table
        engine.step()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            engine.step()
            torch.cuda.synchronize()
        engine.runner.graphs = graphs
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=70))
        clear(engine)
    write_result("profile_decode", "cuda", {"context": args.context, "rows": rows}, args.out_dir)
    print_table(rows, [c for c in rows[0] if c != "phases_ms"])


if __name__ == "__main__":
    main()
