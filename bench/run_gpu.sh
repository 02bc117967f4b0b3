#!/usr/bin/env bash
# One device session: GPU tests, the op wind tunnel, prefill and decode benchmarks.
# Usage: bash bench/run_gpu.sh OUT_DIR [quick|full]
set -uo pipefail
out=${1:?output directory}; mode=${2:-full}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" | tee -a "$out/gpu.txt"
python3 -m pytest tests/engine -q -p no:cacheprovider -rs 2>&1 | tail -25 | tee "$out/gpu-tests.txt"
python3 -m bench.ops --op all --out-dir "$out" 2>&1 | tail -8
if [ "$mode" = quick ]; then
    python3 -m bench.prefill --lengths 4096 32768 --hf-lengths 4096 32768 --out-dir "$out" 2>&1 | tail -12
    python3 -m bench.decode --users 1 8 32 --tokens 64 --long 32768 --budgets 8192,8192:0.15 --out-dir "$out" 2>&1 | tail -12
else
    python3 -m bench.prefill --out-dir "$out" 2>&1 | tail -8
    python3 -m bench.decode --out-dir "$out" 2>&1 | tail -12
    python3 -m bench.vision --device cuda --out-dir "$out" 2>&1 | tail -12
fi
