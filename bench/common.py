"""Provenance and output helpers shared by the benchmarks (no app packages needed)."""
from __future__ import annotations

import datetime as _dt
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(device: torch.device) -> Dict[str, object]:
    import transformers
    return {
        "device": device_name(device),
        "device_type": device.type,
        "num_devices": torch.cuda.device_count() if device.type == "cuda" else 1,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m " + " ".join(shlex.quote(a) for a in [_module_name()] + sys.argv[1:]),
        "git_commit": git_commit(),
        "host": platform.node(),
    }


def _module_name() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec.name if spec is not None else Path(sys.argv[0]).stem


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int = 3, warmup: int = 1) -> List[float]:
    """Wall-clock seconds of `repeats` calls (after `warmup` calls), device-synchronized."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def write_result(name: str, device: torch.device, payload: Dict[str, object]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{name}-{device.type}-{stamp}.json"
    path.write_text(json.dumps({**provenance(device), **payload}, indent=2) + "\n")
    return path


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
