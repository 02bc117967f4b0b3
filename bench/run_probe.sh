#!/usr/bin/env bash
# A diagnostic device session (see bench/run_gpu.sh for the full suite).  Usage: bash bench/run_probe.sh OUT
# Now: GPU tests; the first 241K tail read compiles nothing any more; the prefill suite twice
# (the 128K ratio against transformers moves with transformers' own time, 9.26-9.44 s).
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider 2>&1 | tail -4 | tee "$out/gpu-tests.txt"
timeout 120 python3 -m bench.profile_prefill --layers 4 --lengths 237568 --tail 3432 --churn 4096 32768 131072 \
    --tail-reads 2 --loop-host --rows 30 > "$out/tail_loop_host.txt" 2>&1
grep -E "^=== |^Triton compiled" "$out/tail_loop_host.txt"
for run in 1 2; do timeout 150 python3 -m bench.prefill --out-dir "$out" 2>&1 | tail -5; done
