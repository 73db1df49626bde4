"""The result store: a sweep's table on disk, one valid row per replicate, whatever happens.

A store is a plain CSV file (readable by any tool) plus a *sidecar* ``FILE.jaxsynth.json``
written next to it.  The sidecar is how the store recognises its own files: it records
the format, the sweep's fixed settings (the *spec*), the columns, the row count, and the
byte length and SHA-256 of the CSV as last committed.  While a writer is active it also
holds ``FILE.jaxsynth.lock`` (removed when it finishes).

* **Foreign files are never touched.**  An existing ``FILE`` without a sidecar (another
  tool's CSV, the data file, any file jaxsynth did not write) is refused before any work
  (``check_out_path``) and left byte-identical; so is a store whose bytes no longer
  match its sidecar (edited by hand, appended to by another program).
* **Writes are atomic.**  Every append is write-ahead: the sidecar first records the
  pending append (new length, hash of the new bytes), then the rows are appended and
  flushed, then the sidecar is committed.  Opening a store finishes or rolls back an
  interrupted append from those records (a partial tail the store itself wrote is cut
  back; anything else is refused).  Whole-file rewrites go through a temporary file
  ``FILE.jaxsynth.tmp`` and ``os.replace`` under the same protocol, and sidecars are
  replaced atomically, so a ``kill -9`` at any instant leaves a store that the next run
  recovers.  A sidecar whose CSV was deleted is stale and is replaced.
* **One writer.**  ``FILE.jaxsynth.lock`` is held with ``fcntl.flock`` while the store is
  open; a second writer is refused at once with the reason (it never waits, and never
  writes a row).
* **Rows are validated** when a store is opened: key columns present and well typed
  (seed a non-negative integer, ε and n positive, metric columns finite and ≥ 0), no
  replicate twice, the row count that of the sidecar.  A committed file that fails is
  refused, never repaired by guessing.
* **A changed sweep** is defined: the spec (every setting that changes what a replicate
  computes: sweep key, data key, ground metric, metric columns) must equal the recorded
  one, else the store refuses and names the difference; the mechanisms' configurations
  and the data sets' fingerprints must equal the recorded ones where they meet; a sweep
  with the same spec and more ε values, seeds, sizes, data sets or mechanisms *extends*
  the table.  New columns (a mechanism with more diagnostics) are added by an atomic
  rewrite.
* **Bounded.**  A store holds at most ``MAX_ROWS`` rows (a sweep's table is held in
  memory to sort it and return it); larger sweeps are refused before any work, with the
  remedy: parts over disjoint seeds, one file each.

Decision: CSV only.  Parquet would need pyarrow (a large dependency, absent here) and
gives nothing the append protocol needs; ``MAX_ROWS`` rows are ~350 MB of CSV, read in
seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsynth.core.validate import check_output_path

FORMAT = "jaxsynth-results/1"
KEY_COLUMNS = ("mechanism", "data", "n", "eps", "seed")
"""A replicate: one row per distinct value of these columns."""
TEXT_COLUMNS = ("mechanism", "kind", "data", "adjacency", "config", "key", "ground")
MAX_ROWS = 1_000_000
"""Most rows of one store (and of one ``simulate`` call): ~0.7 GB as a DataFrame."""
MERGED_SPEC_KEYS = ("groups", "data")
"""Spec entries that are dicts merged across runs (conflicting values are refused)."""


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.json")


def _lockfile(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.lock")


def _tmpfile(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.tmp")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes, tmp: Path | None = None) -> None:
    tmp = tmp or path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _foreign(path: Path) -> str:
    return (f"out file {str(path)!r} exists and was not written by jaxsynth (no "
            f"{_sidecar(path).name}); it is left untouched: choose another path")


def check_out_path(out) -> Path:
    """Validate a result path before any work.

    A ``.csv`` file path in an existing, writable directory that is either absent or a
    store jaxsynth wrote (it has a sidecar); anything else is refused with the reason.
    """
    path = check_output_path(out, "out", (".csv",))
    if path.exists() and not path.is_file():
        raise ValueError(f"out {str(path)!r} is not a regular file")
    if path.exists() and not _sidecar(path).exists():
        raise ValueError(_foreign(path))
    if _sidecar(path).exists() and not _sidecar(path).is_file():
        raise ValueError(f"{str(_sidecar(path))!r} is not a regular file")
    return path


def read_table(path, data: bytes | None = None) -> pd.DataFrame:
    """Read a result CSV with its text columns as text (``ValueError`` if unreadable)."""
    source = io.BytesIO(data) if data is not None else path
    try:
        return pd.read_csv(source, dtype={c: str for c in TEXT_COLUMNS}, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(KEY_COLUMNS))
    except (OSError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"could not read the table {str(path)!r}: {message}") from None


def _show(value) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _bad(value: pd.Series) -> np.ndarray:
    """Entries that are not finite numbers."""
    numbers = pd.to_numeric(value, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    return ~np.isfinite(numbers)


def validate_rows(table: pd.DataFrame, metric_columns, where: str) -> None:
    """Raise ``ValueError`` unless every row is a well-formed, distinct replicate."""
    missing = [c for c in (*KEY_COLUMNS, *metric_columns) if c not in table]
    if missing:
        raise ValueError(f"{where} lacks the column(s) {missing}")
    if len(table) == 0:
        return
    problems = []
    for column in ("mechanism", "data"):
        if table[column].isna().any():
            problems.append(f"an empty {column}")
    for column, rule in (("seed", "a non-negative integer"), ("n", "a positive integer"),
                         ("eps", "a positive number")):
        bad = _bad(table[column])
        value = pd.to_numeric(table[column], errors="coerce").to_numpy(np.float64,
                                                                         na_value=np.nan)
        with np.errstate(invalid="ignore"):
            if column == "seed":
                bad |= (value < 0) | (value != np.floor(value))
            elif column == "n":
                bad |= (value <= 0) | (value != np.floor(value))
            else:
                bad |= value <= 0
        if bad.any():
            problems.append(f"{int(bad.sum())} {column} value(s) that are not {rule} "
                            f"(first: {_show(table[column].iloc[int(np.argmax(bad))])})")
    for column in metric_columns:
        bad = _bad(table[column])
        value = pd.to_numeric(table[column], errors="coerce").to_numpy(np.float64,
                                                                         na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad |= value < 0
        if bad.any():
            problems.append(f"{int(bad.sum())} {column} value(s) that are missing, "
                            f"non-numeric or negative (first: "
                            f"{_show(table[column].iloc[int(np.argmax(bad))])})")
    if not problems:
        keys = table[list(KEY_COLUMNS)].assign(
            n=pd.to_numeric(table["n"]), eps=pd.to_numeric(table["eps"]),
            seed=pd.to_numeric(table["seed"]))
        repeated = int(keys.duplicated().sum())
        if repeated:
            problems.append(f"{repeated} repeated replicate(s) (same {', '.join(KEY_COLUMNS)})")
    if problems:
        raise ValueError(f"{where} holds invalid rows: {'; '.join(problems)}")


def _keys(table: pd.DataFrame) -> list[tuple]:
    """The replicate keys of (validated) rows, normalised: (str, str, int, float, int)."""
    if len(table) == 0:
        return []
    return list(zip(table["mechanism"].astype(str), table["data"].astype(str),
                    pd.to_numeric(table["n"]).astype(np.int64).tolist(),
                    pd.to_numeric(table["eps"]).astype(np.float64).tolist(),
                    pd.to_numeric(table["seed"]).astype(np.int64).tolist()))


class ResultStore:
    """A sweep's result table on disk (see the module docstring).

    Use as a context manager; ``open`` checks ownership, locks, recovers and validates,
    ``append`` adds rows, ``finish`` rewrites the table in canonical order.
    """

    def __init__(self, path, spec: dict, metric_columns):
        self.path = check_out_path(path)
        self.spec = json.loads(json.dumps(spec, sort_keys=True, default=str))
        self.metric_columns = list(metric_columns)
        self._lock = None
        self._meta = None
        self._hash = None  # running SHA-256 of the committed bytes
        self._done = set()  # replicate keys of the committed rows

    # ------------------------------------------------------------------ open / close

    def __enter__(self) -> "ResultStore":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Check ownership, take the lock, recover an interrupted write, validate rows."""
        path, side = self.path, _sidecar(self.path)
        check_out_path(path)  # before the lock: no lock file next to a foreign file
        self._lock = self._acquire()
        try:
            check_out_path(path)  # again, now that no jaxsynth writer can interfere
            if _tmpfile(path).exists():  # an interrupted rewrite's temporary file: ours
                _tmpfile(path).unlink()
            if side.exists() and path.exists():
                self._meta = self._recover(self._read_meta())
                self._hash = hashlib.sha256(path.read_bytes())
                self._check_spec()
                table = self.table()
                validate_rows(table, self.metric_columns, f"out file {str(path)!r}")
                if len(table) != self.rows:
                    raise ValueError(
                        f"out file {str(path)!r} holds {len(table)} rows but its sidecar "
                        f"records {self.rows}; it is left untouched: choose another path")
                self._done = set(_keys(table))
            else:  # new, or a stale sidecar whose CSV was deleted: start afresh
                if side.exists():
                    self._read_meta()  # only replace a sidecar of ours
                self._meta = {"format": FORMAT, "spec": self.spec, "columns": [],
                              "length": 0, "sha256": _digest(b""), "rows": 0,
                              "pending": None}
                self._hash = hashlib.sha256()
        except BaseException:
            self.close()
            raise

    def _acquire(self):
        """Hold the lock file (``flock``), or refuse at once if another writer holds it."""
        lock = _lockfile(self.path)
        for _ in range(100):
            try:
                f = open(lock, "a")
            except OSError as exc:
                raise ValueError(f"cannot create the lock file {str(lock)!r}: "
                                 f"{exc.strerror}") from None
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                raise ValueError(
                    f"out file {str(self.path)!r} is being written by another jaxsynth run "
                    f"(it holds {lock.name}); wait for it to finish, or choose another path"
                ) from None
            try:  # the holder before us may have removed the file: lock the current one
                current = os.stat(lock)
                held = os.fstat(f.fileno())
                if (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
                    return f
            except FileNotFoundError:
                pass
            f.close()
        raise ValueError(f"could not lock {str(lock)!r}")

    def close(self) -> None:
        """Release the lock and remove the lock file."""
        if self._lock is not None:
            try:
                os.unlink(_lockfile(self.path))
            except FileNotFoundError:
                pass
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _read_meta(self) -> dict:
        side = _sidecar(self.path)
        try:
            meta = json.loads(side.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"the sidecar {str(side)!r} is unreadable ({exc}); the files are "
                             "left untouched: choose another path") from None
        keys = ("spec", "columns", "length", "sha256", "rows")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or any(
                k not in meta for k in keys):
            raise ValueError(f"{str(side)!r} is not a {FORMAT} sidecar; the files are left "
                             "untouched: choose another path")
        return meta

    def _commit(self, meta: dict) -> None:
        _write_atomic(_sidecar(self.path), json.dumps(meta, indent=1).encode())
        self._meta = meta

    def _changed(self, what: str) -> ValueError:
        return ValueError(
            f"out file {str(self.path)!r} {what}; it is left untouched: choose another path "
            f"(or delete it and {_sidecar(self.path).name} to start over)")

    def _recover(self, meta: dict) -> dict:
        """Finish or roll back the write the sidecar records as pending, or refuse."""
        data = self.path.read_bytes()
        committed = data[: meta["length"]]
        pending = meta.get("pending")
        if pending and pending["kind"] == "rewrite" and _digest(data) == pending["sha256"]:
            meta = {**meta, "length": len(data), "sha256": pending["sha256"],
                    "rows": pending["rows"], "columns": pending["columns"], "pending": None}
            self._commit(meta)
            return meta
        if len(data) < meta["length"] or _digest(committed) != meta["sha256"]:
            raise self._changed("no longer matches what jaxsynth wrote (edited or replaced)")
        if len(data) == meta["length"]:
            return {**meta, "pending": None}
        tail = data[meta["length"]:]
        appending = pending is not None and pending["kind"] == "append"
        if appending and len(data) == pending["length"] and _digest(tail) == pending["sha256"]:
            meta = {**meta, "length": len(data), "sha256": _digest(data),
                    "rows": pending["rows"], "pending": None}
        elif appending and len(data) < pending["length"]:
            with open(self.path, "r+b") as f:  # a partial append of ours: cut it back
                f.truncate(meta["length"])
                f.flush()
                os.fsync(f.fileno())
            meta = {**meta, "pending": None}
        else:
            raise self._changed("has bytes jaxsynth did not commit (appended to by another "
                                "program)")
        self._commit(meta)
        return meta

    def _check_spec(self) -> None:
        old, new = self._meta["spec"], self.spec
        for key in sorted(set(old) | set(new)):
            if key in MERGED_SPEC_KEYS:
                continue
            if old.get(key) != new.get(key):
                raise ValueError(
                    f"out file {str(self.path)!r} was written by a sweep with a different "
                    f"{key} ({old.get(key)!r}, now {new.get(key)!r}); a changed sweep may only "
                    "add eps values, seeds, sizes, data sets or mechanisms: choose another path"
                )
        merged = {}
        for key in MERGED_SPEC_KEYS:
            before, now = old.get(key, {}), new.get(key, {})
            for label, value in now.items():
                if label in before and before[label] != value:
                    what = "data" if key == "data" else "made with"
                    raise ValueError(
                        f"out file {str(self.path)!r} holds {label!r} {what} "
                        f"{before[label]!r}, now {value!r}; rows of two different sweeps "
                        "would mix: choose another path"
                    )
            merged[key] = {**before, **now}
        self.spec = {**new, **merged}

    # ------------------------------------------------------------------ reading

    def table(self) -> pd.DataFrame:
        """Every committed row."""
        if not self._meta["length"]:
            return pd.DataFrame(columns=list(KEY_COLUMNS))
        return read_table(self.path)

    @property
    def rows(self) -> int:
        """The committed row count (that of the file)."""
        return int(self._meta["rows"])

    def check_room(self, new_rows: int) -> None:
        """Refuse, before any work, a sweep that would take the file past ``MAX_ROWS``."""
        if self.rows + new_rows > MAX_ROWS:
            raise ValueError(
                f"out file {str(self.path)!r} holds {self.rows} rows and the sweep would add "
                f"{new_rows}; a store holds at most {MAX_ROWS} rows: write the rest to another "
                "file (disjoint seeds; 'jaxsynth rate' reads several files)")

    # ------------------------------------------------------------------ writing

    def append(self, rows: pd.DataFrame) -> None:
        """Append rows (new replicates only) with the write-ahead protocol."""
        if len(rows) == 0:
            return
        validate_rows(rows, self.metric_columns, "new rows")
        keys = _keys(rows)
        again = sum(k in self._done for k in keys)
        if again:
            raise ValueError(f"new rows: {again} repeated replicate(s) already in out file "
                             f"{str(self.path)!r}; a replicate is never written twice")
        columns = self._meta["columns"]
        if not columns or not set(rows.columns) <= set(columns):
            old = self.table()
            both = pd.concat([old, rows], ignore_index=True) if len(old) else rows
            validate_rows(both, self.metric_columns, f"out file {str(self.path)!r} with new rows")
            self._rewrite(both)
            self._done.update(keys)
            return
        data = rows.reindex(columns=columns).to_csv(header=False, index=False).encode()
        old_length = self._meta["length"]
        pending = {"kind": "append", "length": old_length + len(data), "sha256": _digest(data),
                   "rows": self.rows + len(rows)}
        self._commit({**self._meta, "spec": self.spec, "pending": pending})
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self._hash.update(data)
        self._commit({**self._meta, "length": pending["length"], "sha256": self._hash.hexdigest(),
                      "rows": pending["rows"], "pending": None})
        self._done.update(keys)

    def _rewrite(self, table: pd.DataFrame) -> None:
        """Replace the whole file atomically (new columns, canonical order)."""
        data = table.to_csv(index=False).encode()
        columns = list(table.columns)
        pending = {"kind": "rewrite", "sha256": _digest(data), "rows": len(table),
                   "columns": columns}
        self._commit({**self._meta, "spec": self.spec, "pending": pending})
        _write_atomic(self.path, data, _tmpfile(self.path))
        self._hash = hashlib.sha256(data)
        self._commit({**self._meta, "length": len(data), "sha256": _digest(data),
                      "rows": len(table), "columns": columns, "pending": None})

    def finish(self) -> pd.DataFrame:
        """Rewrite the table sorted by the key columns; return it."""
        table = self.table()
        ordered = table.sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)
        if len(table) and not table.equals(ordered):
            self._rewrite(ordered)
        return ordered


def _committed(path: Path, data: bytes) -> bytes:
    """The bytes of ``data`` a store at ``path`` has committed (all of them if no store)."""
    try:
        meta = json.loads(_sidecar(path).read_text())
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return data
        pending = meta.get("pending") or {}
        if pending.get("kind") == "rewrite" and _digest(data) == pending.get("sha256"):
            return data  # a rewrite done but not yet committed
        length = meta.get("length")
        if isinstance(length, int) and length <= len(data) and (
                _digest(data[:length]) == meta.get("sha256")):
            return data[:length]  # without an append in progress
    except (OSError, ValueError, TypeError):
        pass
    return data


def readable(path, metric_columns=()) -> pd.DataFrame:
    """Read a result table for ``jaxsynth rate`` (validated, read-only).

    Reads what a store has committed (a writer's unfinished append is left out) and
    refuses a file without the key columns, with no rows, or with an invalid row
    (``validate_rows``: key columns and ``metric_columns``).
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"file must be a path; got {path!r}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file {str(path)!r} not found")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"could not read {str(path)!r}: {exc.strerror}") from None
    data = _committed(path, data)
    table = read_table(path, data)
    missing = [c for c in KEY_COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{str(path)!r} is not a jaxsynth result table (no {missing} "
                         "column(s))")
    if len(table) == 0:
        raise ValueError(f"{str(path)!r} holds no rows")
    absent = [c for c in metric_columns if c not in table]
    if absent:
        present = [c for c in table.columns if str(c).startswith("w1_")]
        raise ValueError(f"{str(path)!r} has no column {', '.join(absent)}; its W1 columns: "
                         f"{', '.join(present) or 'none'}")
    validate_rows(table, list(metric_columns), repr(str(path)))
    return table


__all__ = ["KEY_COLUMNS", "MAX_ROWS", "ResultStore", "check_out_path", "read_table",
           "readable", "validate_rows"]
