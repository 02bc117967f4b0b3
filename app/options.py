"""Runtime settings of the app, decided once at start-up (from the command line)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

DEFAULT_MAX_FILE_MB = 50.0
DEFAULT_MAX_NEW_TOKENS = 512
# Per-step token budget of the engine. On CPU a 512-token step takes ~1.5-2 s, so prefill
# progress, Stop and other users' decodes all respond within about one step.
# On a GPU the engine's default (about 8192, sized to the device: engine/step_shape.py).
CPU_STEP_TOKENS = 512


@dataclass
class AppOptions:
    model: Optional[str] = None               # None = the embedded default model
    device: str = "auto"                      # the single device the engine runs on
    requested_devices: List[str] = field(default_factory=list)   # as given on the command line
    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    auth: List[Tuple[str, str]] = field(default_factory=list)
    max_file_mb: float = DEFAULT_MAX_FILE_MB
    calibrate: bool = True                    # measure prefill speed at start-up for the forecast
    default_max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    step_tokens: Optional[int] = None         # None = CPU_STEP_TOKENS on CPU, the engine's default on a GPU

    @property
    def max_file_bytes(self) -> int:
        return max(1, int(self.max_file_mb * 1024 * 1024))
