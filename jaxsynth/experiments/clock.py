"""Wall time with JAX's compilation apart, so a sweep's timing columns never hold it.

JAX reports every tracing, lowering and XLA compilation as a time span
(``jax.monitoring``; events under ``/jax/core/compile/``).  ``Clock`` listens while a
block runs and reports the block's seconds and the part of them spent compiling: the
union of those spans (a jit traced inside another's trace is one span, not two).
"""

from __future__ import annotations

import threading
import time

import jax

__all__ = ["Clock"]

COMPILE_EVENTS = "/jax/core/compile/"
"""The prefix of JAX's compilation events (trace, lowering, backend compile)."""


class Clock:
    """``with Clock() as clock: ...`` then ``clock.seconds`` and ``clock.compile``."""

    def __init__(self):
        self.seconds = self.compile = 0.0
        self._spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def _listen(self, event: str, start: float, end: float, **_) -> None:
        if event.startswith(COMPILE_EVENTS):
            with self._lock:
                self._spans.append((start, end))

    def __enter__(self) -> "Clock":
        jax.monitoring.register_event_time_span_listener(self._listen)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._start
        jax.monitoring.unregister_event_time_span_listener(self._listen)
        covered, end = 0.0, -float("inf")
        for start, stop in sorted(self._spans):
            if stop > end:
                covered += stop - max(start, end)
                end = stop
        self.compile = min(covered, self.seconds)

    @property
    def work(self) -> float:
        """The block's seconds less its compilation."""
        return max(0.0, self.seconds - self.compile)
