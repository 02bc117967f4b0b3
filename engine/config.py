"""Engine and sampling configuration (vLLM-style names)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union


@dataclass
class EngineConfig:
    model: Optional[str] = None          # None = embedded default model (SmolLM2-135M-Instruct)
    device: str = "auto"                 # "cpu", "cuda", "cuda:1" or "auto"
    dtype: str = "auto"                  # "auto" = float32 on CPU, bfloat16 on CUDA
    max_model_len: Optional[int] = None  # default: the model's max_position_embeddings
    # Per-step token budget; None = 2048 on CPU; on a GPU about 8192, rounded so the attention
    # kernel fills whole waves of the device (8448 on an H200 for 28 heads: engine/step_shape.py).
    max_num_batched_tokens: Optional[int] = None
    max_num_seqs: int = 64
    block_size: int = 16
    # bytes (int > 1) or a fraction of free device memory (float <= 1). On CPU the
    # fraction applies to available host RAM. None = enough for max_num_seqs full contexts,
    # capped at 0.5 of available memory.
    kv_cache_memory: Optional[Union[int, float]] = None
    enable_prefix_caching: bool = True
    attention_backend: str = "auto"      # "torch" (reference, exact), "cuda", or "auto"
    use_workspace: Optional[bool] = None # preallocated layer scratch; None = on for CUDA
    workspace_slice_tokens: Optional[int] = None  # norms/RoPE/MLP run in slices this big; None = the default step (or the budget if smaller)
    attention_query_slice: Optional[int] = None   # GPU prefill attention runs in query slices; None = the GPU step
    cuda_graphs: bool = True             # capture decode steps (CUDA only)
    # Launch the next decode step before this one's tokens reach the host, so output
    # processing runs while the device computes (engine/overlap.py).
    overlap_decode: bool = True
    seed: int = 0                        # seeds sampling for requests that set no seed
    # Upper bound on the time one step may take while others are decoding, in seconds (0 =
    # token budget only; None = 0.15 on CUDA, 0 on CPU). Long prefills are chunked further
    # so readers keep a steady pace; a prompt read while nobody decodes is not slowed.
    max_step_time: Optional[float] = None
    # Throughputs for that step-time model (FLOP/s); None = measured H200 figures on CUDA
    # (bf16 matmul ~720 TF/s, attention ~580 TF/s), rough CPU figures otherwise.
    matmul_flops: Optional[float] = None
    attention_flops: Optional[float] = None
    # Vision-language models only. An image occupies image_token_count tokens (its merged
    # patches plus its start/end separators; engine/multimodal.py); one above max_image_tokens
    # is refused at submission. None = the largest image max_pixels allows.
    max_image_tokens: Optional[int] = None
    # The vision pool (encoder outputs), separate from the KV cache; in tokens. Must hold at
    # least max_image_tokens. None = room for 4 images of max_image_tokens.
    vision_cache_tokens: Optional[int] = None
    min_pixels: Optional[int] = None     # override the model's image resize bounds (pixels)
    max_pixels: Optional[int] = None


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1                      # -1 or 0 = disabled
    max_tokens: Optional[int] = 256      # None = up to max_model_len
    stop: Sequence[str] = field(default_factory=list)
    stop_token_ids: Sequence[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: Optional[int] = None
    logprobs: Optional[int] = None       # top-k log-probabilities per sampled token
    skip_special_tokens: bool = True

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop)
        self.stop_token_ids = list(self.stop_token_ids)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be >= 0, got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
