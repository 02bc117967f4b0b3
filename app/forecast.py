"""TTFT forecast: a small model of prefill time, fitted to requests measured on this machine.

    prefill_seconds(new, cached) = c + a * new/1e3 + b * ((cached+new)^2 - cached^2)/1e6

`a` is the cost of the linear work (weights x tokens), `b` the cost of causal attention over the
whole context (the same split as the FLOPs formula 2*W*T + 2*T^2*hidden*layers). A warm request
starts at `cached` with that many tokens already in the KV cache: its linear work shrinks to the
new tokens, its attention work to the new tokens' rows. Coefficients are a non-negative,
relative-error least-squares fit of recent measurements plus two pseudo-samples from a prior,
so the first forecast is sane and real measurements take over quickly.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

log = logging.getLogger("longread.forecast")

# Prior: SmolLM2-135M, float32, 2 CPU cores, 512-token steps (measured: 512 tokens 1.3 s,
# 2048 tokens 6.3 s, 2800 tokens 10.7 s), rounded towards slower. Only a seed: start-up
# calibration and every answered request refit it to the machine at hand.
PRIOR = (0.05, 2.6, 0.5)          # (c seconds, a seconds per 1K tokens, b seconds per 1M pairs)
PRIOR_POINTS = (256, 2048)        # prompt sizes of the prior's pseudo-samples
PRIOR_WEIGHT = 0.5                # each pseudo-sample counts as half a real measurement
MAX_SAMPLES = 64
WARM_FRACTION = 0.5               # cached share of the prompt from which a forecast is "warm"


def features(new_tokens: int, cached_tokens: int) -> np.ndarray:
    total = cached_tokens + new_tokens
    return np.array([1.0, new_tokens / 1e3, (total * total - cached_tokens * cached_tokens) / 1e6])


def nonnegative_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least squares with every coefficient >= 0 (exact: tries each active set)."""
    n = x.shape[1]
    sw = np.sqrt(w)[:, None]
    xs, ys = x * sw, y * sw[:, 0]
    best, best_err = np.zeros(n), float(np.sum(ys ** 2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            coef, *_ = np.linalg.lstsq(xs[:, cols], ys, rcond=None)
            if np.any(coef < 0):
                continue
            theta = np.zeros(n)
            theta[list(cols)] = coef
            err = float(np.sum((xs @ theta - ys) ** 2))
            if err < best_err - 1e-12:
                best, best_err = theta, err
    return best


@dataclass
class Sample:
    new_tokens: int
    cached_tokens: int
    seconds: float


@dataclass
class Forecast:
    num_tokens: int
    cached_tokens: int            # what the prefix cache holds for this prompt right now
    cold_seconds: float           # nothing cached
    warm_seconds: float           # starting from `cached_tokens` (== cold when nothing is cached)
    num_samples: int              # measurements behind the model (0 = prior only)

    @property
    def is_warm(self) -> bool:
        return self.num_tokens > 0 and self.cached_tokens >= WARM_FRACTION * self.num_tokens

    @property
    def expected_seconds(self) -> float:
        """The forecast for this prompt as things stand (cache hit included)."""
        return self.warm_seconds if self.cached_tokens > 0 else self.cold_seconds


class PrefillModel:
    """Thread-safe: the engine's requests finish on many threads."""

    def __init__(self, prior: Sequence[float] = PRIOR):
        self.prior = np.array(prior, dtype=float)
        self.samples: deque = deque(maxlen=MAX_SAMPLES)
        self.theta = self.prior.copy()
        self._lock = threading.Lock()

    def observe(self, new_tokens: int, cached_tokens: int, seconds: Optional[float]) -> None:
        if seconds is None or seconds <= 0 or new_tokens <= 0:
            return
        with self._lock:
            self.samples.append(Sample(new_tokens, cached_tokens, seconds))
            self.theta = self._fit()

    def _fit(self) -> np.ndarray:
        rows, ys, ws = [], [], []
        for n in PRIOR_POINTS:
            rows.append(features(n, 0))
            ys.append(float(features(n, 0) @ self.prior))
            ws.append(PRIOR_WEIGHT)
        count = len(self.samples)
        for i, s in enumerate(self.samples):
            rows.append(features(s.new_tokens, s.cached_tokens))
            ys.append(s.seconds)
            ws.append(0.5 + 0.5 * (i + 1) / count)          # recent requests weigh more
        x, y, w = np.array(rows), np.array(ys), np.array(ws)
        w = w / np.maximum(y, 0.05) ** 2                     # relative error: 0.2 s and 20 s alike
        theta = nonnegative_fit(x, y, w)
        if theta[1] == 0 and theta[2] == 0:                  # degenerate data: keep the prior's shape
            return self.prior.copy()
        return theta

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    def predict(self, new_tokens: int, cached_tokens: int = 0) -> float:
        if new_tokens <= 0:
            return 0.0
        with self._lock:
            theta = self.theta
        return float(features(new_tokens, cached_tokens) @ theta)

    def forecast(self, num_tokens: int, cached_tokens: int) -> Forecast:
        # The engine always computes the last prompt token, so at most num_tokens - 1 are reused.
        cached = max(0, min(cached_tokens, num_tokens - 1))
        return Forecast(num_tokens, cached, self.predict(num_tokens, 0),
                        self.predict(num_tokens - cached, cached), self.num_samples)

    def eta(self, total: int, cached: int, done: int, elapsed: float) -> Optional[float]:
        """Seconds left in a prefill that has read `done` of `total` tokens after `elapsed` s
        (`cached` of them came from the cache). Scaled by how the model did so far."""
        if done >= total:
            return 0.0
        remaining = self.predict(total - done, done) - self.theta[0]
        computed = done - cached
        if computed > 0 and elapsed > 0:
            so_far = self.predict(computed, cached)
            if so_far > 0:
                remaining *= min(3.0, max(0.33, elapsed / so_far))
        return max(0.0, remaining)


def calibrate(engine, model: PrefillModel, sizes: Tuple[int, ...] = (128, 512)) -> None:
    """Time a few cold prefills of synthetic prompts (1 output token each) to seed the model."""
    from engine import SamplingParams

    vocab_floor, span = 1000, 20000
    for size in sizes:
        size = min(size, engine.max_model_len - 2)
        # A fresh token pattern per run and per start, so the prefix cache never helps.
        seed = int(time.time() * 1000) % 9973
        ids = [vocab_floor + (seed + 7919 * i) % span for i in range(size)]
        start = time.monotonic()
        out = engine.generate([ids], SamplingParams(max_tokens=1, temperature=0))[0]
        m = out.metrics
        model.observe(size - out.num_cached_tokens, out.num_cached_tokens, m.prefill_time)
        log.info("calibration: %d tokens prefilled in %.2f s", size, time.monotonic() - start)
