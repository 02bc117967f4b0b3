"""Markdown tables for the README from bench/results/*.json (newest result per row wins).

    python -m bench.report
"""
from __future__ import annotations

import json

from .common import RESULTS


def _load(prefix: str):
    files = sorted(RESULTS.glob(f"{prefix}-*.json"), key=lambda p: json.loads(p.read_text())["date"])
    return [(p.name, json.loads(p.read_text())) for p in files]


def _fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


# Runs that chose their own lengths or turned a knob (A/B probes) stay out of the README table.
PREFILL_PROBE_FLAGS = ("--lengths", "--hf-lengths", "--budget", "--slice", "--query-slice", "--max-piece", "--layers")


def prefill_table() -> str:
    rows, sources = {}, {}
    for name, record in _load("prefill-cuda"):
        if any(flag in record.get("command", "") for flag in PREFILL_PROBE_FLAGS):
            continue
        for row in record["rows"]:
            rows[row["tokens"]] = (row, record)
            sources[row["tokens"]] = name
    out = ["| prompt tokens | ours TTFT s | ours TF/s | of matmul peak | transformers TTFT s | transformers TF/s | speed-up | extra GiB ours / transformers | warm TTFT s (+32 tokens) | result file |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for tokens in sorted(rows):
        r, rec = rows[tokens]
        out.append(f"| {tokens} | {_fmt(r['ours_ttft_s'])} | {_fmt(r['ours_tflops'], 0)} | {_fmt(r['ours_peak_fraction'])} | "
                   f"{_fmt(r.get('hf_ttft_s'))} | {_fmt(r.get('hf_tflops'), 0)} | {_fmt(r.get('speedup_vs_hf'))} | "
                   f"{_fmt(r['ours_extra_gib'])} / {_fmt(r.get('hf_extra_gib'))} | {_fmt(r['warm_ttft_s'], 3)} | "
                   f"`{sources[tokens]}` |")
    return "\n".join(out)


def decode_table() -> str:
    """Newest row per user count and per step budget, each with the file it came from (budget
    rows only from runs that logged every step with its GPU span, at the default chunk
    granule: older runs measured older engines, others turned a bench knob)."""
    runs = _load("decode-cuda")
    if not runs:
        return ""
    users, budgets = {}, {}          # budgets: newest row per time budget (any token budget)

    def seconds(spec):
        return float(spec.partition(":")[2] or "inf")
    for name, rec in runs:
        for r in rec["decode"]:
            users[r["users"]] = (r, name)
        # runs that turned the granule knob (older files did not record it: their granule was off 1024)
        if rec["min_query_knob"] if "min_query_knob" in rec else rec.get("chunk_granule", 1024) != 1024:
            continue
        for r in rec["itl_under_prefill"]:
            if "steps_gap_ms_gpu_ms_decodes_prefill" in r:
                budgets[seconds(r["step_budget"])] = (r, name, rec["long_prompt_tokens"])
    out = ["| users (2K prompts) | output tokens/s | ITL p50 ms | ITL p99 ms | result file |", "|---|---|---|---|---|"]
    out += [f"| {u} | {_fmt(r['output_tok_s'], 0)} | {_fmt(r['itl_p50_ms'], 1)} | {_fmt(r['itl_p99_ms'], 1)} | `{name}` |"
            for u, (r, name) in sorted(users.items())]
    long_tokens = {t for _, _, t in budgets.values()}
    out += ["", f"Beside a {'/'.join(map(str, sorted(long_tokens)))}-token prefill (8 users decoding):", "",
            "| step budget (tokens[:seconds]) | long TTFT s | solo TTFT s | ratio | users' ITL p50 ms | p99 ms | result file |",
            "|---|---|---|---|---|---|---|"]
    out += [f"| {r['step_budget']} | {_fmt(r['long_ttft_s'])} | {_fmt(r['long_solo_ttft_s'])} | {_fmt(r['ttft_over_solo'])} | "
            f"{_fmt(r['itl_p50_ms'], 0)} | {_fmt(r['itl_p99_ms'], 0)} | `{name}` |"
            for _, (r, name, _) in sorted(budgets.items())]
    return "\n".join(out)


def cpu_table() -> str:
    runs = _load("cpu_vs_transformers-cpu")
    if not runs:
        return ""
    name, rec = runs[-1]
    out = ["| prompt tokens | ours TTFT s | transformers TTFT s | TTFT speed-up | ours decode tok/s | transformers decode tok/s | decode speed-up | same greedy tokens |",
           "|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['prompt_tokens']} | {_fmt(r['ours_ttft_s'])} | {_fmt(r['hf_ttft_s'])} | {_fmt(r['ttft_speedup'])} | "
            f"{_fmt(r['ours_decode_tok_s'], 1)} | {_fmt(r['hf_decode_tok_s'], 1)} | {_fmt(r['decode_speedup'])} | "
            f"{_fmt(r['same_greedy_tokens'])} |" for r in rec["rows"]]
    out.append(f"\n({rec['device']}, {rec['date']}, `{name}`)")
    return "\n".join(out)


def main():
    for title, table in (("GPU prefill", prefill_table()), ("GPU decode", decode_table()), ("CPU", cpu_table())):
        if table:
            print(f"### {title}\n\n{table}\n")


if __name__ == "__main__":
    main()
