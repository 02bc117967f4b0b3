"""Metrics history, cache-state classification, chart frames and the memory split."""
import time

import pandas as pd

from app import charts
from app.metrics import MetricsHistory, RequestRecord, Sample, cache_state, record_from_output
from app.sampler import device_memory
from engine import CompletionOutput, RequestMetrics, RequestOutput

GIB = 1024 ** 3


def record(index, ttft, cached=0, prompt=1000, forecast=None):
    return RequestRecord(index, f"r{index}", time.time(), prompt, cached, 10, ttft, 0.0, ttft,
                         0.1, 100.0, 5.0, "stop", forecast_ttft=forecast)


def sample(t, used=10, cached=5, total=100, queries=0, hits=0):
    return Sample(time=t, kv_blocks_total=total, kv_blocks_free=total - used,
                  kv_blocks_cached=cached, prefix_cache_queries=queries, prefix_cache_hits=hits,
                  num_running=0, num_waiting=0, process_rss=3 * GIB, system_used=8 * GIB,
                  system_total=24 * GIB,
                  devices={"cpu (host RAM)": {"weights": GIB, "kv_used": GIB // 2, "other": GIB}})


def test_cache_state_thresholds():
    assert cache_state(0, 1000) == "cold"
    assert cache_state(32, 1000) == "cold"          # a shared system prompt is still cold
    assert cache_state(300, 1000) == "partial"
    assert cache_state(990, 1000) == "warm"
    assert cache_state(0, 0) == "cold"


def test_record_from_a_real_request_output():
    m = RequestMetrics(arrival_time=10.0, first_scheduled_time=10.5, first_token_time=14.5,
                       second_token_time=14.7, finished_time=16.0, last_token_time=16.0,
                       num_prompt_tokens=2000, num_cached_tokens=0, num_generated_tokens=8)
    out = RequestOutput("chat-1", None, [1] * 2000,
                        [CompletionOutput(0, "hi", [5] * 8, finish_reason="stop")], True, 0, m)
    r = record_from_output(out, 1, forecast_ttft=4.0)
    assert (r.ttft, r.queue_time, r.prefill_time) == (4.5, 0.5, 4.0)
    assert abs(r.first_decode_time - 0.2) < 1e-9
    assert r.prefill_tokens_per_s == 500.0 and r.cache_state == "cold"
    assert abs(r.forecast_error - 0.125) < 1e-9
    assert r.as_dict()["cache_state"] == "cold"


def test_history_is_bounded_and_versioned():
    history = MetricsHistory(max_records=3, max_samples=5)
    assert [history.next_index() for _ in range(3)] == [1, 2, 3]
    for i in range(5):
        history.add_record(record(i, 1.0))
    assert [r.index for r in history.records()] == [2, 3, 4]
    assert history.records_version == 5
    for t in range(10):
        history.add_sample(sample(float(t)))
    assert len(history.samples()) == 5 and history.latest_sample().time == 9.0
    assert [s.time for s in history.samples(window_s=2)] == [7.0, 8.0, 9.0]


def test_chart_frames_have_fixed_types_even_when_empty():
    for df, kinds in [(charts.memory_frame(None), {"GiB": "float64"}),
                      (charts.host_frame([]), {"time": "datetime64[ns]"}),
                      (charts.kv_frame([]), {"percent": "float64"}),
                      (charts.ttft_frame([]), {"TTFT (s)": "float64"})]:
        assert len(df) == 0
        for col, dtype in kinds.items():
            assert str(df[col].dtype) == dtype
        assert charts.plot_value(df) is None


def test_chart_frames_content():
    samples = [sample(100.0, queries=0), sample(101.0, used=50, queries=10, hits=4)]
    kv = charts.kv_frame(samples)
    hit = kv[kv.series == "prefix-cache hit rate %"]
    assert list(hit.percent) == [40.0]                    # no lookups yet: no hit-rate point
    assert kv[kv.series == "KV in use %"].percent.tolist() == [10.0, 50.0]
    host = charts.host_frame(samples)
    assert set(host.series) == {"process RSS", "system used"} and host.GiB.max() == 8.0
    mem = charts.memory_frame(samples[-1])
    assert mem.groupby("device").GiB.sum().iloc[0] == 2.5
    ttft = charts.ttft_frame([record(1, 20.0, forecast=18.0), record(2, 0.3, cached=990)])
    assert ttft.kind.tolist() == ["cold", "forecast", "warm"]
    assert ttft.request.tolist() == ["#1", "#1", "#2"]
    assert isinstance(charts.plot_value(ttft), pd.DataFrame)


def test_device_memory_split_on_cpu_and_gpu():
    stats = {"memory": {"weights_bytes": 500, "kv_cache_bytes": 1000, "workspace_bytes": 100},
             "kv_blocks_total": 10, "kv_blocks_free": 6, "kv_blocks_cached": 2}
    cpu = device_memory(stats, process_rss=2000, cuda_reserved=None)
    assert cpu["kv_used"] == 400 and cpu["kv_cached"] == 200 and cpu["kv_free"] == 400
    assert cpu["other"] == 2000 - 500 - 1000 - 100
    gpu = device_memory(stats, process_rss=10 ** 9, cuda_reserved=1700)
    assert gpu["other"] == 100                          # the allocator's reserve, not host RSS
    stats["memory"]["vision_cache_bytes"] = 50
    vl = device_memory(stats, process_rss=2000, cuda_reserved=None)
    assert vl["vision_pool"] == 50 and vl["other"] == cpu["other"] - 50
