"""``jaxsynth launch --local N simulate ...``: one sweep run by N processes on this machine.

The launcher picks a free localhost port for the coordinator and starts N copies of
``jaxsynth simulate ...`` with ``--coordinator 127.0.0.1:PORT --num-processes N
--process-id I``; the processes split the sweep between them and process 0 writes the
one result store (``jaxsynth.experiments.cluster``).  Process 0's output goes to stdout,
the others' to stderr.  When one process fails, the launcher stops the others and exits
with its status; rerunning the same command resumes the sweep.  Ctrl-C stops them all.

For a machine with several GPUs, ``--one-device-per-process`` gives process I the local
accelerator I (``jax.distributed.initialize(local_device_ids=[I])``), so N processes
share N GPUs instead of each claiming them all.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

__all__ = ["CLUSTER_FLAGS", "free_port", "launch_local"]

CLUSTER_FLAGS = ("--coordinator", "--num-processes", "--process-id", "--distributed",
                 "--local-device-ids")
"""``simulate`` flags the launcher sets itself."""
STOP_GRACE_S = 10
"""Seconds the other processes have to end after SIGTERM before they are killed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(procs) -> None:
    """SIGTERM every running process, then SIGKILL whichever outlives the grace period."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch_local(processes: int, command: list[str], global_flags: list[str] = (),
                 one_device_per_process: bool = False, port: int | None = None) -> int:
    """Run ``jaxsynth [global_flags] simulate ...`` (``command``) as ``processes`` local
    processes of one cluster; returns the exit status (that of the first to fail)."""
    if not command or command[0] != "simulate":
        raise ValueError("launch runs 'simulate ...' (the command to split over processes); "
                         f"got {' '.join(command) or 'nothing'}")
    taken = [flag for flag in CLUSTER_FLAGS
             if any(a == flag or a.startswith(flag + "=") for a in command)]
    if taken:
        raise ValueError(f"launch sets {', '.join(taken)} itself; leave them out")
    address = f"127.0.0.1:{port or free_port()}"
    procs = []
    try:
        for index in range(processes):
            argv = [sys.executable, "-m", "jaxsynth", *global_flags, *command,
                    "--coordinator", address, "--num-processes", str(processes),
                    "--process-id", str(index)]
            if one_device_per_process:
                argv += ["--local-device-ids", str(index)]
            procs.append(subprocess.Popen(argv, stdout=None if index == 0 else sys.stderr))
        while True:
            codes = [proc.poll() for proc in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                index, code = failed[0]
                how = f"signal {-code}" if code < 0 else f"status {code}"
                print(f"jaxsynth launch: process {index} of {processes} ended with {how}; "
                      "stopping the others (rerun the same command to resume)",
                      file=sys.stderr, flush=True)
                _stop(procs)
                return code if code > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    except KeyboardInterrupt:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        _stop(procs)
        raise
