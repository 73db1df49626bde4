"""Tests of the result store (jaxsynth/experiments/store.py).

Truth: whatever happens — a foreign file at the path, a second writer, a crash or a
``kill -9`` at any instant, a rerun, a changed sweep — the file ends with exactly one
valid row per replicate, equal to an uninterrupted run, or the run is refused with a
one-line reason before any work and every file is left byte-identical.

The protocol is tested deterministically by injecting a crash before every file-system
step of a sequence of appends and rewrites (and cutting the appended bytes short); real
processes are then killed with SIGKILL at seeded random instants and run concurrently.
"""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxsynth.cli import main
from jaxsynth.experiments import store as store_module
from jaxsynth.experiments.store import (
    KEY_COLUMNS,
    ResultStore,
    check_out_path,
    readable,
    validate_rows,
)

W1_COLUMNS = ["w1_lower", "w1_upper"]
SPEC = {"key": "0", "data_key": 0, "metric": "linf", "w1_columns": W1_COLUMNS,
        "groups": {"a | x": {"kind": "pmm", "config": "PMM()"}}, "data": {}}


def _rows(mechanism="a", seeds=range(4), eps=(1.0, 2.0), extra=None) -> pd.DataFrame:
    """Rows as ``simulate`` writes them: keys, the bracket, a text column."""
    grid = [(e, s) for e in eps for s in seeds]
    df = pd.DataFrame({
        "mechanism": mechanism, "kind": "pmm", "data": "x", "n": 300,
        "eps": [e for e, _ in grid], "seed": [s for _, s in grid],
        "w1_lower": [0.01 * (1 + s) / e for e, s in grid],
        "w1_upper": [0.1 * (1 + s) / e + 1e-17 * s for e, s in grid],
        "config": "PMM(depth=4, schedule='packing')",
    })
    return df.assign(**(extra or {}))


def _files(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# --------------------------------------------------------------------------- foreign files


FOREIGN = {
    "csv without final newline": b"a,b\n1,2\n3,4",
    "empty file": b"",
    "another tool's table": b"mechanism,data,n,eps,seed,w1_upper\npmm,x,300,1.0,0,0.1\n",
    "binary": bytes(range(256)),
}


@pytest.mark.parametrize("content", FOREIGN.values(), ids=FOREIGN.keys())
def test_foreign_files_are_refused_and_left_byte_identical(tmp_path, content):
    path = tmp_path / "out.csv"
    path.write_bytes(content)
    before = _files(tmp_path)
    for attempt in (lambda: check_out_path(path), lambda: ResultStore(path, SPEC, W1_COLUMNS),
                    lambda: main(["simulate", "--mechanism", "pmm", "--data", str(path),
                                  "--eps", "1", "--seeds", "2", "--out", str(path)])):
        try:
            result = attempt()
        except ValueError as exc:
            assert "was not written by jaxsynth" in str(exc) and "left untouched" in str(exc)
        else:
            assert result == 2  # the command line: one line, exit 2
    assert _files(tmp_path) == before  # byte-identical, and no lock, sidecar or temp file


def test_a_sidecar_that_is_not_ours_is_refused(tmp_path):
    path = tmp_path / "out.csv"
    path.write_bytes(b"x\n1\n")
    (tmp_path / "out.csv.jaxsynth.json").write_text('{"format": "something-else"}')
    before = _files(tmp_path)
    with pytest.raises(ValueError, match="is not a jaxsynth-results/3 sidecar"):
        ResultStore(path, SPEC, W1_COLUMNS).open()
    assert _files(tmp_path) == before


def _as_earlier_format(path):
    """Rewrite a store as jaxsynth-results/2 wrote it, validly sealed: the ground metric in
    a ``ground`` column and spec key, the W1 columns under the spec key ``metrics``."""
    import hashlib
    import json

    side = path.with_name(path.name + ".jaxsynth.json")
    meta = json.loads(side.read_text())
    table = pd.read_csv(path, dtype={"key": str}).rename(columns={"metric": "ground"})
    data = table.to_csv(index=False).encode()
    path.write_bytes(data)
    old = {"metric": "ground", "w1_columns": "metrics"}
    meta.update(format="jaxsynth-results/2", columns=list(table.columns), length=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                spec={old.get(k, k): v for k, v in meta["spec"].items()})
    meta["seal"] = store_module._seal(meta)
    side.write_text(json.dumps(meta))


def test_a_store_of_an_earlier_format_is_refused_for_writing_but_still_fitted(tmp_path, capsys):
    path = _store(tmp_path / "out.csv")
    _as_earlier_format(path)
    before = _files(tmp_path)
    with pytest.raises(ValueError, match=r"written by an earlier jaxsynth format "
                       r"\(jaxsynth-results/2, now jaxsynth-results/3\); start a new file"):
        ResultStore(path, SPEC, W1_COLUMNS).open()  # never appended to or resumed
    assert _files(tmp_path) == before
    assert main(["simulate", "--mechanism", "pmm", "--data", "spiral", "--n", "300", "--eps",
                 "1", "--seeds", "2", "--method", "bracket", "--quiet", "--out", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "earlier jaxsynth format" in err and "start a new file" in err
    assert _files(tmp_path) == before
    # its results can still be fitted: read with the column ``ground`` renamed ``metric``
    table = readable(path, W1_COLUMNS)
    assert "ground" not in table and table["metric"].tolist() == ["linf"] * 10
    assert main(["rate", str(path), "--column", "w1_upper", "--n-boot", "20"]) == 0
    assert "slope of log E w1_upper" in capsys.readouterr().out
    assert _files(tmp_path) == before


@pytest.mark.parametrize("edit", ["change a byte", "append a line", "truncate", "replace"])
def test_a_store_changed_by_another_program_is_refused_untouched(tmp_path, edit):
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows())
    data = path.read_bytes()
    path.write_bytes({"change a byte": data.replace(b"0.01", b"0.02", 1),
                      "append a line": data + b"a,pmm,x,300,1.0,99,0.1,0.2,c\n",
                      "truncate": data[:-10],
                      "replace": _rows(seeds=[5]).to_csv(index=False).encode()}[edit])
    before = _files(tmp_path)
    with pytest.raises(ValueError, match="left untouched: choose another path"):
        ResultStore(path, SPEC, W1_COLUMNS).open()
    assert _files(tmp_path) == before


# --------------------------------------------------------------------------- rows


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(seed=3.5), "seed value"),
        (dict(seed=-1), "seed value"),
        (dict(n=0), "n value"),
        (dict(eps=-1.0), "eps value"),
        (dict(eps="abc"), "eps value"),
        (dict(w1_upper="abc"), "w1_upper value"),
        (dict(w1_upper=-0.5), "w1_upper value"),
        (dict(w1_lower=np.nan), "w1_lower value"),
        (dict(mechanism=np.nan), "empty mechanism"),
    ],
)
def test_invalid_rows_are_refused_naming_the_column(change, match):
    rows = _rows()
    for column, value in change.items():
        rows[column] = rows[column].astype(object)
        rows.loc[2, column] = value
    with pytest.raises(ValueError, match=match):
        validate_rows(rows, W1_COLUMNS, "rows")


def test_repeated_replicates_and_missing_columns_are_refused(tmp_path):
    with pytest.raises(ValueError, match="4 repeated replicate"):
        validate_rows(pd.concat([_rows(), _rows(seeds=[0, 1])]), W1_COLUMNS, "rows")
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['w1_lower'\]"):
        validate_rows(_rows().drop(columns="w1_lower"), W1_COLUMNS, "rows")
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows())
        with pytest.raises(ValueError, match="repeated replicate"):
            st.append(_rows(seeds=[1]))  # already there: never a second row
        assert st.rows == 8


def test_a_committed_file_with_invalid_rows_is_refused_never_repaired(tmp_path):
    # rows jaxsynth would never write (seed 3.5, a repeated replicate), under a sidecar
    # that matches their bytes: refused on opening, whatever the sidecar says
    import hashlib
    import json

    for name, rows in [("half-seed", _rows().assign(seed=[0, 1, 2, 3.5] * 2)),
                       ("twice", pd.concat([_rows(), _rows(seeds=[3])]))]:
        path = tmp_path / f"{name}.csv"
        data = rows.to_csv(index=False).encode()
        path.write_bytes(data)
        meta = {"format": store_module.FORMAT, "spec": SPEC, "columns": list(rows.columns),
                "length": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                "rows": len(rows), "pending": None}
        meta["seal"] = store_module._seal(meta)  # a sidecar as jaxsynth writes it
        (tmp_path / f"{name}.csv.jaxsynth.json").write_text(json.dumps(meta))
        before = _files(tmp_path)
        with pytest.raises(ValueError, match="seed value|repeated replicate"):
            ResultStore(path, SPEC, W1_COLUMNS).open()
        assert _files(tmp_path) == before


# --------------------------------------------------------------------------- one writer


def test_a_second_writer_is_refused_at_once_and_the_lock_file_goes(tmp_path):
    path = tmp_path / "out.csv"
    first = ResultStore(path, SPEC, W1_COLUMNS)
    first.open()
    first.append(_rows(seeds=[0, 1]))
    assert (tmp_path / "out.csv.jaxsynth.lock").exists()
    with pytest.raises(ValueError, match="being written by another jaxsynth run"):
        ResultStore(path, SPEC, W1_COLUMNS).open()
    first.close()
    assert not (tmp_path / "out.csv.jaxsynth.lock").exists()
    with ResultStore(path, SPEC, W1_COLUMNS) as second:  # now free
        assert second.rows == 4
    assert sorted(os.listdir(tmp_path)) == ["out.csv", "out.csv.jaxsynth.json"]


# --------------------------------------------------------------------------- changed sweeps


def test_changed_sweeps_extend_or_are_refused_with_the_reason(tmp_path):
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows())
    before = _files(tmp_path)
    for spec, match in [
        ({**SPEC, "key": "1"}, "different key"),
        ({**SPEC, "w1_columns": ["w1_tree"]}, "different w1_columns"),
        ({**SPEC, "groups": {"a | x": {"kind": "pmm", "config": "PMM(depth=5)"}}}, "made with"),
    ]:
        with pytest.raises(ValueError, match=match):
            ResultStore(path, spec, spec["w1_columns"]).open()
        assert _files(tmp_path) == before
    # more eps values, seeds and mechanisms: the same table, extended
    more = {**SPEC, "groups": {**SPEC["groups"], "b | x": {"kind": "pmm", "config": "PMM(x)"}}}
    with ResultStore(path, more, W1_COLUMNS) as st:
        st.append(_rows(seeds=[4, 5], eps=[1.0, 2.0, 4.0]))
        st.append(_rows(mechanism="b"))
        table = st.finish()
    assert len(table) == 8 + 6 + 8 == len(pd.read_csv(path))
    # a data set's fingerprint is recorded; another array under the same label is refused
    with ResultStore(tmp_path / "d.csv", {**SPEC, "data": {"x | n=300": "sha256:1"}},
                     W1_COLUMNS) as st:
        st.append(_rows())
    with pytest.raises(ValueError, match="rows of two different sweeps would mix"):
        ResultStore(tmp_path / "d.csv", {**SPEC, "data": {"x | n=300": "sha256:2"}},
                    W1_COLUMNS).open()


def test_a_stale_sidecar_whose_table_was_deleted_starts_afresh(tmp_path):
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows())
    path.unlink()
    with ResultStore(path, {**SPEC, "key": "9"}, W1_COLUMNS) as st:
        assert st.rows == 0
        st.append(_rows(seeds=[7]))
    assert len(readable(path, W1_COLUMNS)) == 2


def test_readers_see_only_committed_rows(tmp_path):
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows())
    with open(path, "ab") as f:  # an append in progress: half a line
        f.write(b"a,pmm,x,300,1.0,17,0.0")
    assert len(readable(path, W1_COLUMNS)) == 8


def test_sweeps_larger_than_max_rows_are_refused_before_any_work(tmp_path, monkeypatch):
    import jaxsynth as js

    monkeypatch.setattr(store_module, "MAX_ROWS", 10)
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows())
        with pytest.raises(ValueError, match="holds 8 rows and the sweep would add 4"):
            st.check_room(4)
    start = time.perf_counter()
    with pytest.raises(ValueError, match="asks for 100000000 replicates.*--first-seed"):
        js.simulate("pmm", "spiral", seeds=10**8, out=tmp_path / "big.csv", progress=False)
    assert time.perf_counter() - start < 5 and not (tmp_path / "big.csv").exists()


# --------------------------------------------------------------------------- crashes


class _Crash(BaseException):
    """A simulated power cut (not an ``Exception``: nothing may catch it)."""


class _FaultyOS:
    """The ``os`` module of the store, crashing before its ``k``-th durable step."""

    def __init__(self, crash_at, partial=False):
        self.crash_at, self.partial, self.steps = crash_at, partial, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def _step(self):
        self.steps += 1
        if self.steps == self.crash_at:
            raise _Crash

    def fsync(self, fd):  # (durability itself is the kernel's: not exercised here)
        if self.steps + 1 == self.crash_at and self.partial and stat.S_ISREG(
                os.fstat(fd).st_mode):
            size = os.fstat(fd).st_size  # an append only half on disk
            os.ftruncate(fd, size - max(1, size % 7))
        self._step()

    def replace(self, src, dst):
        self._step()
        os.replace(src, dst)


BATCHES = [_rows(seeds=[0, 1]), _rows(seeds=[2, 3]),
           _rows(seeds=[4], extra={"cap_hits": 0}),  # a new column: a rewrite
           _rows(mechanism="b", seeds=[0, 1, 2])]


def _sweep(path):
    """What ``simulate`` does: append the replicates not yet there, batch by batch; sort."""
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        done = set(map(tuple, st.table()[list(KEY_COLUMNS)].astype(str).values.tolist()))
        for batch in BATCHES:
            keys = batch[list(KEY_COLUMNS)].astype(str).values.tolist()
            st.append(batch[[tuple(k) not in done for k in keys]])
        return st.finish()


def test_a_crash_before_any_step_recovers_to_the_uninterrupted_table(tmp_path, monkeypatch):
    reference = _sweep(tmp_path / "reference.csv")
    expected = (tmp_path / "reference.csv").read_bytes()
    counter = _FaultyOS(None)
    monkeypatch.setattr(store_module, "os", counter)
    _sweep(tmp_path / "count.csv")
    assert counter.steps > 20
    for partial in (False, True):
        for k in range(1, counter.steps + 1):
            path = tmp_path / f"crash-{partial}-{k}.csv"
            monkeypatch.setattr(store_module, "os", _FaultyOS(k, partial))
            with pytest.raises(_Crash):
                _sweep(path)
            monkeypatch.setattr(store_module, "os", os)
            if path.exists():  # whatever was committed is valid, and nothing twice
                try:
                    validate_rows(readable(path, W1_COLUMNS), W1_COLUMNS, path.name)
                except ValueError as exc:
                    assert "holds no rows" in str(exc)
            table = _sweep(path)  # the rerun
            pd.testing.assert_frame_equal(table, reference)
            assert path.read_bytes() == expected, (partial, k)
            assert sorted(p.name for p in tmp_path.glob(f"crash-{partial}-{k}.*")) == [
                path.name, path.name + ".jaxsynth.json"]


# --------------------------------------------------------------------------- processes

SWEEP = ["simulate", "--mechanism", "pmm,pruned-pmm", "--data", "spiral", "--n", "300",
         "--depth", "4", "--eps", "1,2", "--data-key", "3", "--method", "bracket", "--quiet"]
TIMING = ["seconds", "release_seconds", "measure_seconds"]
KILLS = int(os.environ.get("JAXSYNTH_TEST_KILLS", "3"))
"""SIGKILLs per run of the kill test (more: ``JAXSYNTH_TEST_KILLS=20``)."""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = tmp_path_factory.mktemp("xla-cache")
    return dict(os.environ, JAXSYNTH_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu")


def _start(args, env):
    return subprocess.Popen([sys.executable, "-m", "jaxsynth", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _numbers(path):
    return pd.read_csv(path, dtype={"key": str}).drop(columns=TIMING)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, env):
    """The table of an uninterrupted run (300 seeds: three appends per mechanism)."""
    path = tmp_path_factory.mktemp("reference") / "sweep.csv"
    proc = _start([*SWEEP, "--seeds", "300", "--out", str(path)], env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "1200 rows (1200 computed now, 0 already there); the file holds 1200 rows" in out
    return _numbers(path)


@pytest.mark.slow
def test_sigkill_at_random_instants_then_rerun_equals_the_uninterrupted_run(
        tmp_path, env, uninterrupted):
    path = tmp_path / "sweep.csv"
    args = [*SWEEP, "--seeds", "300", "--out", str(path)]
    rng = random.Random(10)
    seen = []
    for _ in range(KILLS):
        size = path.stat().st_size if path.exists() else -1
        proc = _start(args, env)
        while proc.poll() is None and (path.stat().st_size if path.exists() else -1) == size:
            time.sleep(0.005)  # until this run writes (after its import and compilation)
        time.sleep(rng.uniform(0.0, 0.15))  # then at a random instant of the sweep
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        if path.exists():  # what a killed run leaves is valid, each replicate once
            seen.append(len(readable(path, ["w1_lower", "w1_upper"])))
    print("rows after each kill:", seen)
    assert any(0 < rows < 1200 for rows in seen), seen  # killed mid-sweep
    proc = _start(args, env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert f"({1200 - seen[-1] if seen else 1200} computed now" in out
    assert "the file holds 1200 rows" in out
    pd.testing.assert_frame_equal(_numbers(path), uninterrupted)
    # the store, its sidecar and the calibration's timings: nothing else is left behind
    assert sorted(os.listdir(tmp_path)) == ["sweep.csv", "sweep.csv.jaxsynth-timing.json",
                                            "sweep.csv.jaxsynth.json"]


@pytest.mark.slow
def test_concurrent_writers_leave_one_row_per_replicate(tmp_path, env, uninterrupted):
    path = tmp_path / "sweep.csv"
    args = [*SWEEP, "--seeds", "300", "--out", str(path)]
    procs = [_start(args, env) for _ in range(2)]
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    results = [(rc, out, err) for out, err, rc in results]
    codes = sorted(rc for rc, _, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for rc, out, err in results:
        if rc == 2:  # refused at once, one line, nothing written
            assert err.count("\n") == 1 and "Traceback" not in err
            assert "is being written by another jaxsynth run" in err
    pd.testing.assert_frame_equal(_numbers(path), uninterrupted)


def test_reruns_report_the_file_and_extend_or_refuse(tmp_path, capsys):
    path = tmp_path / "sweep.csv"
    args = [*SWEEP, "--seeds", "2", "--out", str(path)]
    assert main(args) == 0
    assert main([*args[:-4], "--eps", "1,2,4", "--seeds", "3", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "18 rows (10 computed now, 8 already there); the file holds 18 rows" in out
    assert main([*args[:-4], "--eps", "1", "--seeds", "1", "--out", str(path)]) == 0
    assert "2 rows (0 computed now, 2 already there); the file holds 18 rows" in (
        capsys.readouterr().out)
    assert len(pd.read_csv(path)) == 18
    before = _files(tmp_path)
    assert main([*args, "--method", "tree"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different w1_columns" in err
    assert main([*args, "--metric", "l2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different metric ('linf', now 'l2')" in err
    assert _files(tmp_path) == before


# --------------------------------------------------------------------------- untrusted sidecars


def _store(path):
    """A committed store of two appends (8 + 2 rows), rows with their provenance columns."""
    provenance = {"key": "0", "data_key": 0, "metric": "linf"}
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows(extra=provenance))
        st.append(_rows(seeds=[4], extra=provenance))
    return path


def _edit_sidecar(path, reseal=False, **fields):
    import json

    side = path.with_name(path.name + ".jaxsynth.json")
    meta = {**json.loads(side.read_text()), **fields}
    if reseal:  # as if edited by someone who recomputed the seal
        meta["seal"] = store_module._seal(meta)
    side.write_text(json.dumps(meta))


SIDECAR_EDITS = {
    "length abc": dict(length="abc"), "pending garbage": dict(pending="garbage"),
    "spec x": dict(spec="x"), "columns 5": dict(columns=5),
    "append without length": dict(pending={"kind": "append"}),
    "key 0 to 5": dict(spec={**SPEC, "key": "5"}),
}


@pytest.mark.parametrize("reseal", [False, True], ids=["edited", "resealed"])
@pytest.mark.parametrize("edit", SIDECAR_EDITS.values(), ids=SIDECAR_EDITS.keys())
def test_edited_sidecars_are_refused_untouched(tmp_path, edit, reseal):
    # truth: the sidecar binds the table's bytes and rows to one sweep; a rerun with the
    # edited key (--key 5) would mix rows of two keys
    path = _store(tmp_path / "out.csv")
    _edit_sidecar(path, reseal, **edit)
    before = _files(tmp_path)
    spec = edit["spec"] if isinstance(edit.get("spec"), dict) else SPEC
    with pytest.raises(ValueError, match="left untouched"):
        ResultStore(path, spec, W1_COLUMNS).open()
    assert _files(tmp_path) == before


@pytest.mark.parametrize("label", ["NA", "NaN", "None", "null", "n/a"])
def test_labels_that_look_missing_resume(tmp_path, label):
    import jaxsynth as js

    path = tmp_path / "out.csv"
    X = js.datasets.load("spiral", n=200, key=0)
    run = dict(eps=[1.0], seeds=2, methods=["tree"], out=path, progress=False)
    first = js.simulate({label: js.PMM(depth=3)}, {label: X}, **run)
    again = js.simulate({label: js.PMM(depth=3)}, {label: X}, **run)  # resumes: nothing new
    assert again.attrs["new_rows"] == 0 and again["mechanism"].tolist() == [label] * 2
    assert again["data"].tolist() == [label] * 2
    pd.testing.assert_frame_equal(first, again)


def test_files_with_the_stores_names_are_never_removed_or_overwritten(tmp_path):
    path = tmp_path / "out.csv"
    mine = {"out.csv.jaxsynth.lock": b"my notes\n", "out.csv.jaxsynth.tmp": b"mine\n",
            "out.csv.jaxsynth.json.tmp": b"mine too\n"}
    for name, data in mine.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match="jaxsynth.lock' exists and was not written by jaxsynth"):
        ResultStore(path, SPEC, W1_COLUMNS).open()
    assert _files(tmp_path) == mine
    (tmp_path / "out.csv.jaxsynth.lock").unlink()
    with ResultStore(path, SPEC, W1_COLUMNS) as st:  # appends and a rewrite (new columns)
        st.append(_rows(seeds=[0]))
        st.append(_rows(seeds=[1], extra={"cap_hits": 0}))
        st.finish()
    files = _files(tmp_path)
    assert {k: files[k] for k in mine if k in files} == {k: v for k, v in mine.items()
                                                        if "lock" not in k}
    assert sorted(files) == sorted(["out.csv", "out.csv.jaxsynth.json",
                                    "out.csv.jaxsynth.tmp", "out.csv.jaxsynth.json.tmp"])


@pytest.mark.parametrize("then", ["append", "rewrite", "finish"])
def test_rows_another_program_appends_during_a_sweep_are_refused(tmp_path, then):
    path = tmp_path / "out.csv"
    with ResultStore(path, SPEC, W1_COLUMNS) as st:
        st.append(_rows(seeds=[0, 1]))
        st.append(_rows(seeds=[2]))  # so that finish must reorder
        with open(path, "ab") as f:
            f.write(b"a,pmm,x,300,1.0,99,0.1,0.2,c\n")
        before = _files(tmp_path)
        extra = {"cap_hits": 0} if then == "rewrite" else None
        with pytest.raises(ValueError, match="another program wrote to it"):
            st.finish() if then == "finish" else st.append(_rows(seeds=[3], extra=extra))
        assert _files(tmp_path) == before
    with pytest.raises(ValueError, match="did not commit"):
        ResultStore(path, SPEC, W1_COLUMNS).open()


def _corruptions(rng, side: bytes, table: bytes):
    """One random corruption of the sidecar or the table: (sidecar, table) bytes."""
    import json

    wrong = [None, True, -1, 2.5, "abc", "", [], [1], {}, {"kind": "append"}, 10**30]
    kind = rng.choice(["truncate", "flip", "field", "field", "resealed"])
    target = rng.choice(["sidecar", "table"]) if kind in ("truncate", "flip") else "sidecar"
    data = side if target == "sidecar" else table
    if kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "flip":
        i = rng.randrange(len(data))
        data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    else:
        meta = json.loads(side)
        field = rng.choice(sorted(meta) + ["spec.key", "pending.kind"])
        value = rng.choice(wrong)
        if field == "spec.key":
            meta["spec"] = {**meta["spec"], "key": value}
        elif field == "pending.kind":
            meta["pending"] = {"kind": value, "length": 5, "sha256": "0" * 64, "rows": 1}
        else:
            meta[field] = value
        if kind == "resealed":
            meta["seal"] = store_module._seal(meta)
        data = json.dumps(meta).encode()
    return (data, table) if target == "sidecar" else (side, data)


def test_random_corruptions_are_refused_untouched_or_recovered(tmp_path):
    rng = random.Random(2026)
    for case in range(32):
        path = _store(tmp_path / f"c{case}.csv")
        side = path.with_name(path.name + ".jaxsynth.json")
        new_side, new_table = _corruptions(rng, side.read_bytes(), path.read_bytes())
        side.write_bytes(new_side)
        path.write_bytes(new_table)
        before = (side.read_bytes(), path.read_bytes())
        try:
            with ResultStore(path, SPEC, W1_COLUMNS) as st:
                st.append(_rows(seeds=[9], extra={"key": "0", "data_key": 0, "metric": "linf"}))
                st.finish()
        except ValueError as exc:
            assert "\n" not in str(exc)
            assert (side.read_bytes(), path.read_bytes()) == before, (case, str(exc))
        else:  # recovered: every committed row valid, nothing twice
            validate_rows(readable(path, W1_COLUMNS), W1_COLUMNS, path.name)
        assert not path.with_name(path.name + ".jaxsynth.lock").exists()


def test_the_command_line_refuses_an_edited_sidecar_in_one_line(tmp_path, capsys):
    path = tmp_path / "sweep.csv"
    args = [*SWEEP, "--seeds", "2", "--out", str(path)]
    assert main(args) == 0
    _edit_sidecar(path, spec="x")
    before = _files(tmp_path)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxsynth: error: ") and err.count("\n") == 1 and "seal" in err
    assert _files(tmp_path) == before
