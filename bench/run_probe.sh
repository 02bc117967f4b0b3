#!/usr/bin/env bash
# A diagnostic device session (see bench/run_gpu.sh for the full suite).  Usage: bash bench/run_probe.sh OUT
# Now: GPU tests on the wave-sized step; which Triton kernel compiles during the first 241K
# tail read; the short slices of an 8448 step against 1024-based ones; the prefill suite.
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider 2>&1 | tail -4 | tee "$out/gpu-tests.txt"
timeout 120 python3 -m bench.profile_prefill --layers 4 --lengths 237568 --tail 3432 --churn 4096 32768 131072 \
    --tail-reads 2 --loop-host --rows 30 > "$out/tail_loop_host.txt" 2>&1
grep -E "^=== |^Triton compiled" "$out/tail_loop_host.txt"
timeout 60 python3 -m bench.chunk_shapes --queries 1024 1408 2048 2816 4096 4224 --keys 33792 32768 --splits 1 2 3 4 \
    --m --out-dir "$out" 2>&1 | grep -v "^part" | awk '$3==33792 || $3==32768 {print $2, $3, $4, $5, $7}' | sort -n | head -60
timeout 330 python3 -m bench.prefill --out-dir "$out" 2>&1 | tail -7
