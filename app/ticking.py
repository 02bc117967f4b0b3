"""Read a blocking iterator from a helper thread and tick while it is quiet.

The engine publishes an output per step; a step can take seconds on a CPU. Wrapping the
engine stream in a TickingStream lets the UI refresh its elapsed time and ETA every `tick_s`
seconds, and keeps the consumer (a Gradio generator) responsive to being closed: it is
never blocked for longer than one tick.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator, Optional, TypeVar

T = TypeVar("T")
_ITEM, _ERROR, _END = "item", "error", "end"


class TickingStream:
    def __init__(self, source: Iterator[T], tick_s: float = 0.5):
        self.tick_s = tick_s
        self._queue: "queue.Queue" = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(source,),
                                        name="longread-stream", daemon=True)
        self._thread.start()

    def _pump(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                self._queue.put((_ITEM, item))
        except BaseException as exc:          # handed to the consumer, raised there
            self._queue.put((_ERROR, exc))
        finally:
            self._queue.put((_END, None))

    def __iter__(self) -> Iterator[Optional[T]]:
        """Yields the newest item (older queued ones are skipped: every output is a full
        snapshot), or None when nothing arrived for `tick_s` seconds."""
        while True:
            try:
                kind, item = self._queue.get(timeout=self.tick_s)
            except queue.Empty:
                yield None
                continue
            while kind == _ITEM:                  # coalesce a backlog into the newest item
                try:
                    next_kind, next_item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if next_kind != _ITEM:
                    yield item
                    kind, item = next_kind, next_item
                    break
                item = next_item
            if kind == _END:
                return
            if kind == _ERROR:
                raise item
            yield item

    def join(self, timeout: Optional[float] = None) -> None:
        self._thread.join(timeout)
