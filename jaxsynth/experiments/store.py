"""The result store: a sweep's table on disk, one valid row per replicate, whatever happens.

A store is a plain CSV file (readable by any tool) plus a *sidecar* ``FILE.jaxsynth.json``
written next to it, which records the format, the sweep's fixed settings (the *spec*),
the columns, the row count, the byte length and SHA-256 of the CSV as last committed,
and a *seal* over all of that; a writer holds ``FILE.jaxsynth.lock`` while it runs.
The sidecar is untrusted input, validated completely before anything is written;
foreign files are never touched; every append is write-ahead and every rewrite atomic,
so a ``kill -9`` at any instant leaves a store the next run recovers; one writer at a
time; rows are read with fixed rules and validated; a changed sweep is refused, naming
the setting, while more ε values, seeds, sizes, data sets or mechanisms extend the
table; a store of an earlier ``FORMAT`` is refused for writing and read by ``readable``;
a store holds at most ``MAX_ROWS`` rows.  Each rule, and why CSV: the section "The
result store" of ``docs/guide/sweep-design.md``.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import secrets
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsynth.core.validate import check_output_path

FORMAT = "jaxsynth-results/3"
"""The sidecar format.  3: the ground metric is the column and spec key ``metric`` and the
spec's W1 columns are ``w1_columns`` (2: ``ground`` and ``metrics``)."""
EARLIER_FORMATS = ("jaxsynth-results/2",)
"""Formats of earlier jaxsynth versions: refused for writing, read by ``readable``."""
KEY_COLUMNS = ("mechanism", "data", "n", "eps", "seed")
"""A replicate: one row per distinct value of these columns."""
TEXT_COLUMNS = ("mechanism", "kind", "data", "adjacency", "config", "key", "metric",
                "fingerprint")
OPTIONAL_INTEGERS = {"d": "a positive integer", "intrinsic_dim": "a positive integer",
                     "depth": "a non-negative integer"}
"""Columns checked like the key columns when a table has them (``validate_rows``), except
that an empty field is allowed (rows of a table that lacked the column)."""
MAX_ROWS = 1_000_000
"""Most rows of one store (and of one ``simulate`` call): the table is held in memory."""
MERGED_SPEC_KEYS = ("groups", "data")
"""Spec entries that are dicts merged across runs (conflicting values are refused)."""
PROVENANCE = ("key", "data_key", "metric")
"""Spec entries that every row also records in the column of that name."""
LOCK_MARK = b"jaxsynth lock file: removed when the run holding it ends\n"
"""The whole content of a lock file jaxsynth created (anything else is not ours)."""
_HEX = re.compile(r"[0-9a-f]{64}")
_TMP = re.compile(r"\.[0-9a-f]{16}\.tmp")


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.json")


def _lockfile(path: Path) -> Path:
    return path.with_name(path.name + ".jaxsynth.lock")


def _tmpname(path: Path) -> str:
    """A fresh temporary file name beside ``path`` (``NAME.<16 hex digits>.tmp``)."""
    return f"{path.name}.{secrets.token_hex(8)}.tmp"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes, tmp_name: str | None = None) -> None:
    """Replace ``path`` by ``data`` through a new temporary file (``O_EXCL``: no file of
    anyone else is ever overwritten), then fsync the directory so the rename is durable."""
    tmp = path.with_name(tmp_name or _tmpname(path))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ValueError(f"{str(tmp)!r} exists and was not written by jaxsynth; it is left "
                         "untouched: remove it or choose another path") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _seal(meta: dict) -> str:
    """SHA-256 of the sidecar without its seal: binds spec, columns, rows and digests."""
    body = {k: v for k, v in meta.items() if k != "seal"}
    return _digest(json.dumps(body, sort_keys=True).encode())


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_names(value) -> bool:
    return (isinstance(value, list) and all(isinstance(v, str) and v for v in value)
            and len(set(value)) == len(value))


PENDING = {"append": {"kind", "length", "sha256", "rows"},
           "rewrite": {"kind", "sha256", "rows", "columns", "tmp"}}
"""The fields of a pending write, by kind."""


def _schema_error(meta, name: str, formats=(FORMAT,)) -> str | None:
    """What is wrong with the parsed sidecar of the table ``name``, or ``None``."""
    if not isinstance(meta, dict) or meta.get("format") not in formats:
        return f"it is not a {FORMAT} sidecar"
    fields = {"format", "spec", "columns", "length", "sha256", "rows", "pending", "seal"}
    if set(meta) != fields:
        return f"its fields are {sorted(meta)}, not {sorted(fields)}"
    if meta["seal"] != _seal(meta):
        return "its seal does not match its content (edited or corrupted)"
    spec, pending = meta["spec"], meta["pending"]
    if not isinstance(spec, dict) or any(not isinstance(spec.get(k, {}), dict)
                                         for k in MERGED_SPEC_KEYS):
        return "its spec is not a mapping of settings"
    if not (_is_names(meta["columns"]) and _is_count(meta["length"])
            and _is_count(meta["rows"]) and isinstance(meta["sha256"], str)
            and _HEX.fullmatch(meta["sha256"])):
        return "its columns, length, rows or sha256 are not of their types"
    if pending is None:
        return None
    kind = pending.get("kind") if isinstance(pending, dict) else None
    if not isinstance(kind, str) or kind not in PENDING or set(pending) != PENDING[kind] or not (
            _is_count(pending["rows"]) and isinstance(pending["sha256"], str)
            and _HEX.fullmatch(pending["sha256"])):
        return "its pending write is malformed"
    if kind == "append" and not (_is_count(pending["length"])
                                 and pending["length"] > meta["length"]):
        return "its pending append is malformed"
    if kind == "rewrite" and not (_is_names(pending["columns"]) and isinstance(
            pending["tmp"], str) and pending["tmp"].startswith(name)
            and _TMP.fullmatch(pending["tmp"][len(name):])):
        return "its pending rewrite is malformed"
    return None


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
    """Read a result CSV (``ValueError`` if unreadable) with fixed rules, never guessed.

    Text columns (``TEXT_COLUMNS``) are text, and only an empty field is missing (a label
    ``NA``, ``None`` or ``null`` stays a label); in the other columns an empty field or
    ``nan`` is missing and numbers are numbers.
    """
    try:
        data = Path(path).read_bytes() if data is None else data
        columns = pd.read_csv(io.BytesIO(data), nrows=0).columns
        missing = {c: [""] if c in TEXT_COLUMNS else ["", "nan", "NaN"] for c in columns}
        return pd.read_csv(io.BytesIO(data), dtype={c: str for c in TEXT_COLUMNS if c in columns},
                           keep_default_na=False, na_values=missing)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(KEY_COLUMNS))
    except (OSError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"could not read the table {str(path)!r}: {message}") from None


def _show(value) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _bad(value: pd.Series) -> np.ndarray:
    """Entries that are not finite numbers (booleans, which pandas reads from ``True``, are not)."""
    numbers = pd.to_numeric(value, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    if value.dtype == object:
        boolean = value.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(bool)
    else:
        boolean = np.full(len(value), pd.api.types.is_bool_dtype(value.dtype))
    return ~np.isfinite(numbers) | boolean


def control_only(table: pd.DataFrame) -> np.ndarray:
    """Rows of a sweep with ``precision_control`` that measured only the free columns
    (``control_only`` True): their other W1 columns are empty."""
    if "control_only" not in table:
        return np.zeros(len(table), bool)
    return table["control_only"].astype(str).str.lower().eq("true").to_numpy(bool)


def validate_rows(table: pd.DataFrame, w1_columns, where: str) -> None:
    """Raise ``ValueError`` unless every row is a well-formed, distinct replicate."""
    missing = [c for c in (*KEY_COLUMNS, *w1_columns) if c not in table]
    if missing:
        raise ValueError(f"{where} lacks the column(s) {missing}")
    if len(table) == 0:
        return
    problems = []
    for column in ("mechanism", "data"):
        if table[column].isna().any():
            problems.append(f"an empty {column}")
    # the key columns, then the numbers the rate fit reads when present (its theory: d,
    # intrinsic_dim, depth): text in any of them is refused, never averaged or skipped
    rules = [("seed", "a non-negative integer"), ("n", "a positive integer"),
             ("eps", "a positive number")]
    rules += [(c, r) for c, r in OPTIONAL_INTEGERS.items() if c in table]
    for column, rule in rules:
        bad = _bad(table[column])
        value = pd.to_numeric(table[column], errors="coerce").to_numpy(np.float64,
                                                                         na_value=np.nan)
        with np.errstate(invalid="ignore"):
            if "non-negative" in rule:
                bad |= value < 0
            else:
                bad |= value <= 0
            if "integer" in rule:
                bad |= value != np.floor(value)
        if column in OPTIONAL_INTEGERS:
            bad &= table[column].notna().to_numpy(bool)  # empty is allowed, text is not
        if bad.any():
            problems.append(f"{int(bad.sum())} {column} value(s) that are not {rule} "
                            f"(first: {_show(table[column].iloc[int(np.argmax(bad))])})")
    controls = control_only(table)  # rows that measured the free columns alone
    for column in w1_columns:
        bad = _bad(table[column])
        value = pd.to_numeric(table[column], errors="coerce").to_numpy(np.float64,
                                                                         na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad |= value < 0
        bad &= ~(controls & table[column].isna().to_numpy(bool))
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


def keys_of(table: pd.DataFrame) -> list[tuple]:
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

    def __init__(self, path, spec: dict, w1_columns):
        self.path = check_out_path(path)
        self.spec = json.loads(json.dumps(spec, sort_keys=True, default=str))
        self.w1_columns = list(w1_columns)
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
        """Check ownership, take the lock, validate everything, then recover.

        The sidecar (schema, types, seal), the committed bytes, the spec, the rows and
        their provenance are all checked before anything is written, so a refusal leaves
        every file byte-identical.
        """
        path, side = self.path, _sidecar(self.path)
        check_out_path(path)  # before the lock: no lock file next to a foreign file
        self._lock = self._acquire()
        try:
            check_out_path(path)  # again, now that no jaxsynth writer can interfere
            if side.exists() and path.exists():
                self._open_existing()
            else:  # new, or a stale sidecar whose CSV was deleted: start afresh
                if side.exists():  # only replace a sidecar of ours
                    self._remove_rewrite_copy(self._read_meta())
                self._meta = {"format": FORMAT, "spec": self.spec, "columns": [],
                              "length": 0, "sha256": _digest(b""), "rows": 0,
                              "pending": None}
                self._hash = hashlib.sha256()
            self._remove_stale_sidecar_copies()
        except BaseException:
            self.close()
            raise

    def _open_existing(self) -> None:
        """Validate a store on disk completely, then finish or roll back its pending write."""
        meta = self._read_meta()
        after, data, cut = self._recovery(meta, self.path.read_bytes())
        self._meta = after
        self._check_spec()
        table = read_table(self.path, data) if after["length"] else pd.DataFrame(
            columns=list(KEY_COLUMNS))
        where = f"out file {str(self.path)!r}"
        validate_rows(table, self.w1_columns, where)
        if after["length"] and list(table.columns) != after["columns"]:
            raise self._changed(f"has the columns {list(table.columns)} but its sidecar "
                                f"records {after['columns']}")
        if len(table) != after["rows"]:
            raise self._changed(f"holds {len(table)} rows but its sidecar records "
                                f"{after['rows']}")
        self._check_provenance(table)
        if cut:  # a partial append of ours: cut it back
            with open(self.path, "r+b") as f:
                f.truncate(after["length"])
                f.flush()
                os.fsync(f.fileno())
        self._remove_rewrite_copy(meta)
        if after != meta:
            self._commit(after)
        self._hash = hashlib.sha256(data)
        self._done = set(keys_of(table))

    def _remove_rewrite_copy(self, meta: dict) -> None:
        """Remove the temporary file of a pending rewrite whose rename did not run."""
        pending = meta["pending"] or {}
        if pending.get("kind") == "rewrite":
            self.path.with_name(pending["tmp"]).unlink(missing_ok=True)

    def _check_provenance(self, table: pd.DataFrame) -> None:
        """Rows record the sweep's key, data key and ground metric, and the fingerprint of
        their data set's points: they must be the spec's."""
        for key in PROVENANCE:
            if key in self.spec and key in table and len(table):
                values = table[key].astype(str)
                wrong = values != str(self.spec[key])
                if wrong.any():
                    raise self._changed(f"holds rows of {key} {values[wrong].iloc[0]!r}, not "
                                        f"{self.spec[key]!r}")
        if "fingerprint" in table and len(table):  # the points each data set's rows used
            recorded = self.spec.get("data", {})
            pairs = table[["data", "n", "fingerprint"]].dropna().drop_duplicates()
            for data, n, fingerprint in pairs.itertuples(index=False):
                want = recorded.get(f"{data} | n={int(n)}")
                if want is not None and fingerprint != want:
                    raise self._changed(f"holds rows of the data set {data!r} (n = {int(n)}) "
                                        f"measured on the points {fingerprint}, not on this "
                                        f"sweep's {want}")

    def _remove_stale_sidecar_copies(self) -> None:
        """Remove the temporary copies of this sidecar a crash left before their rename.

        Only names ``_tmpname`` draws (16 random hex digits, created with ``O_EXCL``) match.
        """
        side = _sidecar(self.path)
        for copy in side.parent.glob(side.name + ".*.tmp"):
            if _TMP.fullmatch(copy.name[len(side.name):]):
                copy.unlink(missing_ok=True)

    def _acquire(self):
        """Hold the lock file (``flock``), or refuse at once if another writer holds it.

        A lock file is created with ``O_EXCL`` holding ``LOCK_MARK``; an existing one is
        reused only if it holds exactly that (one a killed run left), never otherwise.
        """
        lock = _lockfile(self.path)
        busy = ValueError(
            f"out file {str(self.path)!r} is being written by another jaxsynth run (it holds "
            f"{lock.name}); wait for it to finish, or choose another path")
        for _ in range(100):
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, LOCK_MARK)
                os.close(fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise ValueError(f"cannot create the lock file {str(lock)!r}: "
                                 f"{exc.strerror}") from None
            try:
                f = open(lock, "rb")
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise ValueError(f"cannot open the lock file {str(lock)!r}: "
                                 f"{exc.strerror}") from None
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                raise busy from None
            try:  # the holder before us may have removed the file: lock the current one
                current = os.stat(lock)
                held = os.fstat(f.fileno())
                same = (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev)
            except FileNotFoundError:
                same = False
            content = f.read(len(LOCK_MARK) + 1) if same else b""
            if same and content == LOCK_MARK:
                return f
            f.close()
            if same and LOCK_MARK.startswith(content):  # another run is creating it
                raise busy
            if same:
                raise ValueError(f"{str(lock)!r} exists and was not written by jaxsynth; it is "
                                 "left untouched: remove it or choose another path")
        raise ValueError(f"could not lock {str(lock)!r}")

    def close(self) -> None:
        """Release the lock and remove the lock file (ours: it holds ``LOCK_MARK``)."""
        if self._lock is not None:
            try:
                os.unlink(_lockfile(self.path))
            except FileNotFoundError:
                pass
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _read_meta(self) -> dict:
        """The sidecar, parsed and validated (``_schema_error``), or ``ValueError``."""
        side = _sidecar(self.path)
        try:
            meta = json.loads(side.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:
            raise ValueError(f"the sidecar {str(side)!r} is unreadable ({exc}); the files are "
                             "left untouched: choose another path") from None
        if isinstance(meta, dict) and meta.get("format") in EARLIER_FORMATS:
            raise ValueError(
                f"out file {str(self.path)!r} was written by an earlier jaxsynth format "
                f"({meta['format']}, now {FORMAT}); start a new file (it is left untouched, "
                "and 'jaxsynth rate' still reads it)")
        problem = _schema_error(meta, self.path.name)
        if problem:
            raise ValueError(f"the sidecar {str(side)!r} is refused: {problem}; the files are "
                             "left untouched: choose another path")
        return meta

    def _commit(self, meta: dict) -> None:
        meta = {**meta, "seal": _seal(meta)}
        write_atomic(_sidecar(self.path), json.dumps(meta, indent=1).encode())
        self._meta = meta

    def _changed(self, what: str) -> ValueError:
        return ValueError(
            f"out file {str(self.path)!r} {what}; it is left untouched: choose another path "
            f"(or delete it and {_sidecar(self.path).name} to start over)")

    def _recovery(self, meta: dict, data: bytes) -> tuple[dict, bytes, bool]:
        """How to finish or roll back the pending write, without writing anything.

        Returns the sidecar after recovery, the committed bytes, and whether the file
        must be cut back to them; refuses bytes jaxsynth did not commit.
        """
        pending = meta["pending"] or {}
        done = {**meta, "pending": None}
        if pending.get("kind") == "rewrite" and _digest(data) == pending["sha256"]:
            return ({**done, "length": len(data), "sha256": pending["sha256"],
                     "rows": pending["rows"], "columns": pending["columns"]}, data, False)
        if len(data) < meta["length"] or _digest(data[: meta["length"]]) != meta["sha256"]:
            raise self._changed("no longer matches what jaxsynth wrote (edited or replaced)")
        if len(data) == meta["length"]:
            return done, data, False
        tail = data[meta["length"]:]
        if pending.get("kind") == "append":
            if len(data) == pending["length"] and _digest(tail) == pending["sha256"]:
                return ({**done, "length": len(data), "sha256": _digest(data),
                         "rows": pending["rows"]}, data, False)
            if len(data) < pending["length"]:
                return done, data[: meta["length"]], True
        raise self._changed("has bytes jaxsynth did not commit (appended to by another "
                            "program)")

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
        data = self._committed_bytes()
        if not data:
            return pd.DataFrame(columns=list(KEY_COLUMNS))
        return read_table(self.path, data)

    def _committed_bytes(self) -> bytes:
        """The file's bytes, refused unless they are exactly the last committed ones."""
        data = self.path.read_bytes() if self.path.exists() else b""
        if len(data) != self._meta["length"] or _digest(data) != self._meta["sha256"]:
            raise self._changed("changed while jaxsynth was writing it (another program "
                                "wrote to it)")
        return data

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
        validate_rows(rows, self.w1_columns, "new rows")
        keys = keys_of(rows)
        again = sum(k in self._done for k in keys)
        if again:
            raise ValueError(f"new rows: {again} repeated replicate(s) already in out file "
                             f"{str(self.path)!r}; a replicate is never written twice")
        columns = self._meta["columns"]
        if not columns or not set(rows.columns) <= set(columns):
            old = self.table()
            both = pd.concat([old, rows], ignore_index=True) if len(old) else rows
            validate_rows(both, self.w1_columns, f"out file {str(self.path)!r} with new rows")
            self._rewrite(both)
            self._done.update(keys)
            return
        data = rows.reindex(columns=columns).to_csv(header=False, index=False).encode()
        old_length = self._meta["length"]
        if os.stat(self.path).st_size != old_length:
            raise self._changed("changed while jaxsynth was writing it (another program "
                                "wrote to it)")
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
                   "columns": columns, "tmp": _tmpname(self.path)}
        self._committed_bytes()  # nothing another program wrote is absorbed and sealed
        self._commit({**self._meta, "spec": self.spec, "pending": pending})
        write_atomic(self.path, data, pending["tmp"])
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
        meta = json.loads(_sidecar(path).read_bytes())
    except (OSError, ValueError, RecursionError):
        return data
    if _schema_error(meta, path.name, (FORMAT, *EARLIER_FORMATS)) is not None:
        return data
    pending = meta["pending"] or {}
    if pending.get("kind") == "rewrite" and _digest(data) == pending["sha256"]:
        return data  # a rewrite done but not yet committed
    length = meta["length"]
    if length <= len(data) and _digest(data[:length]) == meta["sha256"]:
        return data[:length]  # without an append in progress
    return data


def readable(path, w1_columns=()) -> pd.DataFrame:
    """Read a result table for ``jaxsynth rate`` (validated, read-only).

    Reads what a store has committed (a writer's unfinished append is left out) and
    refuses a file without the key columns, with no rows, or with an invalid row
    (``validate_rows``: key columns and ``w1_columns``).  A table of an earlier format
    (``EARLIER_FORMATS``) is read with its ``ground`` column renamed ``metric``.
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
    if "ground" in table and "metric" not in table:  # written before jaxsynth-results/3
        table = table.rename(columns={"ground": "metric"})
    missing = [c for c in KEY_COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{str(path)!r} is not a jaxsynth result table (no {missing} "
                         "column(s))")
    if len(table) == 0:
        raise ValueError(f"{str(path)!r} holds no rows")
    absent = [c for c in w1_columns if c not in table]
    if absent:
        present = [c for c in table.columns if str(c).startswith("w1_")]
        raise ValueError(f"{str(path)!r} has no column {', '.join(absent)}; its W1 columns: "
                         f"{', '.join(present) or 'none'}")
    validate_rows(table, list(w1_columns), repr(str(path)))
    return table


__all__ = ["FORMAT", "KEY_COLUMNS", "MAX_ROWS", "ResultStore", "check_out_path", "control_only",
           "keys_of", "read_table", "readable", "validate_rows", "write_atomic"]
