"""`--devices` parsing: "auto", "cpu", "cuda", "cuda:0", "cuda:0,1" or "cuda:0,cuda:1".

The engine runs on one device today. Several devices name a context-parallel engine that has
not landed yet: `choose_engine_device` then falls back to the first device and says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

_ITEM = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class DeviceError(ValueError):
    """The --devices value is malformed or names hardware that is not there."""


@dataclass
class DeviceChoice:
    device: str                  # what EngineConfig.device gets
    requested: List[str]         # normalised list from the flag
    message: Optional[str]       # a note for the user (fallback), or None


def parse_devices(spec: str) -> List[str]:
    """Normalise a --devices value into a list like ["cuda:0", "cuda:1"] (or ["auto"])."""
    spec = (spec or "").strip().lower()
    if spec in ("", "auto"):
        return ["auto"]
    devices: List[str] = []
    last_type = None
    for raw in spec.split(","):
        item = raw.strip()
        if item.isdigit() and last_type == "cuda":       # "cuda:0,1" -> cuda:0, cuda:1
            item = f"cuda:{item}"
        match = _ITEM.match(item)
        if not match:
            raise DeviceError(f"--devices: {raw.strip()!r} is not a device; use e.g. cpu, cuda, "
                              f"cuda:0 or cuda:0,1")
        kind, index = match.groups()
        if kind == "cpu" and index is not None:
            raise DeviceError("--devices: use plain 'cpu' (CPU devices have no index)")
        last_type = kind
        devices.append(f"{kind}:{index}" if index is not None else kind)
    if len(set(devices)) != len(devices):
        raise DeviceError(f"--devices: {spec!r} names a device twice")
    if "cpu" in devices and len(devices) > 1:
        raise DeviceError("--devices: cpu cannot be combined with GPUs")
    return devices


def check_available(devices: List[str], cuda_count: int) -> None:
    for device in devices:
        if not device.startswith("cuda"):
            continue
        if cuda_count == 0:
            raise DeviceError(f"--devices {device}: no CUDA GPU is visible on this machine; "
                              f"use --devices cpu")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= cuda_count:
            raise DeviceError(f"--devices {device}: only {cuda_count} CUDA GPU(s) visible "
                              f"(cuda:0..cuda:{cuda_count - 1})")


def choose_engine_device(spec: str, cuda_count: Optional[int] = None) -> DeviceChoice:
    """Validate --devices and pick the engine's device. Raises DeviceError with a clear message."""
    if cuda_count is None:
        import torch
        cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    devices = parse_devices(spec)
    check_available(devices, cuda_count)
    if len(devices) == 1:
        return DeviceChoice(devices[0], devices, None)
    message = (f"--devices {','.join(devices)}: context-parallel prefill over several devices is "
               f"not available in this engine yet; running on {devices[0]} only.")
    return DeviceChoice(devices[0], devices, message)
