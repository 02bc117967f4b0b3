"""Shared benchmark plumbing: provenance, timing helpers, JSON results."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any, Dict

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def provenance(device: str) -> Dict[str, Any]:
    import transformers
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), "-m",
                                                      _module_name()] + sys.argv[1:]),
        "device": device_name(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
    }


def _module_name() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec.name if spec else sys.argv[0]


def write_result(name: str, device: str, payload: Dict[str, Any], out_dir: str | None = None) -> Path:
    record = {"benchmark": name, **provenance(device), **payload}
    directory = Path(out_dir) if out_dir else RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = directory / f"{name}-{kind}-{stamp}.json"
    path.write_text(json.dumps(record, indent=2))
    print(f"wrote {path}")
    return path


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def print_table(rows, columns) -> None:
    widths = [max(len(str(c)), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths)))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths)))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    return "-" if v is None else str(v)
