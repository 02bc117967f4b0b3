#!/usr/bin/env bash
# A diagnostic device session (see bench/run_gpu.sh for the full suite).  Usage: bash bench/run_probe.sh OUT
# Now: the Python side of the engine loop during the 241K tail read, twice (the first one
# costs ~0.26 s more); 128K with wave-sized query slices (8448 = 66 x 128 rows: 66 x 28
# heads = 1848 thread blocks = 14 full waves on 132 SMs) against 8192 (13.6 waves).
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
timeout 150 python3 -m bench.profile_prefill --layers 4 --lengths 237568 --tail 3432 --churn 4096 32768 131072 \
    --tail-reads 2 --loop-host --rows 45 > "$out/tail_loop_host.txt" 2>&1
grep -E "^=== " "$out/tail_loop_host.txt"
for knobs in "" "--budget 8448 --query-slice 8448 --slice 8448" "--budget 8448 --query-slice 4224 --slice 8448" \
             "" "--budget 8448 --query-slice 8448 --slice 8448"; do
    echo "--- 128K ours only: ${knobs:-default}"
    timeout 90 python3 -m bench.prefill --lengths 131072 --hf-lengths $knobs --out-dir "$out" 2>&1 | tail -1
done
