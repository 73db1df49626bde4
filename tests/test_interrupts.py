"""Ctrl-C at any moment (``jaxsynth.interrupts``): the command ends promptly with one line
on stderr and status 130, no traceback, no core dump, and the result store stays
consistent (a rerun resumes it to one row per replicate, the uninterrupted table).

Truth: exit status 130 is 128 + SIGINT as a shell reports it (a crash is a negative
status, a core a ``core*`` file); the resumed table is compared with ``simulate`` run
in this process.  Each moment is reached by watching the run's files (the first traced
program in the cache, the first rows in the store), not by guessing a time, except at
start-up and in the audit's first second.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import jaxsynth as js
from jaxsynth.experiments.store import KEY_COLUMNS, read_table
from jaxsynth.experiments.execute import CHUNK_REPLICATES
from jaxsynth.experiments.sweep import simulate

PROMPT_S = 5.0
"""Longest wait from SIGINT to exit (a loaded CI machine; the exit itself is immediate)."""
CELLS = ["simulate", "--mechanism", "pmm,pruned-pmm", "--data", "spiral", "--n", "300",
         "--depth", "4", "--eps", "1", "--data-key", "3", "--quiet"]
SWEEP = [*CELLS, "--seeds", "8"]
RESUME = "jaxsynth: interrupted; rerun the same command to resume"


@pytest.fixture(autouse=True)
def _sigint_reaches_the_command():
    """A test run started with SIGINT ignored (a background job of a shell without job
    control) would pass that on to every command it starts, which then cannot be
    interrupted at all; with a handler here, the commands start with SIGINT's default, as
    from a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _env(cli_env, cache: Path) -> dict:
    return dict(cli_env, JAXSYNTH_CACHE_DIR=str(cache))


def _interrupt(args, env, cwd, ready, limit_s=240.0):
    """Start ``jaxsynth args``, send SIGINT once ``ready()`` holds, return the outcome."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxsynth", *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + limit_s
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the command ended before the moment to interrupt it"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err, time.monotonic() - sent


def _assert_interrupted(code, err, waited, message, cwd):
    assert code == 130, err[-2000:]
    assert err.splitlines()[-1] == message and "Traceback" not in err, err[-2000:]
    assert waited < PROMPT_S
    assert not list(Path(cwd).glob("core*"))


def _after(seconds: float):
    start = time.monotonic()
    return lambda: time.monotonic() - start >= seconds


def _resume_and_check(args, env, cwd, csv, rows=16):
    """Rerun the interrupted sweep: it ends with one row per replicate (``rows``)."""
    proc = subprocess.run([sys.executable, "-m", "jaxsynth", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_csv(csv, dtype={"key": str})
    assert len(table) == rows and not table.duplicated(list(KEY_COLUMNS)).any()
    return table


def test_interrupt_at_start_up(tmp_path, cli_env):
    args = [*SWEEP, "--out", "sweep.csv"]
    outcome = _interrupt(args, _env(cli_env, tmp_path / "cache"), tmp_path, _after(0.3))
    _assert_interrupted(*outcome, RESUME, tmp_path)


def test_interrupt_in_the_audits_first_second(tmp_path, cli_env):
    args = ["audit", "--mechanism", "pmm", "--replicates", "200", "--quiet"]
    outcome = _interrupt(args, _env(cli_env, tmp_path / "cache"), tmp_path, _after(0.8))
    _assert_interrupted(*outcome, "jaxsynth: interrupted", tmp_path)


def test_interrupt_during_compilation(tmp_path, cli_env):
    """A cold cache: SIGINT as soon as the first kernel is traced (XLA compiles it next);
    the store holds no row yet (the slow test below resumes an interrupted store)."""
    cache = tmp_path / "cache"
    args = [*SWEEP, "--out", "sweep.csv"]
    outcome = _interrupt(args, _env(cli_env, cache), tmp_path,
                         lambda: any((cache / "exported").glob("*.bin")))
    _assert_interrupted(*outcome, RESUME, tmp_path)
    csv = tmp_path / "sweep.csv"
    assert not csv.exists() or len(read_table(csv)) == 0


@pytest.mark.slow
def test_interrupt_during_compilation_then_resume(tmp_path, cli_env):
    cache = tmp_path / "cache"
    env = _env(cli_env, cache)
    args = [*SWEEP, "--out", "sweep.csv"]
    outcome = _interrupt(args, env, tmp_path,
                         lambda: any((cache / "exported").glob("*.bin")))
    _assert_interrupted(*outcome, RESUME, tmp_path)
    _resume_and_check(args, env, tmp_path, tmp_path / "sweep.csv")


@pytest.mark.slow
def test_interrupt_mid_sweep_resumes_to_the_uninterrupted_table(tmp_path, cli_env):
    """The store is written every ``CHUNK_REPLICATES`` seeds of a mechanism: 300 seeds of
    two mechanisms are four writes (256, 44, 256, 44 rows), and SIGINT follows the first,
    with three writes' work (several hundred exact W1s) still to do."""
    csv = tmp_path / "sweep.csv"
    env = _env(cli_env, tmp_path / "cache")
    seeds = 300
    assert CHUNK_REPLICATES < seeds < 2 * CHUNK_REPLICATES
    args = [*CELLS, "--seeds", str(seeds), "--out", str(csv)]
    outcome = _interrupt(args, env, tmp_path,
                         lambda: csv.exists() and csv.read_text().count("\n") >= 3)
    _assert_interrupted(*outcome, RESUME, tmp_path)
    assert 0 < len(pd.read_csv(csv)) < 2 * seeds  # interrupted mid-sweep
    resumed = _resume_and_check(args, env, tmp_path, csv, rows=2 * seeds)
    ref = simulate([js.PMM(depth=4), js.PrunedPMM(depth=4)], "spiral", n=[300], eps=[1.0],
                   seeds=seeds, progress=False, data_key=3)
    timing = ["seconds", "release_seconds", "measure_seconds"]
    pd.testing.assert_frame_equal(resumed.drop(columns=timing), ref.drop(columns=timing),
                                  check_dtype=False)


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [4.0, 10.0])
def test_interrupt_a_cold_audit(seconds, tmp_path, cli_env):
    args = ["audit", "--mechanism", "pmm,privtree", "--replicates", "2000"]
    outcome = _interrupt(args, _env(cli_env, tmp_path / "cache"), tmp_path, _after(seconds))
    _assert_interrupted(*outcome, "jaxsynth: interrupted", tmp_path)
