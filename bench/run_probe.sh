#!/usr/bin/env bash
# A diagnostic device session (see bench/run_gpu.sh for the full suite).  Usage: bash bench/run_probe.sh OUT
# Now: GPU tests; where a 28-layer 128K read's GPU time goes (by kernel and shape); the
# 241K tail read twice in one process (a one-time cost?); 128K with 16K steps vs 8K steps.
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider 2>&1 | tail -15 | tee "$out/gpu-tests.txt"
timeout 120 python3 -m bench.profile_prefill --layers 28 --lengths 131072 --shapes --rows 30 > "$out/profile_128k.txt" 2>&1
grep -E "^=== " "$out/profile_128k.txt"
timeout 120 python3 -m bench.profile_prefill --layers 4 --lengths 237568 --tail 3432 --churn 4096 32768 131072 \
    --tail-reads 2 > "$out/tail_twice.txt" 2>&1
grep -E "^=== " "$out/tail_twice.txt"
for knobs in "" "--budget 16384 --query-slice 16384" "" "--budget 16384 --query-slice 16384"; do
    echo "--- 128K ours only: ${knobs:-default}"
    timeout 90 python3 -m bench.prefill --lengths 131072 --hf-lengths $knobs --out-dir "$out" 2>&1 | tail -2
done
