"""Number formatting shared by the panels and the chat."""
from __future__ import annotations

from typing import Optional


def fmt_seconds(seconds: Optional[float]) -> str:
    if seconds is None:
        return "–"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def fmt_rate(tokens_per_s: Optional[float]) -> str:
    if not tokens_per_s:
        return "–"
    return f"{tokens_per_s:,.0f} tok/s" if tokens_per_s >= 100 else f"{tokens_per_s:.1f} tok/s"


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_error(relative: Optional[float]) -> str:
    """Forecast error as +12% / -8%."""
    return "–" if relative is None else f"{relative * 100:+.0f}%"


def fmt_eta(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    return "almost done" if seconds < 0.5 else f"about {fmt_seconds(seconds)} left"
