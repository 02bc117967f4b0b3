"""Chart data as pandas DataFrames (pure functions of MetricsHistory contents).

Column names are what the plots show on their axes and legends.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import pandas as pd

from .metrics import RequestRecord, Sample

GIB = 1024 ** 3
TTFT_RECENT = 20                  # requests shown in the TTFT chart
MEMORY_PARTS = [("weights", "weights"), ("kv_used", "KV in use"),
                ("kv_cached", "KV cached"), ("kv_free", "KV free"),
                ("workspace", "workspace"), ("vision_pool", "vision"), ("other", "other")]
MEMORY_COLORS = {"weights": "#6366f1", "KV in use": "#f97316", "KV cached": "#22c55e",
                 "KV free": "#cbd5e1", "workspace": "#a855f7", "vision": "#ec4899",
                 "other": "#94a3b8"}
TTFT_COLORS = {"cold": "#3b82f6", "warm": "#f97316", "partial": "#eab308", "forecast": "#475569"}
HOST_COLORS = {"process RSS": "#6366f1", "system used": "#94a3b8"}
KV_COLORS = {"KV in use %": "#f97316", "KV in use + cached %": "#22c55e",
             "prefix-cache hit rate %": "#3b82f6"}


def frame(rows: List[dict], schema: Dict[str, str]) -> pd.DataFrame:
    """A DataFrame with fixed column dtypes, even when empty: Gradio picks each axis type
    (nominal / quantitative / temporal) from the dtypes of the first value it sees."""
    df = pd.DataFrame(rows, columns=list(schema))
    return df.astype(schema)


def plot_value(df: pd.DataFrame) -> Optional[pd.DataFrame]:
    """What to hand a Gradio plot: None rather than an empty frame (a plot that first gets an
    empty frame draws no marks for later data, in Gradio 6.31)."""
    return df if len(df) else None


MEMORY_SCHEMA = {"device": "string", "part": "string", "GiB": "float64"}
HOST_SCHEMA = {"time": "datetime64[ns]", "series": "string", "GiB": "float64"}
KV_SCHEMA = {"time": "datetime64[ns]", "series": "string", "percent": "float64"}
TTFT_SCHEMA = {"request": "string", "TTFT (s)": "float64", "kind": "string"}


def memory_frame(sample: Optional[Sample]) -> pd.DataFrame:
    """Stacked bar per device: GiB per part."""
    rows = []
    if sample is not None:
        for device, parts in sample.devices.items():
            for key, label in MEMORY_PARTS:
                rows.append({"device": device, "part": label, "GiB": parts.get(key, 0) / GIB})
    return frame(rows, MEMORY_SCHEMA)


def _times(samples: List[Sample]) -> List[pd.Timestamp]:
    return [pd.Timestamp(s.time, unit="s") for s in samples]


def host_frame(samples: List[Sample]) -> pd.DataFrame:
    rows = []
    for t, s in zip(_times(samples), samples):
        rows.append({"time": t, "series": "process RSS", "GiB": s.process_rss / GIB})
        rows.append({"time": t, "series": "system used", "GiB": s.system_used / GIB})
    return frame(rows, HOST_SCHEMA)


def kv_frame(samples: List[Sample]) -> pd.DataFrame:
    """KV pool use and the prefix-cache hit rate (hit tokens / looked-up tokens, cumulative)."""
    rows = []
    for t, s in zip(_times(samples), samples):
        rows.append({"time": t, "series": "KV in use %", "percent": 100 * s.kv_used_fraction})
        rows.append({"time": t, "series": "KV in use + cached %",
                     "percent": 100 * (s.kv_used_fraction + s.kv_cached_fraction)})
        if s.hit_rate is not None:
            rows.append({"time": t, "series": "prefix-cache hit rate %", "percent": 100 * s.hit_rate})
    return frame(rows, KV_SCHEMA)


def request_label(record: RequestRecord) -> str:
    return f"#{record.index}"


def ttft_frame(records: List[RequestRecord]) -> pd.DataFrame:
    """Measured TTFT per request, coloured cold / partial / warm, next to its forecast."""
    rows = []
    for r in records:
        if r.ttft is not None:
            rows.append({"request": request_label(r), "TTFT (s)": r.ttft, "kind": r.cache_state})
        if r.forecast_ttft is not None:
            rows.append({"request": request_label(r), "TTFT (s)": r.forecast_ttft, "kind": "forecast"})
    return frame(rows, TTFT_SCHEMA)
