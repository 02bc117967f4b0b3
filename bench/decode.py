"""Decode throughput and inter-token latency on the GPU, alone and beside a long prefill.

    python -m bench.decode [--users 1 8 32] [--prompt 2048] [--tokens 256] [--long 131072]

1. N users, each a distinct 2K-token prompt, 256 generated tokens: aggregate output tokens/s
   over the window where all N are decoding, and ITL p50/p99 (engine-side token timestamps).
2. 8 users decoding while a 128K-token prompt arrives: their ITL p50/p99 during its prefill
   and the long prompt's TTFT against its solo TTFT, for several step budgets.
"""
from __future__ import annotations

import argparse
import threading
import time

import torch

from engine import SamplingParams

from .common import print_table, write_result
from .gpu_model import kv_bytes_per_token, make_engine, make_hf_model, random_prompt


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def consume(engine, request_id, record):
    times = []
    for out in engine.outputs(request_id):
        if out.outputs[0].token_ids and (not times or out.metrics.last_token_time != times[-1]):
            times.append(out.metrics.last_token_time)
        last = out
    record[request_id] = (times, last)


class DecodeAllocations:
    """Allocator counters over the steady decode window: from 32 steps after every user was
    admitted (their 2K prompts read by then) to the first user's last token. New segments
    are new device memory (cudaMalloc); allocation requests are tensors the caching
    allocator hands out."""

    KEYS = ("segment.all.allocated", "allocation.all.allocated")

    def __init__(self, engine, users: int):
        self.engine, self.users, self.result = engine, users, None
        self._first = self._last = None          # (steps, counters) at the window's ends
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _snapshot(self):
        stats = torch.cuda.memory_stats()
        return self.engine.num_steps, [stats.get(k, 0) for k in self.KEYS]

    def _watch(self):
        begin = None
        while not self._stop.wait(0.005):           # light polling: the loop's host time is measured too
            st = self.engine.stats()
            admitted = st["num_waiting"] == 0 and st["num_running"] == self.users
            if begin is None:
                begin = self.engine.num_steps + 32 if admitted else None
            elif not admitted:
                return                                      # someone finished: window over
            elif self.engine.num_steps >= begin and (self._last is None or self.engine.num_steps > self._last[0]):
                self._last = self._snapshot()
                self._first = self._first or self._last

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._first is not None and self._last[0] > self._first[0]:
            steps = self._last[0] - self._first[0]
            segments, allocations = (b - a for a, b in zip(self._first[1], self._last[1]))
            self.result = {"steps": steps, "new_segments": segments, "allocations_per_step": allocations / steps}


def run_users(engine, prompts, tokens, watch_allocations=False):
    """Submit all prompts at once; returns {request id: (token times, last output)} and the
    allocator counters of the steady decode window (None on CPU)."""
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    record, threads = {}, []
    watch = DecodeAllocations(engine, len(prompts)) if watch_allocations else None
    for prompt in prompts:
        rid = engine.submit(prompt, params)
        threads.append(threading.Thread(target=consume, args=(engine, rid, record)))
        threads[-1].start()
    for t in threads:
        t.join()
    if watch is not None:
        watch.stop()
    return record, watch.result if watch is not None else None


def run_beside_long_prefill(engine, prompts, long_prompt):
    """Users decode; once all are decoding a long prompt arrives; users stop at its first token."""
    params = SamplingParams(max_tokens=100000, temperature=0, ignore_eos=True)
    record, threads, ids = {}, [], []
    for prompt in prompts:
        ids.append(engine.submit(prompt, params))
        threads.append(threading.Thread(target=consume, args=(engine, ids[-1], record)))
        threads[-1].start()
    while engine.stats()["num_waiting"] or engine.stats()["num_running"] < len(prompts):
        time.sleep(0.01)
    time.sleep(0.5)                                            # everyone is decoding now
    long_id = engine.submit(long_prompt, SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))
    consume(engine, long_id, record)
    time.sleep(0.2)
    for rid in ids:
        engine.abort(rid)
    for t in threads:
        t.join()
    return record, long_id


def throughput(record, ids):
    start = max(record[i][0][0] for i in ids)                 # all users are decoding
    end = max(record[i][0][-1] for i in ids)
    count = sum(sum(1 for t in record[i][0] if t > start) for i in ids)
    gaps = [b - a for i in ids for a, b in zip(record[i][0], record[i][0][1:])]
    return count / (end - start), gaps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--long", type=int, default=131072)
    parser.add_argument("--itl-users", type=int, default=8)
    parser.add_argument("--budgets", default="step,step:0.12,step:0.15,step:0.18",
                        help="comma list of TOKENS[:SECONDS] step budgets for the ITL test "
                             "(TOKENS 'step': the engine's default step)")
    parser.add_argument("--min-query", type=int, default=None,
                        help="shortest canonical attention query slice (bench knob; sets the chunk granule)")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script only")
    parser.add_argument("--out-dir", default=None)
    args = parser.parse_args(argv)

    if args.min_query:
        from engine.layers import gpu_attention
        gpu_attention.MIN_QUERY = args.min_query                         # bench-only knob turning
    shape = {"num_hidden_layers": args.layers} if args.layers else {}
    if args.device == "cpu":
        shape.update(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                     vocab_size=2000)
    hf = make_hf_model(device=args.device, **shape)
    cfg = hf.config
    # Room for the largest user group, or the ITL users (decoding ~4K tokens each) beside
    # two long prompts (the solo run's blocks stay cached), so nobody waits for blocks.
    capacity = max(max(args.users) * (args.prompt + args.tokens),
                   args.itl_users * (args.prompt + 4096) + 2 * args.long) + 4096
    engine = make_engine(hf, device=args.device, max_model_len=args.long + 1024, max_num_seqs=64,
                         kv_cache_memory=int(kv_bytes_per_token(cfg) * capacity * 1.05))
    del hf
    torch.cuda.empty_cache()
    default_step = engine.config.max_num_batched_tokens
    engine.generate([random_prompt(512, seed=3)], SamplingParams(max_tokens=8, temperature=0))

    rows = []
    for users in args.users:
        prompts = [random_prompt(args.prompt, seed=1000 * users + i) for i in range(users)]
        record, allocations = run_users(engine, prompts, args.tokens, watch_allocations=args.device != "cpu")
        tps, gaps = throughput(record, list(record))
        rows.append({"users": users, "output_tok_s": tps, "itl_p50_ms": 1000 * percentile(gaps, 50),
                     "itl_p99_ms": 1000 * percentile(gaps, 99), "steady_decode_allocator": allocations})
        print_table(rows[-1:], [k for k in rows[-1] if k != "steady_decode_allocator"])
        print("steady decode, allocator:", allocations)

    itl_rows = []
    for spec in args.budgets.split(","):
        tokens, _, seconds = spec.partition(":")
        tokens = default_step if tokens == "step" else int(tokens)
        spec = f"{tokens}:{seconds}" if seconds else str(tokens)
        engine.scheduler.max_num_batched_tokens = tokens                 # bench-only knob turning
        engine.scheduler.max_step_time = float(seconds) if seconds else None
        solo = engine.generate([random_prompt(args.long, seed=31 + len(itl_rows))],   # a cold read
                               SamplingParams(max_tokens=1, temperature=0))[0].metrics.ttft
        prompts = [random_prompt(args.prompt, seed=5000 + len(itl_rows) * 100 + i) for i in range(args.itl_users)]
        record, long_id = run_beside_long_prefill(engine, prompts, random_prompt(args.long, seed=77 + len(itl_rows)))
        long_out = record[long_id][1]
        window = (long_out.metrics.arrival_time, long_out.metrics.first_token_time)
        gaps = [b - a for rid, (times, _) in record.items() if rid != long_id
                for a, b in zip(times, times[1:]) if window[0] <= b <= window[1]]
        steps = [st for st in engine.recent_steps() if window[0] <= st["time"] <= window[1] and st["gap_s"]]
        slowest = sorted(steps, key=lambda st: -st["gap_s"])[:4]
        itl_rows.append({"step_budget": spec, "long_ttft_s": long_out.metrics.ttft, "long_solo_ttft_s": solo,
                         "ttft_over_solo": long_out.metrics.ttft / solo, "itl_p50_ms": 1000 * percentile(gaps, 50),
                         "itl_p99_ms": 1000 * percentile(gaps, 99), "itl_max_ms": 1000 * max(gaps) if gaps else None,
                         "gaps_in_window": len(gaps), "steps_in_window": len(steps),
                         "slowest_steps": [{"gap_ms": 1000 * st["gap_s"], "decodes": st["decodes"],
                                            "prefill": st["prefill"]} for st in slowest],
                         "steps_gap_ms_gpu_ms_decodes_prefill": [
                             [round(1000 * st["gap_s"], 2), round(1000 * st["gpu_s"], 2) if st["gpu_s"] else None,
                              st["decodes"], st["prefill"]] for st in steps]})
        print_table(itl_rows[-1:], [k for k in itl_rows[-1] if not k.startswith(("slowest", "steps_"))])
        print("slowest steps:", itl_rows[-1]["slowest_steps"])
    payload = {"model": "Qwen2.5-7B shape, random bf16 weights", "prompt_tokens": args.prompt,
               "generated_tokens": args.tokens, "long_prompt_tokens": args.long,
               "cuda_graphs": engine.runner.graphs is not None,
               "chunk_granule": engine.scheduler.chunk_granule, "min_query_knob": args.min_query,
               "decode": rows, "itl_under_prefill": itl_rows}
    engine.shutdown()
    write_result("decode", args.device, payload, args.out_dir)
    print_table(rows, ["users", "output_tok_s", "itl_p50_ms", "itl_p99_ms"])
    print_table(itl_rows, ["step_budget", "long_ttft_s", "long_solo_ttft_s", "ttft_over_solo", "itl_p50_ms",
                           "itl_p99_ms", "itl_max_ms", "gaps_in_window"])


if __name__ == "__main__":
    main()
