"""Tests of one sweep over many processes (jaxsynth/experiments/cluster.py, launcher.py).

Truth: the single-process sweep.  Two and four local CPU processes joined through a
localhost coordinator (as JAX's own multi-process tests run) must write the same table,
number for number (the timing columns apart); a sweep whose process is killed with
``kill -9`` and rerun must end with exactly those rows; bad clusters are refused with the
reason, within the stated timeout.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import pandas as pd
import pytest

from jaxsynth.cli import main
from jaxsynth.experiments import cluster
from jaxsynth.experiments.store import KEY_COLUMNS, read_table
from jaxsynth.launcher import free_port

TIMING = ["seconds", "release_seconds", "measure_seconds"]
SWEEP = ["--mechanism", "pmm,privtree", "--data", "spiral", "--n", "400", "--eps", "1,2",
         "--seeds", "10", "--method", "exact,bracket,tree", "--quiet"]
"""Small, with every mechanism kind that has its own kernel and the default W1 method."""


def _table(path) -> pd.DataFrame:
    table = read_table(path).drop(columns=TIMING)
    return table.sort_values(list(KEY_COLUMNS)).reset_index(drop=True)


def _jaxsynth(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "jaxsynth", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _rows(path: Path) -> int:
    try:
        return json.loads(Path(f"{path}.jaxsynth.json").read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The sweep run by one process (the command line in this process)."""
    path = tmp_path_factory.mktemp("one") / "one.csv"
    assert main(["simulate", *SWEEP, "--out", str(path)]) == 0
    return _table(path)


# ---------------------------------------------------------------------- pure parts


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 10, 101])
def test_share_splits_work_into_contiguous_near_equal_parts(n, count):
    items = list(range(100, 100 + n))
    parts = [cluster.share(items, i, count) for i in range(count)]
    assert sum(parts, []) == items  # disjoint, in order, nothing left out
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_difference_names_the_first_differing_setting():
    mine = {"eps": [1.0, 2.0], "seeds": [0, 1], "spec": {"key": "0"}}
    assert cluster.difference(mine, dict(mine)) is None
    diff = cluster.difference({**mine, "eps": [1.0]}, mine)
    assert diff.startswith("eps: [1.0] here, [1.0, 2.0] in process 0")
    assert "seeds" in cluster.difference({**mine, "seeds": list(range(500))}, mine)


@pytest.mark.parametrize("kwargs, message", [
    ({"coordinator": "localhost", "num_processes": 2, "process_id": 0}, "HOST:PORT"),
    ({"coordinator": "localhost:0", "num_processes": 2, "process_id": 0}, "1..65535"),
    ({"coordinator": "localhost:70000", "num_processes": 2, "process_id": 0}, "1..65535"),
    ({"coordinator": ":1234", "num_processes": 2, "process_id": 0}, "HOST:PORT"),
    ({"coordinator": "localhost:1234", "num_processes": 0, "process_id": 0}, "num_processes"),
    ({"coordinator": "localhost:1234", "num_processes": 2, "process_id": 2}, "process_id"),
    ({"coordinator": "localhost:1234", "num_processes": 2, "process_id": True}, "process_id"),
    ({"coordinator": "localhost:1234", "num_processes": 2.0, "process_id": 0}, "num_processes"),
    ({"coordinator": "localhost:1234", "num_processes": 2}, "needed together"),
    ({"coordinator": "localhost:1234", "num_processes": 2, "process_id": 0, "auto": True},
     "not both"),
    ({"coordinator": "localhost:1234", "num_processes": 2, "process_id": 0, "timeout": 0},
     "timeout"),
    ({"coordinator": "localhost:1234", "num_processes": 2, "process_id": 0, "timeout": 1e30},
     r"timeout must be a number of seconds in \(0, 86400\]; got 1e\+30"),
])
def test_join_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cluster.join(**kwargs)


def test_join_refuses_once_jax_has_started():
    jax.devices()  # this process has set up its backends
    with pytest.raises(ValueError, match="before any JAX computation"):
        cluster.join("localhost:1234", 2, 1, timeout=1)


def test_alone_simulate_has_no_team():
    assert cluster.Team.current() is None  # a process outside a cluster runs alone


@pytest.mark.parametrize("args, message", [
    (["--coordinator", "127.0.0.1:1234"], "also need --num-processes, --process-id"),
    (["--distributed", "--process-id", "0"], "--distributed detects the cluster"),
    (["--cluster-timeout", "5"], "go with --coordinator"),
])
def test_cli_refuses_incomplete_cluster_flags(args, message, tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["simulate", *SWEEP, "--out", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("command, message", [
    (["rate", "x.csv"], "launch runs 'simulate ...'"),
    ([], "launch runs 'simulate ...'"),
    (["simulate", *SWEEP, "--out", "x.csv", "--process-id", "0"], "--process-id itself"),
])
def test_launch_refuses_what_it_cannot_split(command, message, capsys):
    assert main(["launch", "--local", "2", *command]) == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------------- processes


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_processes_write_the_single_process_table(processes, reference, tmp_path, cli_env):
    out = tmp_path / "many.csv"
    proc = _jaxsynth(["launch", "--local", str(processes), "simulate", *SWEEP,
                      "--out", str(out)], cli_env)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    many = _table(out)
    assert many.equals(reference)  # every number, every text, every row once
    for index in range(1, processes):  # each process says what it computed
        assert f"process {index} of {processes}: computed" in stderr
    assert f"process 0 of {processes} computed" in stdout
    assert "this sweep's 40 rows (40 computed now" in stdout
    assert not Path(f"{out}.jaxsynth.lock").exists()


@pytest.mark.slow
def test_a_killed_process_and_a_rerun_end_with_the_uninterrupted_table(tmp_path, cli_env):
    sweep = ["--mechanism", "pmm", "--data", "spiral", "--n", "600", "--eps", "1",
             "--seeds", "40000", "--method", "tree", "--quiet"]
    alone = tmp_path / "alone.csv"
    assert main(["simulate", *sweep, "--out", str(alone)]) == 0
    out = tmp_path / "many.csv"
    launch = ["launch", "--local", "2", "simulate", *sweep, "--out", str(out)]
    proc = _jaxsynth(launch, cli_env)
    deadline = time.monotonic() + 300
    while _rows(out) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    worker = subprocess.run(["pgrep", "-f", "--parent", str(proc.pid), "process-id 1"],
                            capture_output=True, text=True).stdout.split()
    assert len(worker) == 1, "process 1 of the launch not found"
    subprocess.run(["kill", "-9", worker[0]], check=True)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "process 1 of 2 ended with signal 9; stopping the others" in stderr
    written = _rows(out)
    assert 0 < written < 40000, f"the kill did not land mid-sweep ({written} rows)"
    proc = _jaxsynth(launch, cli_env)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    # the rerun keeps what the store committed: at least the rows its sidecar counted,
    # more where the kill (SIGKILL after the grace period, on a loaded machine) fell
    # between an append and its commit (the append is whole: its digest is pending)
    now, there = map(int, re.search(r"(\d+) computed now, (\d+) already there",
                                    stdout).groups())
    assert now + there == 40000 and written <= there < 40000, stdout
    assert _table(out).equals(_table(alone))


@pytest.mark.slow
def test_processes_running_different_sweeps_are_refused_with_the_reason(tmp_path, cli_env):
    address = f"127.0.0.1:{free_port()}"
    out = tmp_path / "x.csv"

    def process(index, eps):
        args = [*SWEEP, "--out", str(out)]
        args[args.index("--eps") + 1] = eps
        return _jaxsynth(["simulate", *args, "--coordinator", address, "--num-processes", "2",
                          "--process-id", str(index)], cli_env)

    first, second = process(0, "1,2"), process(1, "1,3")
    (_, err0), (_, err1) = first.communicate(timeout=300), second.communicate(timeout=300)
    assert first.returncode == second.returncode == 2
    expected = "differs from process 0's, in eps: [1.0, 3.0] here, [1.0, 2.0] in process 0"
    assert expected in err1
    assert f"process 1 of 2: this process's sweep {expected}" in err0
    assert _rows(out) == 0  # nothing written


@pytest.mark.slow
def test_a_coordinator_that_never_answers_is_an_error_within_the_timeout(tmp_path, cli_env):
    address = f"127.0.0.1:{free_port()}"  # nobody listens there
    start = time.monotonic()
    proc = _jaxsynth(["simulate", *SWEEP, "--out", str(tmp_path / "x.csv"), "--coordinator", address,
                      "--num-processes", "2", "--process-id", "1", "--cluster-timeout", "3"],
                     cli_env)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert f"coordinator {address}: nothing answered within 3 s" in stderr
    assert "Traceback" not in stderr
    assert time.monotonic() - start < 60  # 3 s and the start-up, not a hang


@pytest.mark.slow
def test_a_cluster_that_never_forms_ends_with_an_error_within_the_timeout(tmp_path, cli_env):
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    proc = _jaxsynth(["simulate", *SWEEP, "--out", str(tmp_path / "x.csv"), "--coordinator", address,
                      "--num-processes", "2", "--process-id", "0", "--cluster-timeout", "3"],
                     cli_env)  # process 1 never starts
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "the cluster did not form within 3 s (process 0 of 2 waited" in stderr
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_cluster_detection_outside_a_cluster_manager_says_so(tmp_path, cli_env):
    env = {k: v for k, v in cli_env.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    proc = _jaxsynth(["simulate", *SWEEP, "--out", str(tmp_path / "x.csv"), "--distributed",
                      "--cluster-timeout", "5"], env)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "could not join the cluster" in stderr
    assert "no cluster manager JAX recognises (SLURM, Open MPI, ...) was found" in stderr


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["num_processes", "out"])
def test_processes_started_with_another_setting_are_refused_naming_it(setting, tmp_path,
                                                                      cli_env):
    address = f"127.0.0.1:{free_port()}"

    def process(index, count, out):
        return _jaxsynth(["simulate", *SWEEP, "--out", str(tmp_path / out), "--coordinator",
                          address, "--num-processes", str(count), "--process-id", str(index)],
                         cli_env)

    second = {"num_processes": (3, "x.csv"), "out": (2, "y.csv")}[setting]
    first, other = process(0, 2, "x.csv"), process(1, *second)
    (_, err0), (_, err1) = first.communicate(timeout=300), other.communicate(timeout=300)
    assert first.returncode == other.returncode == 2, (err0[-1000:], err1[-1000:])
    assert f"this process's sweep differs from process 0's, in {setting}:" in err1
    assert f"in {setting}:" in err0  # process 0 names it too
    assert _rows(tmp_path / "x.csv") == 0 and not (tmp_path / "y.csv").exists()
