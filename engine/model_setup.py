"""Start-up: resolve the model, pick device and dtype, load weights, size the KV pool."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import psutil
import torch

from .config import EngineConfig
from .layers.attention import TorchAttention
from .workspace import Workspace
from .loader import iter_weights, load_generation_config, load_hf_config, load_tokenizer, resolve_model_dir
from .models import model_class
from .runner import ModelRunner
from .step_cost import StepCostModel
from .step_shape import wave_sized_tokens
from .vision_setup import build_vision

log = logging.getLogger("longread.setup")


@dataclass
class Setup:
    model_dir: Optional[Path]
    hf_config: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    eos_token_ids: Tuple[int, ...]
    runner: ModelRunner
    num_blocks: int
    memory: Dict[str, int] = field(default_factory=dict)
    cost_model: Any = None
    vision: Any = None                   # VisionSupport for vision models (vision_setup.py)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but no CUDA GPU is available")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        # bf16 matmuls run ~5x slower than fp32 on these CPUs: fp32 on CPU, bf16 on GPU.
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} (use float32, bfloat16 or float16)")
    return dtype


def resolve_max_model_len(config: EngineConfig, hf_config) -> int:
    limit = getattr(hf_config, "max_position_embeddings", None) or 4096
    window = getattr(hf_config, "sliding_window", None)
    if window and getattr(hf_config, "use_sliding_window", True) and window < limit:
        # We attend to the full context; beyond the window that would differ from the model.
        log.warning("capping context at the model's sliding window (%d tokens)", window)
        limit = window
    if config.max_model_len is None:
        return limit
    if config.max_model_len > limit:
        log.warning("max_model_len %d exceeds the model's %d positions", config.max_model_len, limit)
    return config.max_model_len


def eos_ids(tokenizer, generation_config) -> Tuple[int, ...]:
    ids = set()
    eos = getattr(generation_config, "eos_token_id", None) if generation_config else None
    for value in (eos if isinstance(eos, (list, tuple)) else [eos]):
        if value is not None:
            ids.add(int(value))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return tuple(sorted(ids))


def available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    return psutil.virtual_memory().available


def kv_pool_bytes(config: EngineConfig, device: torch.device, bytes_per_token: int, max_model_len: int) -> int:
    setting = config.kv_cache_memory
    available = available_memory(device)
    if setting is None:
        if device.type == "cuda":   # leave room for CUDA graphs, the sampler and other processes
            return int(0.9 * max(0, available - (2 << 30)))
        # CPU: room for four full-length conversations, at most 30% of free RAM.
        return min(4 * max_model_len * bytes_per_token, int(0.3 * available))
    if isinstance(setting, float) and setting <= 1.0:
        return int(setting * available)
    return int(setting)


def build_model(hf_config, device: torch.device, dtype: torch.dtype):
    cls = model_class(hf_config)
    with torch.device("meta"):
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = cls(hf_config)
        finally:
            torch.set_default_dtype(default)
    return model.to_empty(device=device).eval()


def make_attention(config: EngineConfig, model, device: torch.device, dtype: torch.dtype, max_model_len: int,
                   step_tokens: int = 8192):
    heads, kv_heads, head_dim = model.dims
    name = config.attention_backend
    if name == "auto":
        name = "cuda" if device.type == "cuda" else "torch"
    if name == "torch":
        return TorchAttention(heads, kv_heads, head_dim, head_dim ** -0.5)
    if name == "cuda":
        from .layers.gpu_attention import CudaAttention       # imports Triton: GPU hosts only
        return CudaAttention(heads, kv_heads, head_dim, head_dim ** -0.5, device, dtype,
                             query_slice=min(config.attention_query_slice or step_tokens, config.max_num_batched_tokens),
                             max_keys=max_model_len)
    raise ValueError(f"unknown attention_backend {name!r} (torch, cuda or auto)")


@dataclass
class ModelSource:
    """A model given in memory instead of a directory (benchmarks: random weights shared
    with a transformers baseline). `weights` yields (HF name, tensor)."""
    hf_config: Any
    weights: Any
    tokenizer: Any
    generation_config: Any = None


def build_model_and_runner(config: EngineConfig, source: Optional[ModelSource] = None) -> Setup:
    if source is None:
        model_dir = resolve_model_dir(config.model)
        hf_config = load_hf_config(model_dir)
        model_class(hf_config)                # unsupported architectures fail before loading
        tokenizer = load_tokenizer(model_dir)
        weights, generation_config = lambda: iter_weights(model_dir), load_generation_config(model_dir)
    else:
        model_dir, hf_config, tokenizer = None, source.hf_config, source.tokenizer
        weights, generation_config = lambda: source.weights, source.generation_config
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    if config.max_step_time is None:     # readers first on a GPU (bench/decode.py trade-off)
        config.max_step_time = 0.15 if device.type == "cuda" else 0.0
    text_config = hf_config.get_text_config()   # vision models nest the language model's config
    max_model_len = resolve_max_model_len(config, text_config)
    model = build_model(hf_config, device, dtype)
    step_tokens = default_step_tokens(config, model, device)
    model.load_weights(weights())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    vision = None
    if getattr(model, "supports_images", False):    # its pool is allocated before the KV pool is sized
        vision = build_vision(config, model, hf_config, model_dir, tokenizer, device, dtype)
    use_workspace = config.use_workspace if config.use_workspace is not None else device.type == "cuda"
    workspace = Workspace(model, config.max_num_batched_tokens, config.workspace_slice_tokens,
                          device, dtype) if use_workspace else None
    per_token = ModelRunner.kv_bytes_per_token(model, dtype)
    pool = kv_pool_bytes(config, device, per_token, max_model_len)
    num_blocks = pool // (per_token * config.block_size)
    if num_blocks < 2:
        raise RuntimeError(f"KV cache of {pool} bytes holds fewer than 2 blocks; raise kv_cache_memory")
    attention = make_attention(config, model, device, dtype, max_model_len, step_tokens)
    runner = ModelRunner(model, text_config, device, dtype, num_blocks, config.block_size,
                         max_model_len, attention, workspace, seed=config.seed)
    if device.type == "cuda" and config.cuda_graphs and workspace is not None and attention.name == "cuda":
        runner.enable_cuda_graphs(config.max_num_seqs, max_model_len)
    memory = {"weights_bytes": weight_bytes,
              "kv_cache_bytes": num_blocks * config.block_size * per_token,
              # the layer scratch plus the attention's own (merge accumulator, key gathers)
              "workspace_bytes": (workspace.nbytes if workspace is not None else 0) +
              getattr(attention, "scratch_bytes", 0)}
    if vision is not None:
        vision.connect(runner)
        memory["vision_cache_bytes"] = vision.cache.nbytes
    return Setup(model_dir, hf_config, tokenizer, device, dtype, max_model_len,
                 eos_ids(tokenizer, generation_config), runner, num_blocks, memory,
                 cost_model(config, model, device), vision)


def default_step_tokens(config: EngineConfig, model, device: torch.device) -> int:
    """Fills in the step budget and the workspace slice left at None; returns the length of
    a GPU step (the attention's query slice by default) or 8192 on CPU."""
    step = 8192
    if device.type == "cuda":
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        step = wave_sized_tokens(model.dims[0], num_sms)
    if config.max_num_batched_tokens is None:
        config.max_num_batched_tokens = step if device.type == "cuda" else 2048
    if config.workspace_slice_tokens is None:
        config.workspace_slice_tokens = min(step, config.max_num_batched_tokens)
    return step


def cost_model(config: EngineConfig, model, device: torch.device) -> StepCostModel:
    gpu = device.type == "cuda"
    matmul = config.matmul_flops or (720e12 if gpu else 50e9)          # H200, bf16 (bench/profile_prefill.py)
    attention = config.attention_flops or (580e12 if gpu else 30e9)
    params = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name)
    cfg = model.config
    model_cost = StepCostModel.for_model(params, cfg.hidden_size, cfg.num_hidden_layers, matmul, attention)
    if gpu:
        model_cost.slow_attention_factor = 2.0
    return model_cost
