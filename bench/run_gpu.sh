#!/usr/bin/env bash
# One device session: GPU tests, prefill (ours vs transformers, cold and warm), decode
# throughput and inter-token latency beside a long prefill; the card's clocks, power and
# temperature are logged every 0.5 s meanwhile (smi.csv).
# Usage: bash bench/run_gpu.sh OUT_DIR [full|quick|PART...]
#   full = tests prefill decode; quick = tests and short prefill/decode runs;
#   parts: tests sustained prefill decode
set -uo pipefail
out=${1:?output directory}; shift
parts=${*:-full}
[ "$parts" = full ] && parts="tests prefill decode"
[ "$parts" = quick ] && parts="tests quick"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" | tee -a "$out/gpu.txt"
fields=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv -c 1 >/dev/null 2>&1 || fields=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu
nvidia-smi --query-gpu=$fields --format=csv -lms 500 > "$out/smi.csv" 2>&1 &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT
for part in $parts; do
    echo "=== $part $(date -u +%Y/%m/%d\ %H:%M:%S)" | tee -a "$out/gpu.txt"
    case $part in
        tests) timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q \
                   -p no:cacheprovider -rs 2>&1 | tail -15 | tee "$out/gpu-tests.txt" ;;
        sustained) timeout 90 python3 -m bench.sustained --out-dir "$out" 2>&1 | tail -3 ;;
        prefill) timeout 300 python3 -m bench.prefill --out-dir "$out" 2>&1 | tail -7 ;;
        decode) timeout 300 python3 -m bench.decode --out-dir "$out" 2>&1 | tail -9 ;;
        quick)
            python3 -m bench.prefill --lengths 4096 32768 --hf-lengths 4096 32768 --out-dir "$out" 2>&1 | tail -4
            python3 -m bench.decode --users 1 8 32 --tokens 64 --long 32768 --budgets 8192,8192:0.15 \
                --out-dir "$out" 2>&1 | tail -9 ;;
        *) echo "unknown part $part" ;;
    esac
done
