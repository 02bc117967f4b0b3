"""Once a second: read engine.stats(), host RAM (psutil) and CUDA memory into MetricsHistory.

Sampling happens on the server, not per browser tab, so every tab shows the same history,
including what happened before it was opened.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Dict, Optional

import psutil

from .metrics import MetricsHistory, Sample

log = logging.getLogger("longread.sampler")


def device_memory(stats: dict, process_rss: int, cuda_reserved: Optional[int]) -> Dict[str, int]:
    """Split one device's memory into weights / KV (used, cached prefixes, free) / workspace /
    vision pool / other. "other" is what the process holds beyond the engine's fixed pools: on a GPU the
    allocator's reserve, on the CPU the rest of the process (Python, tokenizer, Gradio)."""
    memory = stats.get("memory", {})
    weights = int(memory.get("weights_bytes", 0))
    kv_pool = int(memory.get("kv_cache_bytes", 0))
    workspace = int(memory.get("workspace_bytes", 0))
    vision = int(memory.get("vision_cache_bytes", 0))       # vision models only
    total_blocks = stats.get("kv_blocks_total") or 0
    per_block = kv_pool / total_blocks if total_blocks else 0.0
    free, cached = stats.get("kv_blocks_free", 0), stats.get("kv_blocks_cached", 0)
    used_bytes = int((total_blocks - free) * per_block)
    cached_bytes = int(cached * per_block)
    parts = {"weights": weights, "kv_used": used_bytes, "kv_cached": cached_bytes,
             "kv_free": max(0, kv_pool - used_bytes - cached_bytes), "workspace": workspace,
             "vision_pool": vision}
    held = cuda_reserved if cuda_reserved is not None else process_rss
    parts["other"] = max(0, held - weights - kv_pool - workspace - vision)
    return parts


def cuda_reserved_bytes(device: str) -> Optional[int]:
    if not device.startswith("cuda"):
        return None
    try:
        import torch
        return int(torch.cuda.memory_reserved(torch.device(device)))
    except Exception:                       # a sample must never take the app down
        return None


def take_sample(engine, process: Optional[psutil.Process] = None) -> Sample:
    stats = engine.stats()
    process = process or psutil.Process()
    rss = process.memory_info().rss
    vm = psutil.virtual_memory()
    device = str(stats.get("device", "cpu"))
    label = "cpu (host RAM)" if device == "cpu" else device
    devices = {label: device_memory(stats, rss, cuda_reserved_bytes(device))}
    return Sample(time=time.time(), kv_blocks_total=stats.get("kv_blocks_total", 0),
                  kv_blocks_free=stats.get("kv_blocks_free", 0),
                  kv_blocks_cached=stats.get("kv_blocks_cached", 0),
                  prefix_cache_queries=stats.get("prefix_cache_queries", 0),
                  prefix_cache_hits=stats.get("prefix_cache_hits", 0),
                  num_running=stats.get("num_running", 0), num_waiting=stats.get("num_waiting", 0),
                  process_rss=rss, system_used=vm.total - vm.available, system_total=vm.total,
                  devices=devices)


class Sampler:
    def __init__(self, engine, history: MetricsHistory, interval_s: float = 1.0):
        self.engine, self.history, self.interval_s = engine, history, interval_s
        self._stop = threading.Event()
        self._process = psutil.Process()
        self._thread = threading.Thread(target=self._run, name="longread-sampler", daemon=True)

    def start(self) -> "Sampler":
        self.sample_now()
        self._thread.start()
        return self

    def sample_now(self) -> None:
        try:
            self.history.add_sample(take_sample(self.engine, self._process))
        except Exception:
            log.exception("sampling the engine failed")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_now()

    def stop(self) -> None:
        self._stop.set()
