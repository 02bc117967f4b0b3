"""TTFT and decode speed on the CPU: our engine vs transformers, same weights/dtype/threads.

    python -m bench.cpu_vs_transformers [--lengths 512 2048 6144] [--decode 32] [--repeats 3]

Runs the two engines alternately on the same prompts (distinct per trial, so ours never
hits its prefix cache) and reports medians and ratios (> 1 means we are faster). On a CPU
only ratios measured side by side in one run are meaningful.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from engine import Engine, EngineConfig, SamplingParams

from .common import print_table, write_result


class _TimingStreamer:
    """transformers streamer that timestamps every token it is handed."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def build_prompts(tokenizer, length: int, count: int, salt: int):
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    text = "\n".join(p.read_text() for p in sorted(root.glob("engine/**/*.py")))
    base = tokenizer(text)["input_ids"]
    while len(base) < length + count:
        base = base + base
    # A distinct first token per trial: no prefix-cache hits between trials.
    return [[1000 + salt * count + i] + base[i + 1:i + length] for i in range(count)]


def run_ours(engine, prompt, decode_tokens):
    params = SamplingParams(max_tokens=decode_tokens + 1, temperature=0, ignore_eos=True)
    out = engine.generate([prompt], params)[0]
    m = out.metrics
    assert out.num_cached_tokens == 0
    return m.ttft, m.decode_tokens_per_s, out.outputs[0].token_ids


@torch.inference_mode()
def run_hf(model, prompt, decode_tokens):
    ids = torch.tensor([prompt])
    streamer = _TimingStreamer()
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=decode_tokens + 1,
                         min_new_tokens=decode_tokens + 1, do_sample=False, streamer=streamer)
    first, last = streamer.times[1], streamer.times[-1]      # times[0] is the prompt
    return first - start, decode_tokens / (last - first), out[0, len(prompt):].tolist()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 6144])
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=None, help="max_num_batched_tokens (default: engine default)")
    parser.add_argument("--out-dir", default=None)
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM
    config = EngineConfig(model=args.model, device="cpu", dtype="float32")
    if args.budget:
        config.max_num_batched_tokens = args.budget
    engine = Engine(config)
    hf = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), dtype=torch.float32).eval()
    warm = build_prompts(engine.tokenizer, 64, 1, salt=99)[0]
    run_ours(engine, warm, 2), run_hf(hf, warm, 2)

    rows = []
    for length in args.lengths:
        prompts = build_prompts(engine.tokenizer, length, args.repeats, salt=length)
        ours_ttft, ours_dec, hf_ttft, hf_dec, same = [], [], [], [], True
        for prompt in prompts:            # alternate, so load on the machine hits both alike
            t, d, ours_tokens = run_ours(engine, prompt, args.decode)
            ours_ttft.append(t), ours_dec.append(d)
            t, d, hf_tokens = run_hf(hf, prompt, args.decode)
            hf_ttft.append(t), hf_dec.append(d)
            same &= ours_tokens == hf_tokens
        row = {"prompt_tokens": length,
               "ours_ttft_s": statistics.median(ours_ttft), "hf_ttft_s": statistics.median(hf_ttft),
               "ours_decode_tok_s": statistics.median(ours_dec), "hf_decode_tok_s": statistics.median(hf_dec),
               "same_greedy_tokens": same,
               "ours_ttft_all": ours_ttft, "hf_ttft_all": hf_ttft,
               "ours_decode_all": ours_dec, "hf_decode_all": hf_dec}
        row["ttft_speedup"] = row["hf_ttft_s"] / row["ours_ttft_s"]
        row["decode_speedup"] = row["ours_decode_tok_s"] / row["hf_decode_tok_s"]
        rows.append(row)
        print_table([row], ["prompt_tokens", "ours_ttft_s", "hf_ttft_s", "ttft_speedup",
                            "ours_decode_tok_s", "hf_decode_tok_s", "decode_speedup", "same_greedy_tokens"])
    engine.shutdown()
    payload = {"model": engine.model_name, "dtype": "float32", "threads": torch.get_num_threads(),
               "decode_tokens": args.decode, "repeats": args.repeats,
               "max_num_batched_tokens": engine.config.max_num_batched_tokens, "rows": rows}
    write_result("cpu_vs_transformers", "cpu", payload, args.out_dir)
    print_table(rows, ["prompt_tokens", "ours_ttft_s", "hf_ttft_s", "ttft_speedup",
                       "ours_decode_tok_s", "hf_decode_tok_s", "decode_speedup", "same_greedy_tokens"])


if __name__ == "__main__":
    main()
