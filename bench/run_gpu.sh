#!/usr/bin/env bash
# One device session: GPU tests, prefill (ours vs transformers, cold and warm), decode
# throughput and inter-token latency beside a long prefill.
# Usage: bash bench/run_gpu.sh OUT_DIR [quick|full]
set -uo pipefail
out=${1:?output directory}; mode=${2:-full}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" | tee -a "$out/gpu.txt"
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider -rs 2>&1 | tail -15 | tee "$out/gpu-tests.txt"
if [ "$mode" = quick ]; then
    python3 -m bench.prefill --lengths 4096 32768 --hf-lengths 4096 32768 --out-dir "$out" 2>&1 | tail -4
    python3 -m bench.decode --users 1 8 32 --tokens 64 --long 32768 --budgets 8192,8192:0.15 --out-dir "$out" 2>&1 | tail -9
else
    timeout 300 python3 -m bench.prefill --out-dir "$out" 2>&1 | tail -7
    timeout 300 python3 -m bench.decode --out-dir "$out" 2>&1 | tail -9
fi
