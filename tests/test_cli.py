"""Tests of the command line (jaxsynth/cli.py).

Truth: the CLI's file equals ``js.simulate`` for the same arguments, also after a
``kill -9`` and a rerun; wrong arguments give one line on stderr and status 2.
Subprocesses share a persistent XLA compilation cache to keep the runtime down.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pandas as pd
import pytest

import jaxsynth as js
from jaxsynth.cli import main
from jaxsynth.experiments.rates import estimate_rate
from jaxsynth.experiments.sweep import simulate

# the data and shapes of tests/test_simulate.py, so compilations are shared in a session
SWEEP = ["--mechanism", "pmm,pruned-pmm", "--data", "spiral", "--n", "300", "--depth", "4",
         "--eps", "1,2", "--data-key", "3"]
MECHS = [js.PMM(depth=4), js.PrunedPMM(depth=4)]
TIMING = ["seconds", "release_seconds", "measure_seconds"]


def _cli(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "jaxsynth", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _read(path):
    return pd.read_csv(path, dtype={"key": str}).drop(columns=TIMING)


def test_simulate_then_rate_round_trip(tmp_path, capsys):
    csv, png = tmp_path / "sweep.csv", tmp_path / "rates.png"
    assert main(["simulate", *SWEEP, "--seeds", "4", "--out", str(csv), "--quiet"]) == 0
    df = pd.read_csv(csv, dtype={"key": str})
    ref = simulate(MECHS, "spiral", n=[300], eps=[1.0, 2.0], seeds=4, progress=False,
                   data_key=3)
    pd.testing.assert_frame_equal(df.drop(columns=TIMING), ref.drop(columns=TIMING),
                                  check_dtype=False)
    assert {"mechanism", "data", "n", "d", "eps", "seed", "depth", "m", "leaves", "visited",
            "w1_exact_lower", "w1_exact_upper", "seconds"} <= set(df.columns)  # the default
    assert {"w1_tree", "w1_tree_upper"} <= set(df.columns)  # free: every sweep records them
    assert "w1_lower" not in df  # what was not asked for and costs something is not measured
    assert (df["metric"] == "linf").all() and "ground" not in df  # the ground metric column
    capsys.readouterr()
    assert main(["rate", str(csv), "--plot", str(png), "--n-boot", "200"]) == 0
    printed = capsys.readouterr().out
    rates = estimate_rate(df, n_boot=200)  # default: w1_exact_upper, as the command line
    assert ("slope of log E w1_exact_upper (certified upper end of the ℓ∞ W1 of the whole "
            "data set" in printed)
    for _, r in rates.iterrows():  # each fitted slope and its interval is printed
        assert f"{r.slope:.3f}" in printed and f"{r.ci_low:.3f}" in printed
    assert "fixed depth" in printed  # --depth 4: no rate, the error saturates
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_method_metric_and_column_choose_what_is_measured_and_fitted(tmp_path, capsys):
    # --method: how W1 is measured; --metric: the ground metric; rate --column: what is fitted
    csv = tmp_path / "l2.csv"
    assert main(["simulate", *SWEEP, "--seeds", "2", "--method", "tree,bracket", "--metric",
                 "l2", "--out", str(csv), "--quiet"]) == 0
    df = pd.read_csv(csv, dtype={"key": str})
    ref = simulate(MECHS, "spiral", n=[300], eps=[1.0, 2.0], seeds=2, progress=False,
                   data_key=3, methods=["tree", "bracket"], metric="l2")
    pd.testing.assert_frame_equal(df.drop(columns=TIMING), ref.drop(columns=TIMING),
                                  check_dtype=False)
    assert (df["metric"] == "l2").all() and {"w1_tree", "w1_lower", "w1_upper"} <= set(df)
    capsys.readouterr()
    assert main(["rate", str(csv), "--column", "w1_upper", "--n-boot", "50"]) == 0
    printed = capsys.readouterr().out
    assert "slope of log E w1_upper (certified upper bound on the ℓ2 W1 (tree))" in printed
    assert "mean w1_upper per cell" in printed and "95% interval" in printed
    assert "mean w1_lower" in printed  # the pair's other end beside it


@pytest.mark.parametrize(
    "args, match",
    [
        (["simulate", *SWEEP, "--seeds", "2"], "required: --out"),
        (["simulate", *SWEEP, "--seeds", "two", "--out", "x.csv"], "--seeds"),
        (["simulate", "--mechanism", "nope", "--data", "spiral", "--eps", "1", "--seeds", "2",
          "--out", "x.csv"], "unknown mechanism"),
        (["simulate", "--mechanism", "pmm", "--data", "spiral", "--eps", "-1", "--seeds", "2",
          "--out", "x.csv"], "eps"),
        (["simulate", "--mechanism", "pmm", "--data", "spiral", "--k", "2", "--eps", "1",
          "--seeds", "2", "--out", "x.csv"], "k applies only"),
        (["simulate", "--mechanism", "pmm", "--data", "spiral", "--depth", "0", "--eps", "1",
          "--seeds", "2", "--out", "x.csv"], "depth"),
        (["rate", "missing.csv"], "not found"),
        (["rate", "missing.csv", "--column", "mechanism"], "--column must be a W1 column"),
        (["simulate", *SWEEP, "--out", "x.csv"], "--seeds"),
        (["simulate", *SWEEP, "--seeds", "2", "--max-seeds", "9", "--out", "x.csv"],
         "--max-seeds needs --precision"),
        (["simulate", *SWEEP, "--precision", "0.1", "--out", "x.csv"], "--max-seeds"),
        (["simulate", *SWEEP, "--precision", "0", "--max-seeds", "9", "--out", "x.csv"],
         "--precision"),
        (["simulate", *SWEEP, "--precision", "0.1", "--max-seeds", "9", "--first-seed", "3",
          "--out", "x.csv"], "--first-seed"),
        (["rate", "missing.csv", "--intrinsic-dim", "0"], "--intrinsic-dim"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_one_line_exit_2(args, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxsynth: error: ") and match in err
    assert not (tmp_path / "x.csv").exists()


def test_module_entry_point_errors_without_traceback(cli_env):
    proc = _cli(["simulate", "--mechanism", "pmm", "--data", "nowhere.npy", "--eps", "1",
                 "--seeds", "2", "--out", "x.csv"], cli_env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.startswith("jaxsynth: error: data file nowhere.npy not found")
    assert err.count("\n") == 1 and "Traceback" not in err


# The CLI, with the store's append wrapped to SIGKILL the process once its first append is
# on disk: the kill lands mid-sweep on any machine (the calibration compiles every kernel
# before the first write, so the writes after it are too quick to race a kill against).
_KILLED_AFTER_FIRST_APPEND = """
import os, signal, sys
from jaxsynth.cli import main
from jaxsynth.experiments.store import ResultStore
append = ResultStore.append
def killing_append(self, rows):
    append(self, rows)
    os.kill(os.getpid(), signal.SIGKILL)
ResultStore.append = killing_append
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_table(tmp_path, cli_env):
    env = cli_env
    csv = tmp_path / "sweep.csv"
    # one append per mechanism (8 seeds are one write); 0.08 MiB holds one replicate per chunk
    args = ["simulate", *SWEEP[:-4], "--eps", "1", "--data-key", "3", "--seeds", "8",
            "--memory-mb", "0.08", "--out", str(csv), "--quiet"]
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_FIRST_APPEND, *args],
                            env=env, capture_output=True, text=True, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert len(pd.read_csv(csv)) == 8, "PMM's 8 rows, and not Pruned-PMM's, were on disk"

    proc = _cli(args, env)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    resumed = _read(csv)
    ref = simulate(MECHS, "spiral", n=[300], eps=[1.0], seeds=8, progress=False, data_key=3,
                   memory_bytes=80_000)
    pd.testing.assert_frame_equal(resumed, ref.drop(columns=TIMING), check_dtype=False)
    # rerunning a finished sweep computes nothing and leaves the table as it is
    before = csv.read_text()
    assert main(args) == 0
    assert csv.read_text() == before


@pytest.mark.slow
def test_demo_writes_table_and_plot(tmp_path, capsys, monkeypatch):
    # reduced form: two of the demo's three sizes (compilation dominates the runtime)
    monkeypatch.setattr("jaxsynth.cli.DEMO_N", (1000, 2000))
    out_dir = tmp_path / "new" / "results"  # created when missing, and said so
    assert main(["demo", "--out-dir", str(out_dir), "--seeds", "4", "--quiet"]) == 0
    df = pd.read_csv(out_dir / "jaxsynth-demo.csv")
    assert len(df) == 2 * 2 * 4 and set(df.n) == {1000, 2000}
    assert set(df.depth) == {10, 11}  # the ambient-depth rule ceil(log2(eps n))
    assert (out_dir / "jaxsynth-demo.png").read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert printed.startswith(f"jaxsynth demo: created the directory {out_dir}\n")
    assert ("slope of log E w1_exact_upper (certified upper end of the ℓ∞ W1 of the whole "
            "data set" in printed)
    assert "(eps n)^(-1/2)" in printed and "w1_exact_lower" in printed
    assert "16 rows computed now" in printed
    assert main(["demo", "--out-dir", str(out_dir), "--seeds", "4", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "nothing to compute: every row was there" in printed and "created" not in printed


@pytest.mark.slow  # the closed output, the same path of the command, stays in the default run
def test_output_piped_into_a_reader_that_stops_early(tmp_path, cli_env):
    """``jaxsynth simulate … | head``: no "Broken pipe" and status 0 (the file is written).
    The reader here (``true``) exits at once, so every write meets a closed pipe."""
    env = cli_env
    command = (f"{sys.executable} -m jaxsynth simulate {' '.join(SWEEP)} --seeds 2 --method tree "
               f"--out {tmp_path / 'piped.csv'} --quiet | true; "
               "echo status ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip() == "status 0", done.stderr
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr
    assert len(pd.read_csv(tmp_path / "piped.csv")) == 2 * 2 * 2


def test_closed_output_is_a_reader_that_stopped(tmp_path, cli_env):
    """``jaxsynth simulate … >&-`` (stdout closed): as a broken pipe, status 0 and no word,
    and the table written whole (no file the command opens takes the free descriptor 1)."""
    csv = tmp_path / "closed.csv"
    command = (f"{sys.executable} -m jaxsynth simulate {' '.join(SWEEP)} --seeds 2 --method "
               f"tree --out {csv} --quiet >&-")
    done = subprocess.run(["bash", "-c", command], env=cli_env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    ref = simulate(MECHS, "spiral", n=[300], eps=[1.0, 2.0], seeds=2, progress=False,
                   data_key=3, methods=["tree"])
    pd.testing.assert_frame_equal(_read(csv), ref.drop(columns=TIMING), check_dtype=False)


def test_data_array_reads_the_named_array_of_an_archive(tmp_path, capsys):
    # truth: the W1 values of the library's sweep on the second array itself
    import numpy as np

    first, second = (js.datasets.load("spiral", n=300, key=k) for k in (3, 4))
    np.savez(tmp_path / "xy.npz", first=first, second=second)
    csv = tmp_path / "second.csv"
    assert main(["simulate", "--mechanism", "pmm", "--data", str(tmp_path / "xy.npz"),
                 "--data-array", "second", "--depth", "4", "--eps", "1", "--seeds", "2",
                 "--method", "tree", "--out", str(csv), "--quiet"]) == 0
    ref = simulate(js.PMM(depth=4), second, eps=[1.0], seeds=2, methods=["tree"],
                   progress=False)
    got = pd.read_csv(csv)
    assert (got["data"] == str(tmp_path / "xy.npz")).all()
    np.testing.assert_array_equal(got["w1_tree"], ref["w1_tree"])


def test_rate_prints_sizes_as_integers(tmp_path, capsys):
    csv = tmp_path / "large.csv"
    pd.DataFrame([dict(mechanism="pmm", kind="pmm", data="spiral", n=n, d=2, intrinsic_dim=1,
                       eps=1.0, seed=s, w1_exact_upper=(1 + 0.1 * s) / n**0.5, metric="linf")
                  for n in (10000, 20000) for s in range(3)]).to_csv(csv, index=False)
    assert main(["rate", str(csv), "--n-boot", "50"]) == 0
    printed = capsys.readouterr().out
    assert "e+04" not in printed
    table = printed.split("\n\n")[0]  # the cells, before the slopes
    cells = [line.split()[2:5] for line in table.splitlines()
             if line.split()[:2] == ["pmm", "spiral"]]
    assert cells == [["10000", "1", "3"], ["20000", "1", "3"]]  # n, eps, seeds per cell


def test_rate_refuses_files_that_repeat_replicates(tmp_path, capsys):
    csv = tmp_path / "sweep.csv"
    assert main(["simulate", *SWEEP, "--seeds", "4", "--out", str(csv), "--quiet"]) == 0
    assert main(["rate", str(csv), str(csv)]) == 2
    assert "repeat 16 replicate(s)" in capsys.readouterr().err


def test_simulate_keys_beyond_2_32_are_not_their_low_bits(tmp_path):
    # truth: key 2147483648000 = 500·2^32 is the raw key (500, 0) (64-bit seeding), and
    # replicate s is js.release(fold_in(that key, s), ...); key 0 shares its low bits
    import jax
    import numpy as np

    common = ["simulate", "--mechanism", "pmm", "--data", "spiral", "--n", "300", "--depth",
              "4", "--eps", "1", "--seeds", "2", "--method", "tree", "--quiet", "--out"]
    tables = {}
    for key in (0, 500 * 2**32):
        out = tmp_path / f"k{key}.csv"
        assert main([*common, str(out), "--key", str(key)]) == 0
        tables[key] = pd.read_csv(out, dtype={"key": str})
    high = tables[500 * 2**32]
    assert high["key"].tolist() == ["2147483648000"] * 2
    assert not np.array_equal(tables[0]["w1_tree"], high["w1_tree"])
    X = js.datasets.load("spiral", n=300, key=0)
    base = jax.random.wrap_key_data(np.array([500, 0], np.uint32))
    for s in range(2):
        rep = js.release(jax.random.fold_in(base, s), js.PMM(depth=4), X, 1.0)
        assert float(js.w1(X, rep, method="tree")) == pytest.approx(high["w1_tree"][s],
                                                                    rel=1e-6)


def test_platform_option_chooses_the_device(tmp_path, cli_env):
    env = cli_env
    env.pop("JAX_PLATFORMS", None)
    bad = subprocess.run([sys.executable, "-m", "jaxsynth", "--platform", "nodevice", "rate",
                          "x.csv"], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "--platform 'nodevice' is not available here" in bad.stderr
    # cuda without JAX's CUDA plugin: a one-line refusal with the GPU page's advice (JAX
    # raises a bare AssertionError there); with a GPU, the command runs on to its own refusal
    cuda = subprocess.run([sys.executable, "-m", "jaxsynth", "--platform", "cuda", "rate",
                           "x.csv"], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert cuda.returncode == 2 and cuda.stderr.count("\n") == 1, cuda.stderr
    assert ("--platform 'cuda' is not available here (" in cuda.stderr
            and "shows what JAX sees; an NVIDIA GPU needs JAX with CUDA" in cuda.stderr
            or "file 'x.csv' not found" in cuda.stderr), cuda.stderr
    ok = subprocess.run([sys.executable, "-m", "jaxsynth", "--platform", "cpu", "simulate",
                         *SWEEP, "--seeds", "1", "--method", "tree", "--out", "one.csv",
                         "--quiet"], env=env, capture_output=True, text=True, timeout=300,
                        cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_parsing_loads_neither_jax_nor_numpy():
    """``--help``, ``--version`` and argument errors come before the library loads."""
    code = ("import sys\nfrom jaxsynth.cli import main\n"
            "for args in (['--version'], ['simulate', '--help'], ['audit', '--help']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "assert main(['simulate', '--seeds', '0']) == 2\n"
            "print(sorted({'jax', 'numpy', 'pandas'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


def test_version_is_the_installed_packages():
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, "-m", "jaxsynth", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"jaxsynth {version('jaxsynth')}\n"


def test_the_parsers_words_are_the_librarys():
    from jaxsynth import cli
    from jaxsynth.audit import auditor, settings
    from jaxsynth.core.partition import GROUND_METRICS
    from jaxsynth.mechanisms.registry import MECHANISMS
    from jaxsynth.wasserstein.registry import METHODS
    from jaxsynth.wasserstein.registry import column_descriptions

    from jaxsynth.experiments.cluster import MAX_TIMEOUT_S

    assert cli.GROUND_METRICS == GROUND_METRICS and cli.W1_METHODS == METHODS
    assert set(cli.W1_COLUMNS) == set(column_descriptions())
    assert cli.MAX_CLUSTER_TIMEOUT_S == MAX_TIMEOUT_S
    assert set(settings.MECHANISMS) <= set(MECHANISMS)
    assert auditor.MECHANISMS is settings.MECHANISMS


def test_simulate_to_a_precision_equals_the_library(tmp_path, capsys):
    csv = tmp_path / "precise.csv"
    args = ["simulate", *SWEEP, "--method", "tree_upper", "--precision", "0.05",
            "--max-seeds", "32", "--seeds", "4", "--precision-column", "w1_tree_upper",
            "--out", str(csv), "--quiet"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    ref = simulate(MECHS, "spiral", n=[300], eps=[1.0, 2.0], seeds=4, progress=False,
                   data_key=3, methods=["tree_upper"], precision=0.05, max_seeds=32,
                   precision_column="w1_tree_upper")
    pd.testing.assert_frame_equal(_read(csv), ref.drop(columns=TIMING), check_dtype=False)
    assert "mean w1_tree_upper per cell, with its 95% interval" in printed
    assert "target_met" in printed


def test_demo_writes_into_one_named_directory():
    from jaxsynth.cli import DEMO_DIR, _parser

    assert _parser().parse_args(["demo"]).out_dir == DEMO_DIR == "jaxsynth-demo"


def test_dry_run_prints_only_the_estimate(tmp_path, capsys):
    csv = tmp_path / "dry.csv"
    assert main(["simulate", *SWEEP, "--seeds", "3", "--method", "tree_upper", "--dry-run",
                 "--out", str(csv)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("ESTIMATE (from a short calibration; not a measurement)")
    assert "estimated total:" in printed and "for 12 replicates" in printed
    assert "compilation (measured, apart)" in printed
    assert not csv.exists()
