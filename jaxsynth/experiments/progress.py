"""Progress of a sweep: one line for the whole run, rounds included.

A progress meter is an object passed to the sweep (as diffrax passes its
``progress_meter`` to ``diffeqsolve``): ``NoProgress`` shows nothing, ``TextProgress``
keeps one line on a stream (stderr by default), rewritten in place, with the replicates
done out of the current plan, the rate, the time left and the round of a sweep to a
precision.  A report before the work (the cost estimate) is printed above the line by
``note``.  A meter shows nothing before ``delay`` seconds, so a short sweep prints no line.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, runtime_checkable

__all__ = ["NoProgress", "Progress", "TextProgress", "duration"]


@runtime_checkable
class Progress(Protocol):
    """What the sweep tells a progress meter."""

    def note(self, text: str) -> None:
        """A report to show once, before the work (the cost estimate)."""

    def plan(self, total: int, done: int, round: int | None = None) -> None:
        """The current plan: ``total`` replicates, ``done`` of them already there; ``round``
        (from 1) in a sweep to a precision, whose plan grows round by round."""

    def advance(self, count: int) -> None:
        """``count`` more replicates finished."""

    def close(self) -> None:
        """The sweep ended (or failed): finish the line."""


class NoProgress:
    """Shows nothing."""

    def note(self, text: str) -> None:
        pass

    def plan(self, total: int, done: int, round: int | None = None) -> None:
        pass

    def advance(self, count: int) -> None:
        pass

    def close(self) -> None:
        pass


def duration(seconds: float) -> str:
    """Seconds as a short text: in seconds below two minutes, in minutes below two hours,
    else in hours (one decimal)."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class TextProgress:
    """One line on ``stream``, rewritten in place (``\\r``) at most every ``interval`` s.

    The line reads ``simulate: round 2 · 96/160 replicates (60%) · 3.1 rep/s · 21 s left``;
    the rate and the time left are those of the replicates computed in this run.
    """

    def __init__(self, stream=None, delay: float = 2.0, interval: float = 0.5):
        self.stream = stream
        self.delay, self.interval = float(delay), float(interval)
        self.total = self.done = self.counted = 0
        self.round = None
        self.started = time.perf_counter()
        self.shown = None  # when the line was last written (None: not yet)
        self.width = 0

    def _out(self):
        return self.stream if self.stream is not None else sys.stderr

    def note(self, text: str) -> None:
        self._clear()
        print(text, file=self._out(), flush=True)

    def plan(self, total: int, done: int, round: int | None = None) -> None:
        self.total, self.done, self.round = int(total), int(done), round
        self._show(force=self.shown is not None)

    def advance(self, count: int) -> None:
        self.done += int(count)
        self.counted += int(count)
        self._show()

    def close(self) -> None:
        if self.shown is not None:
            self._show(force=True)
            print(file=self._out(), flush=True)
            self.shown = None

    def line(self) -> str:
        """The current line."""
        elapsed = time.perf_counter() - self.started
        parts = [f"round {self.round}"] if self.round is not None else []
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        parts.append(f"{self.done}/{self.total} replicates{share}")
        if self.counted and elapsed > 0:
            rate = self.counted / elapsed
            parts.append(f"{rate:.3g} rep/s")
            parts.append(f"{duration(max(self.total - self.done, 0) / rate)} left")
        return "simulate: " + " · ".join(parts)

    def _show(self, force: bool = False) -> None:
        now = time.perf_counter()
        if now - self.started < self.delay and not (force and self.shown is not None):
            return
        if not force and self.shown is not None and now - self.shown < self.interval:
            return
        text = self.line()
        out = self._out()
        out.write("\r" + text + " " * max(0, self.width - len(text)))
        out.flush()
        self.width, self.shown = len(text), now

    def _clear(self) -> None:
        """Blank the line before a note (which then starts at the line's beginning)."""
        if self.shown is not None:
            self._out().write("\r" + " " * self.width + "\r")
            self.width = 0
