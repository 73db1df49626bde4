"""Ctrl-C for the command line: one line on stderr and exit status 130, at any moment.

Python turns SIGINT into ``KeyboardInterrupt`` only where the main thread runs Python
code, and raises it wherever that is: inside a garbage-collector callback (where it is
printed and lost), or while JAX compiles or computes on other threads (an interpreter
that unwinds and shuts down under them can crash).  So once its arguments are parsed,
a command that computes hands SIGINT to ``end_on_interrupt``: the signal wakes a watcher
thread (``signal.set_wakeup_fd``), which prints the line and ends the process at once
(``os._exit``), whatever the main thread is doing.

Ending at once is what the result store is built for: its appends are atomic, and a
rerun resumes from the last complete one, as after ``kill -9``.  A SIGINT that the
parent ignores (a background job of a non-interactive shell) stays ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

__all__ = ["INTERRUPTED", "end_on_interrupt"]

INTERRUPTED = 130
"""Exit status of an interrupted command (128 + SIGINT), as shells report Ctrl-C."""

_ending = threading.Lock()


def end_on_interrupt(message: str) -> bool:
    """From now on, SIGINT prints ``message`` on stderr and ends the process with status
    ``INTERRUPTED``.  Call from the main thread; returns ``False`` (and changes nothing)
    when SIGINT is ignored, as it is for a background job of a non-interactive shell."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return False
    line = (("\n" if sys.stderr is not None and sys.stderr.isatty() else "") + message
            + "\n").encode()
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    signal.signal(signal.SIGINT, lambda signum, frame: _end(line))

    def watch():
        while True:
            if signal.SIGINT in os.read(read, 64):
                _end(line)

    threading.Thread(target=watch, name="jaxsynth-interrupt", daemon=True).start()
    return True


def _end(line: bytes) -> None:
    """Print ``line`` and end the process, once (the handler and the watcher may race)."""
    if _ending.acquire(blocking=False):
        try:
            os.write(2, line)
        finally:
            os._exit(INTERRUPTED)
