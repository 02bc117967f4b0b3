"""The benchmark model: Qwen2.5-7B-shaped, random bf16 weights, shared by both engines.

transformers builds the model on the GPU; our engine loads the very same tensors through
ModelSource, so both sides compute with identical weights in the same process.
"""
from __future__ import annotations

import torch

from engine import Engine, EngineConfig
from engine.model_setup import ModelSource

QWEN25_7B = dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                 intermediate_size=18944, vocab_size=152064, max_position_embeddings=262144,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)


class NullTokenizer:
    """Benchmarks feed token ids; outputs are not read as text."""
    eos_token_id = None
    chat_template = None

    def decode(self, ids, skip_special_tokens=True):
        return ""


def make_hf_model(device="cuda", seed=0, **overrides):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(**{**QWEN25_7B, **overrides})
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if device == "cuda" else torch.float32)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():                     # same weights on every run of the benchmark
        gen = torch.Generator(device=device).manual_seed(seed)
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02, generator=gen)
    return model.eval()


def make_engine(hf_model, device="cuda", **settings) -> Engine:
    dtype = "bfloat16" if device == "cuda" else "float32"
    config = EngineConfig(device=device, dtype=dtype, **settings)
    weights = ((name, tensor) for name, tensor in hf_model.state_dict().items())
    return Engine(config, model_source=ModelSource(hf_model.config, weights, NullTokenizer()))


def non_embedding_params(hf_model) -> int:
    return sum(p.numel() for n, p in hf_model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)


def prefill_flops(params: int, tokens: int, hidden: int, layers: int) -> float:
    """2·W·T + 2·T²·hidden·layers (causal attention), as in DESIGN.md."""
    return 2.0 * params * tokens + 2.0 * tokens * tokens * hidden * layers


def random_prompt(length: int, seed: int, vocab: int = 1900):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab, (length,), generator=gen).tolist()


def kv_bytes_per_token(cfg) -> int:
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * 2


def matmul_peak_tflops(device="cuda", size=8192, reps=10) -> float:
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * size ** 3 * reps / (start.elapsed_time(end) / 1000) / 1e12
