"""The result store: a sweep's table on disk, one valid row per replicate, whatever happens.

A store is a plain CSV file (readable by any tool) plus a *sidecar* ``FILE.jaxsynth.json``
written next to it, and a lock file ``FILE.jaxsynth.lock``.  The sidecar is how the
store recognises its own files: it records the format, the sweep's fixed settings (the
*spec*), the columns, and the byte length and SHA-256 of the CSV as last committed.

* **Foreign files are never touched.**  An existing ``FILE`` without a sidecar that
  matches its bytes (another tool's CSV, the data file, a table edited by hand) is
  refused before any work, and left byte-identical.
* **Writes are atomic.**  Every append is write-ahead: the sidecar first records the
  pending append (old and new length, hash of the new bytes), then the rows are appended
  and flushed, then the sidecar is committed.  Opening a store finishes or rolls back an
  interrupted append from those records (a partial tail the store itself wrote is cut
  back; anything else is refused).  Whole-file rewrites go through a temporary file and
  ``os.replace`` under the same protocol.  Sidecars are replaced atomically.
* **One writer.**  The lock file is held with ``fcntl.flock`` while the store is open; a
  second writer is refused at once with the reason.
* **Rows are validated** when a store is opened: key columns present and well typed
  (seed a non-negative integer, ε and n positive, metric columns finite and ≥ 0), no
  replicate twice.  A committed file that fails is refused, never repaired by guessing.
* **A changed sweep** is defined: the spec (every setting that changes what a replicate
  computes: configs, keys, ground metric, metric columns) must equal the recorded one,
  else the store refuses and names the difference; a sweep with the same spec and more
  ε values, seeds, sizes, data sets or mechanisms *extends* the table.  New columns (a
  mechanism with more diagnostics) are added by an atomic rewrite.

Decision: CSV only.  Parquet would need pyarrow (a large dependency) and gives nothing
the append protocol needs; tables of 10^6 rows are tens of MB of CSV, read in seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

FORMAT = "jaxsynth-results/1"
KEY_COLUMNS = ("mechanism", "data", "n", "eps", "seed")
"""A replicate: one row per distinct value of these columns."""
TEXT_COLUMNS = ("mechanism", "kind", "data", "adjacency", "config", "key", "ground")


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.json")


def _lockfile(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.lock")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def check_out_path(out) -> Path:
    """Validate a result path before any work: a ``.csv`` file in an existing directory."""
    if isinstance(out, bool) or not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"out must be a path to a .csv file; got {out!r}")
    path = Path(out)
    if path.suffix.lower() != ".csv":
        raise ValueError(f"out must be a .csv file; got {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"out {str(path)!r} is a directory; give a .csv file path")
    if not path.parent.is_dir():
        raise ValueError(f"out {str(path)!r}: the directory {str(path.parent)!r} does not exist")
    return path


def read_table(path) -> pd.DataFrame:
    """Read a result CSV with its text columns as text (``ValueError`` if unreadable)."""
    try:
        return pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS}, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(KEY_COLUMNS))
    except (OSError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"could not read the table {path}: {exc}") from None


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
            problems.append(f"empty {column}")
    seed = pd.to_numeric(table["seed"], errors="coerce")
    if seed.isna().any() or (seed < 0).any() or (seed != np.floor(seed)).any():
        problems.append("a seed that is not a non-negative integer")
    for column in ("eps", "n"):
        value = pd.to_numeric(table[column], errors="coerce")
        if value.isna().any() or ~np.isfinite(value).all() or (value <= 0).any():
            problems.append(f"a non-positive or non-numeric {column}")
    n = pd.to_numeric(table["n"], errors="coerce")
    if (n != np.floor(n)).any():
        problems.append("a non-integer n")
    for column in metric_columns:
        value = pd.to_numeric(table[column], errors="coerce")
        if value.isna().any() or ~np.isfinite(value).all() or (value < 0).any():
            problems.append(f"a missing, non-numeric or negative {column}")
    if not problems and table.duplicated(list(KEY_COLUMNS)).any():
        problems.append(f"{int(table.duplicated(list(KEY_COLUMNS)).sum())} repeated replicate(s)")
    if problems:
        raise ValueError(f"{where} holds invalid rows ({'; '.join(problems)})")


class ResultStore:
    """A sweep's result table on disk (see the module docstring).

    Use as a context manager; ``open`` validates and recovers, ``append`` adds rows,
    ``finish`` rewrites the table in canonical order.
    """

    def __init__(self, path, spec: dict, metric_columns):
        self.path = check_out_path(path)
        self.spec = json.loads(json.dumps(spec, sort_keys=True, default=str))
        self.metric_columns = list(metric_columns)
        self._lock = None
        self._meta = None
        self._hash = None  # running SHA-256 of the committed bytes

    # ------------------------------------------------------------------ open / close

    def __enter__(self) -> "ResultStore":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Check ownership, take the lock, recover an interrupted write, validate rows."""
        path, side = self.path, _sidecar(self.path)
        if path.exists() and not side.exists():
            raise ValueError(
                f"out file {str(path)!r} exists and was not written by jaxsynth (no "
                f"{side.name}); it is left untouched: choose another path"
            )
        self._lock = open(_lockfile(path), "a")
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise ValueError(
                f"out file {str(path)!r} is being written by another jaxsynth run; wait for "
                "it to finish or choose another path"
            ) from None
        if side.exists():
            self._meta = self._recover(self._read_meta())
            self._hash = hashlib.sha256(self.path.read_bytes())
            self._check_spec()
            validate_rows(self.table(), self.metric_columns, f"out file {str(path)!r}")
        else:
            self._meta = {"format": FORMAT, "spec": self.spec, "columns": [], "length": 0,
                          "sha256": _digest(b""), "rows": 0, "pending": None}
            self._hash = hashlib.sha256()

    def close(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _read_meta(self) -> dict:
        try:
            meta = json.loads(_sidecar(self.path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"the sidecar of {str(self.path)!r} is unreadable ({exc}); "
                             "the file is left untouched") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{_sidecar(self.path).name} is not a {FORMAT} sidecar")
        return meta

    def _commit(self, meta: dict) -> None:
        _write_atomic(_sidecar(self.path), json.dumps(meta, indent=1).encode())
        self._meta = meta

    def _recover(self, meta: dict) -> dict:
        """Finish or roll back the write the sidecar records as pending, or refuse."""
        data = self.path.read_bytes() if self.path.exists() else b""
        committed = data[: meta["length"]]
        pending = meta.get("pending")
        if pending and pending["kind"] == "rewrite" and _digest(data) == pending["sha256"]:
            meta = {**meta, "length": len(data), "sha256": pending["sha256"],
                    "rows": pending["rows"], "columns": pending["columns"], "pending": None}
            self._commit(meta)
            return meta
        if len(data) < meta["length"] or _digest(committed) != meta["sha256"]:
            raise ValueError(
                f"out file {str(self.path)!r} no longer matches what jaxsynth wrote (edited or "
                "replaced); it is left untouched: choose another path"
            )
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
            raise ValueError(
                f"out file {str(self.path)!r} has bytes jaxsynth did not commit; it is left "
                "untouched: choose another path"
            )
        self._commit(meta)
        return meta

    def _check_spec(self) -> None:
        old, new = self._meta["spec"], self.spec
        for key in sorted(set(old) | set(new)):
            if key == "groups":
                continue
            if old.get(key) != new.get(key):
                raise ValueError(
                    f"out file {str(self.path)!r} was written by a sweep with a different "
                    f"{key} ({old.get(key)!r}, now {new.get(key)!r}); a changed sweep may only "
                    "add eps values, seeds, sizes, data sets or mechanisms: choose another path"
                )
        for label, value in new.get("groups", {}).items():
            if label in old.get("groups", {}) and old["groups"][label] != value:
                raise ValueError(
                    f"out file {str(self.path)!r} holds {label!r} made with "
                    f"{old['groups'][label]!r}, now {value!r}: choose another path"
                )
        merged = {**old.get("groups", {}), **new.get("groups", {})}
        self.spec = {**new, "groups": merged}

    # ------------------------------------------------------------------ reading

    def table(self) -> pd.DataFrame:
        """Every committed row."""
        if not self._meta["length"]:
            return pd.DataFrame(columns=list(KEY_COLUMNS))
        return read_table(self.path)

    @property
    def rows(self) -> int:
        return int(self._meta["rows"])

    # ------------------------------------------------------------------ writing

    def append(self, rows: pd.DataFrame) -> None:
        """Append rows (new replicates only) with the write-ahead protocol."""
        if len(rows) == 0:
            return
        validate_rows(rows, self.metric_columns, "new rows")
        columns = self._meta["columns"]
        if columns and not set(rows.columns) <= set(columns):
            old = self.table()
            self._rewrite(pd.concat([old, rows], ignore_index=True))
            return
        if not columns:
            self._rewrite(rows)
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

    def _rewrite(self, table: pd.DataFrame) -> None:
        """Replace the whole file atomically (new columns, canonical order)."""
        data = table.to_csv(index=False).encode()
        columns = list(table.columns)
        pending = {"kind": "rewrite", "sha256": _digest(data), "rows": len(table),
                   "columns": columns}
        self._commit({**self._meta, "spec": self.spec, "pending": pending})
        _write_atomic(self.path, data)
        self._hash = hashlib.sha256(data)
        self._commit({**self._meta, "length": len(data), "sha256": _digest(data),
                      "rows": len(table), "columns": columns, "pending": None})

    def finish(self) -> pd.DataFrame:
        """Rewrite the table sorted by the key columns; return it."""
        table = self.table()
        ordered = table.sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)
        if not table.equals(ordered) and len(table):
            self._rewrite(ordered)
        return ordered


def readable(path) -> pd.DataFrame:
    """Read a table written by the store for ``jaxsynth rate`` (validated, read-only)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file {str(path)!r} not found")
    table = read_table(path)
    missing = [c for c in KEY_COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{str(path)!r} is not a jaxsynth result table (no {missing} columns)")
    return table


__all__ = ["KEY_COLUMNS", "ResultStore", "check_out_path", "read_table", "readable",
           "validate_rows"]
