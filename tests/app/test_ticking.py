"""TickingStream: ticks while the source is quiet, keeps only the newest item, passes errors."""
import time

import pytest

from app.ticking import TickingStream


def slow(items, delay):
    for item in items:
        time.sleep(delay)
        yield item


def test_ticks_while_waiting():
    out = list(TickingStream(slow([1, 2], 0.35), tick_s=0.1))
    assert [x for x in out if x is not None] == [1, 2]
    assert out.count(None) >= 3


def test_backlog_is_coalesced_to_the_newest():
    def burst():
        yield from range(100)
        time.sleep(0.3)
        yield "last"
    stream = TickingStream(burst(), tick_s=0.05)
    time.sleep(0.2)                          # let the burst queue up
    items = [x for x in stream if x is not None]
    assert items[-1] == "last" and 99 in items and len(items) < 50


def test_errors_reach_the_consumer():
    def broken():
        yield 1
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        list(TickingStream(broken(), tick_s=0.05))
