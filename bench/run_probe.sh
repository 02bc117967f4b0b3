#!/usr/bin/env bash
# A diagnostic device session: GPU tests, decode-kernel sweep, decode-step profile, prefill
# at 32K/128K with two query slices, kernel profile of a 128K prefill.  Usage: bash bench/run_probe.sh OUT
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider -x 2>&1 | tail -15 | tee "$out/gpu-tests.txt"
timeout 90 python3 -m bench.ops --sweep-decode --context 2048 --out-dir "$out" > "$out/sweep.log" 2>&1; grep -E "^[0-9]" "$out/sweep.log" | sort -k1,1n -k5,5n | awk '{print $1,$2,$3,$4,$5,$6}' | head -40
timeout 120 python3 -m bench.profile_decode --users 32 --out-dir "$out" > "$out/profile_decode.log" 2>&1; grep -E "host phases|^32 " "$out/profile_decode.log"
timeout 150 python3 -m bench.prefill --lengths 32768 131072 --hf-lengths 32768 131072 --out-dir "$out" 2>&1 | tail -3
timeout 100 python3 -m bench.prefill --lengths 32768 131072 --hf-lengths --query-slice 8192 --out-dir "$out" 2>&1 | tail -3
timeout 90 python3 -m bench.profile_prefill --layers 4 --lengths 131072 --rows 18 > "$out/profile_prefill.log" 2>&1; grep -E "TTFT|Name|^ +[a-zA-Z_]" "$out/profile_prefill.log" | cut -c1-60,120-200 | head -24
