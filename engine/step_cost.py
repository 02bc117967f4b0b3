"""A time model for one step, so the scheduler can budget steps in seconds, not only tokens.

A token budget alone cannot keep decodes smooth at deep contexts: a 2K-token chunk that
attends to 128K cached keys costs far more than one at the start of a prompt. The cost of
a prefill chunk of C tokens after S cached tokens is modelled as
    C * matmul_s_per_token  +  C * (S + C/2) * attention_s_per_pair
from the model's shape and the device's measured throughputs, times a calibration factor
that the engine keeps fitted to the steps it measures (`observe`): fixed throughputs miss
what varies with the chunk's shape, the clocks under load and the host's share.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class StepCostModel:
    matmul_s_per_token: float        # 2 * non-embedding params / matmul FLOP/s
    attention_s_per_pair: float      # 4 * hidden * layers / attention FLOP/s
    overhead_s: float = 0.003        # launches and bookkeeping per step
    # Attention slowdown for chunks shorter than the backend's granule: they miss the fast
    # kernel (GPU: flash ~300 vs cuDNN ~600 TF/s, bench/results/attn_kernels-*.json).
    slow_attention_factor: float = 1.0
    # Measured step time / modelled time, a moving average over budgeted steps (observe).
    scale: float = 1.0
    SCALE_BOUNDS = (0.5, 3.0)
    SCALE_WEIGHT = 0.3       # weight of the newest step in the average

    @classmethod
    def for_model(cls, num_params: int, hidden: int, layers: int,
                  matmul_flops: float, attention_flops: float) -> "StepCostModel":
        return cls(2.0 * num_params / matmul_flops, 4.0 * hidden * layers / attention_flops)

    def _pair_cost(self, slow: bool) -> float:
        return self.attention_s_per_pair * (self.slow_attention_factor if slow else 1.0)

    def chunk_cost(self, start: int, tokens: int, slow: bool = False) -> float:
        return self.scale * (tokens * self.matmul_s_per_token + tokens * (start + tokens / 2) * self._pair_cost(slow))

    def observe(self, estimate: float, measured: float) -> None:
        """A budgeted step estimated at `estimate` s (overhead included, at the current
        scale) took `measured` s: move the scale toward what that step says."""
        modelled = (estimate - self.overhead_s) / self.scale
        if modelled <= 0 or measured <= 0:
            return
        ratio = max(0.0, measured - self.overhead_s) / modelled
        lo, hi = self.SCALE_BOUNDS
        self.scale = min(hi, max(lo, self.scale + self.SCALE_WEIGHT * (ratio - self.scale)))

    def max_chunk(self, start: int, seconds: float, slow: bool = False) -> int:
        """Largest chunk at context depth `start` that fits in `seconds` (at least 1)."""
        if seconds <= 0:
            return 1
        seconds /= self.scale
        pair = self._pair_cost(slow)
        a = pair / 2
        b = self.matmul_s_per_token + start * pair
        tokens = (-b + math.sqrt(b * b + 4 * a * seconds)) / (2 * a) if a > 0 else seconds / b
        return max(1, int(tokens))
