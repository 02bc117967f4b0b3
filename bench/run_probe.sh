#!/usr/bin/env bash
# A diagnostic device session: GPU tests, the attention-kernel table, a decode-step
# profile, and prefill at 32K/128K with two attention settings.  Usage: bash bench/run_probe.sh OUT
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__, torch.backends.cudnn.version())" | tee -a "$out/gpu.txt"
timeout 150 python3 -m pytest tests/engine/test_gpu_backend.py tests/engine/test_vision_gpu.py -q -p no:cacheprovider -rs 2>&1 | tail -15 | tee "$out/gpu-tests.txt"
timeout 120 python3 -m bench.attn_kernels --out-dir "$out" > "$out/attn.log" 2>&1; tail -40 "$out/attn.log"
timeout 150 python3 -m bench.profile_decode --users 1 32 --out-dir "$out" > "$out/profile_decode.log" 2>&1; grep -E "users|^ *[0-9]+ +[0-9.]+ +[0-9.]+" "$out/profile_decode.log" | tail -6
timeout 150 python3 -m bench.prefill --lengths 32768 131072 --hf-lengths 32768 131072 --out-dir "$out" 2>&1 | tail -4
timeout 120 python3 -m bench.prefill --lengths 32768 131072 --hf-lengths --query-slice 4096 --pieces all --out-dir "$out" 2>&1 | tail -4
