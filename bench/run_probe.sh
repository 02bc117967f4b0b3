#!/usr/bin/env bash
# A diagnostic device session (see bench/run_gpu.sh for the full suite).  Usage: bash bench/run_probe.sh OUT
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider -x 2>&1 | tail -15 | tee "$out/gpu-tests.txt"
timeout 100 python3 -m bench.ops --sweep-decode --context 2048 --out-dir "$out" > "$out/sweep.log" 2>&1; grep -E "^[0-9]" "$out/sweep.log" | sort -k1,1n -k5,5n | awk '{print $1,$2,$3,$4,$5,$6,$7}' | head -40
timeout 150 python3 -m bench.prefill --lengths 32768 131072 --hf-lengths 32768 131072 --out-dir "$out" 2>&1 | tail -3
timeout 200 python3 -m bench.decode --users 1 8 32 --budgets 8192,8192:0.15,8192:0.1 --out-dir "$out" 2>&1 | tail -9
timeout 60 python3 -m bench.prefill --lengths 131072 --hf-lengths --slice 4096 --out-dir "$out" 2>&1 | tail -2
