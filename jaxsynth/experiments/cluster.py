"""One sweep over many processes: joining a ``jax.distributed`` cluster, splitting the
work and carrying finished rows to the one process that writes the result store.

A sweep's replicates depend only on ``(key, seed)``, so the processes of a cluster never
exchange arrays: they exchange small text messages through the key-value store of JAX's
coordination service (which runs inside process 0).  The protocol of one ``simulate``
call (``Team``, driven by ``sinks.ClusterSink``), every message under one prefix per call
and numbered by kind, so every process's n-th message of a kind has the same name:

1. process 0 publishes its sweep's settings; every other process compares its own and
   stops on a difference, naming it;
2. each round, process 0 publishes the work left (``broadcast``); each process takes its
   share (``share``), loads and plans it, and waits until every process is ready, so bad
   input anywhere is refused before any row is written;
3. each process releases its share; the others send their finished rows (CSV text,
   exact floats) to process 0, which appends them to the store as they arrive;
4. each process says how many messages it has sent; process 0 ends the round when it has
   them all, and (to a precision) broadcasts the next round's seed counts.

A process that fails publishes the reason; every other process raises it at its next
wait.  A process that dies without a word (``kill -9``) stops sending heartbeats, and
JAX ends every process of the cluster after its heartbeat timeout; the store is left as
its last completed append left it, and rerunning the same command resumes the sweep.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import socket
import sys
import threading
import time

import jax
import pandas as pd

from jaxsynth import _compat

__all__ = ["DEFAULT_TIMEOUT_S", "PeerFailure", "Team", "join", "share"]

DEFAULT_TIMEOUT_S = 60
"""Seconds the processes of a cluster have to find each other (``join``)."""
MAX_TIMEOUT_S = 86400.0
"""Longest ``timeout`` of ``join`` (a day): a longer wait is no wait anyone means."""
HEARTBEAT_TIMEOUT_S = 100
"""Seconds without a heartbeat after which JAX ends a cluster whose process died."""
POLL_MS = 500
"""How long one wait for a message blocks before checking for a peer's failure."""
_calls = itertools.count()  # one message prefix per distributed ``simulate`` call
_started_with: int | None = None
"""The number of processes ``join`` was given (JAX may report process 0's instead)."""


def _address(coordinator) -> tuple[str, int]:
    if not isinstance(coordinator, str) or coordinator.count(":") < 1:
        raise ValueError(f"coordinator must be 'HOST:PORT'; got {coordinator!r}")
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"coordinator must be 'HOST:PORT' with a port in 1..65535; "
                         f"got {coordinator!r}")
    return host.strip("[]"), int(port)


def _wait_for_coordinator(host: str, port: int, timeout: float, coordinator: str) -> None:
    """Until ``timeout``: a TCP connection to the coordinator (process 0) succeeds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ValueError(
                    f"coordinator {coordinator}: nothing answered within {timeout:g} s "
                    f"({exc.strerror or exc}); start process 0 with the same --coordinator, "
                    "or raise --cluster-timeout") from None
            time.sleep(0.2)


def _check_can_listen(port: int, coordinator: str) -> None:
    """Process 0 hosts the coordination service: its port must be free here."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError as exc:
            raise ValueError(f"coordinator {coordinator}: process 0 cannot listen on port "
                             f"{port} ({exc.strerror or exc}); choose a free port") from None


def _give_up(message: str) -> None:
    print(f"jaxsynth: error: {message}", file=sys.stderr, flush=True)
    os._exit(2)


def join(coordinator=None, num_processes=None, process_id=None, *, auto: bool = False,
         timeout: float = DEFAULT_TIMEOUT_S, local_device_ids=None) -> None:
    """Join a ``jax.distributed`` cluster, after which ``simulate`` runs as one of its
    processes (``Team``).  Call it before any JAX computation.

    Either ``coordinator="HOST:PORT"``, ``num_processes`` and ``process_id`` (process 0
    runs the coordinator on that port), or ``auto=True``: JAX's cluster detection (SLURM,
    Open MPI, cloud TPU, ...; ``jax.distributed.initialize()`` without arguments).
    ``local_device_ids`` restricts this process to some of the machine's accelerators
    (one GPU per process, say).

    The cluster must form within ``timeout`` seconds: a coordinator that does not answer
    is a ``ValueError``; processes that never all join end this process with a one-line
    error (JAX's own wait cannot be interrupted), never a hang.

    Examples:
      Process ``I`` of two on one machine, first thing, then the same ``js.simulate``
      call in both (``jaxsynth launch`` does this for the command line):

          js.join_cluster("127.0.0.1:4321", num_processes=2, process_id=I)

      After any JAX computation it is too late, and refused:

      >>> import jaxsynth as js
      >>> import jax
      >>> _ = jax.devices()                          # JAX is now set up in this process
      >>> js.join_cluster("127.0.0.1:4321", num_processes=2, process_id=0)
      Traceback (most recent call last):
      ...
      ValueError: join the cluster before any JAX computation ...
    """
    if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
            or not 0 < timeout <= MAX_TIMEOUT_S):
        raise ValueError(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]; "
                         f"got {timeout!r}")
    given = [v is not None for v in (coordinator, num_processes, process_id)]
    if auto and any(given):
        raise ValueError("give either auto=True (cluster detection) or coordinator, "
                         "num_processes and process_id, not both")
    if not auto:
        if not all(given):
            raise ValueError("coordinator, num_processes and process_id are needed together "
                             "(or auto=True)")
        host, port = _address(coordinator)
        for value, name in ((num_processes, "num_processes"), (process_id, "process_id")):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer; got {value!r}")
        if num_processes < 1:
            raise ValueError(f"num_processes must be >= 1; got {num_processes}")
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id must be in 0..{num_processes - 1}; got {process_id}")
    if jax.distributed.is_initialized():
        raise ValueError("this process has already joined a jax.distributed cluster")
    if _compat.backends_are_initialized():
        raise ValueError("join the cluster before any JAX computation (JAX's devices are "
                         "already set up in this process)")
    if not auto:
        if process_id == 0:
            _check_can_listen(port, coordinator)
        else:
            _wait_for_coordinator(host, port, timeout, coordinator)
    who = "this process" if auto else f"process {process_id} of {num_processes}"
    watchdog = threading.Timer(timeout, _give_up, args=(
        f"the cluster did not form within {timeout:g} s ({who} waited for the others; every "
        "process needs the same coordinator and number of processes, and its own id)",))
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator, num_processes, process_id, local_device_ids=local_device_ids,
            initialization_timeout=int(timeout) + 30, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S)
    except (RuntimeError, ValueError) as exc:
        hint = ("; no cluster manager JAX recognises (SLURM, Open MPI, ...) was found: give "
                "the coordinator, number of processes and process id") if auto else ""
        raise ValueError(f"could not join the cluster: {' '.join(str(exc).split())}{hint}"
                         ) from None
    finally:
        watchdog.cancel()
    global _started_with
    _started_with = None if auto else num_processes


def share(items: list, index: int, count: int) -> list:
    """Part ``index`` of ``count`` contiguous, near-equal parts of ``items``."""
    n = len(items)
    return items[index * n // count: (index + 1) * n // count]


def _show(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


def difference(mine: dict, theirs: dict) -> str | None:
    """The first setting in which two sweep summaries differ, as a sentence (or None)."""
    for name in sorted(set(mine) | set(theirs)):
        if mine.get(name) != theirs.get(name):
            return (f"{name}: {_show(mine.get(name))} here, {_show(theirs.get(name))} in "
                    "process 0")
    return None


class PeerFailure(ValueError):
    """Another process of the cluster failed; its message says which and why."""


class Team:
    """The processes of a ``jax.distributed`` cluster running one ``simulate`` call.

    Process 0 (``writes``) owns the result store; the others send it their rows.
    """

    def __init__(self, client, index: int, count: int):
        self.client, self.index, self.count = client, index, count
        self.prefix = f"jaxsynth/simulate/{next(_calls)}/"
        self.sent = 0
        self._received = [0] * count  # row messages from each process
        self._steps = collections.Counter()  # messages of each kind so far (``_step``)

    @classmethod
    def current(cls) -> "Team | None":
        """The cluster this process belongs to, or ``None`` when it runs alone."""
        if not jax.distributed.is_initialized() or jax.process_count() == 1:
            return None
        return cls(_compat.distributed_client(), jax.process_index(), jax.process_count())

    @property
    def writes(self) -> bool:
        return self.index == 0

    # ------------------------------------------------------------------ messages

    def _set(self, name: str, data: bytes) -> None:
        self.client.key_value_set_bytes(self.prefix + name, data)

    def _try(self, name: str) -> bytes | None:
        try:
            return self.client.key_value_try_get_bytes(self.prefix + name)
        except jax.errors.JaxRuntimeError:
            return None

    def check(self) -> None:
        """Raise the failure another process published, if any."""
        failure = self._try("abort")
        if failure is not None:
            raise PeerFailure(failure.decode())

    def _wait(self, name: str) -> bytes:
        """A message, checking between waits that no process has failed."""
        while True:
            self.check()
            try:
                return self.client.blocking_key_value_get_bytes(self.prefix + name, POLL_MS)
            except jax.errors.JaxRuntimeError as exc:
                if "DEADLINE_EXCEEDED" not in str(exc):
                    raise

    @contextlib.contextmanager
    def guard(self):
        """Publish any failure of this process to the others, then raise it here."""
        try:
            yield self
        except BaseException as exc:
            if not isinstance(exc, PeerFailure):  # a peer's failure is already published
                reason = " ".join(str(exc).split()) or type(exc).__name__
                with contextlib.suppress(jax.errors.JaxRuntimeError):  # another's came first
                    self._set("abort", f"process {self.index} of {self.count}: {reason}"
                              .encode())
            raise

    # ------------------------------------------------------------------ the protocol

    def agree(self, summary: dict) -> None:
        """Refuse, naming the setting, a sweep that differs from process 0's, or a process
        started with another number of processes."""
        summary = {**summary, "num_processes": _started_with or self.count}
        if self.writes:
            self._set("summary", json.dumps(summary, sort_keys=True).encode())
            return
        theirs = json.loads(self._wait("summary"))
        diff = difference(json.loads(json.dumps(summary)), theirs)
        if diff is not None:
            raise ValueError(f"this process's sweep differs from process 0's, in {diff}; "
                             "every process must run the same sweep")

    def _step(self, kind: str) -> str:
        """The name of this process's next message of ``kind``: every process takes the
        same steps in the same order, so the names match."""
        self._steps[kind] += 1
        return f"{kind}/{self._steps[kind]}"

    def broadcast(self, value):
        """Process 0's ``value`` (JSON-able), as every process receives it."""
        name = self._step("value")
        if self.writes:
            self._set(name, json.dumps(value).encode())
            return value
        return json.loads(self._wait(name))

    def ready(self) -> None:
        """Wait until every process has loaded and planned its share."""
        name = self._step("ready")
        self._set(f"{name}/{self.index}", b"")
        for p in range(self.count):
            self._wait(f"{name}/{p}")

    def send(self, rows: pd.DataFrame) -> None:
        """Send finished rows to process 0 (exact: floats written as shortest repr)."""
        self._set(f"rows/{self.index}/{self.sent:09d}", rows.to_csv(index=False).encode())
        self.sent += 1
        self.check()

    def receive(self) -> list[pd.DataFrame]:
        """Rows the other processes have sent since the last call (process 0)."""
        from jaxsynth.experiments.store import read_table

        self.check()
        frames = []
        for key, data in sorted(self.client.key_value_dir_get_bytes(self.prefix + "rows/")):
            process = int(key[len(self.prefix) + len("rows/"):].split("/")[0])
            frames.append(read_table(f"rows from process {process}", data))
            self._received[process] += 1
            self.client.key_value_delete(key)
        return frames

    def done(self) -> None:
        """Say how many row messages this process has sent so far (every process but 0,
        at the end of each round)."""
        self._set(f"{self._step('done')}/{self.index}", str(self.sent).encode())

    def remaining(self):
        """Yield the rows still to come until every process's messages of this round
        have arrived (process 0)."""
        name = self._step("done")
        expected: dict[int, int] = {}
        while True:
            yield from self.receive()
            for p in range(1, self.count):
                if p not in expected and (count := self._try(f"{name}/{p}")) is not None:
                    expected[p] = int(count)
            if len(expected) == self.count - 1 and all(
                    self._received[p] >= expected[p] for p in expected):
                return
            time.sleep(POLL_MS / 1000)
