"""Where a sweep's rows go: a table in memory, the result store, or a cluster's writer.

A sink is opened on a plan (it learns which replicates are there already), takes each
round's work (``share``), receives rows as they finish (``write``: replicates already
there are left out, and each new one is counted once), and ends each round (``end_round``)
and the sweep (``finish``: the whole table, sorted by the key columns).  ``decide``
computes a value from the table (the next round's seed counts) where the table is, and
gives it to every process.

* ``TableSink``: rows in memory (``simulate`` without ``out``), optionally starting from a
  table read elsewhere (a dry run reads the ``out`` file, never writing it).
* ``StoreSink``: rows appended to a ``ResultStore`` as they finish.
* ``ClusterSink``: one process of a ``cluster.Team``.  Process 0 holds the real sink; it
  publishes each round's work and the decisions, and appends the rows the others send;
  the others take their share, send their rows and keep a copy.  The sweep's loop is the
  same on every process: the cluster is the sink's business alone.
"""

from __future__ import annotations

import abc

import pandas as pd

from jaxsynth.experiments import cluster
from jaxsynth.experiments.plan import Part
from jaxsynth.experiments.store import KEY_COLUMNS, ResultStore, keys_of, read_table

__all__ = ["ClusterSink", "Sink", "StoreSink", "TableSink"]


class Sink(abc.ABC):
    """Rows kept on this process: the base of ``TableSink`` and ``StoreSink``."""

    file_rows = None
    """The rows of the file the sink writes (``None``: it writes none)."""

    def __init__(self):
        self.finished: set = set()
        self.new_rows = 0

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self, plan) -> None:
        """Read what is there already (``finished``: its replicate keys)."""
        self.finished = set(keys_of(self.table()))

    def share(self, parts: list) -> list:
        """This process's parts of a round's work."""
        return parts

    def ready(self) -> None:
        """Every process has checked its parts (a cluster waits here)."""

    def write(self, rows: pd.DataFrame) -> None:
        """Keep the rows of replicates not there yet."""
        keys = keys_of(rows)
        fresh = rows[[k not in self.finished for k in keys]]
        if len(fresh):
            self._add(fresh)
            self.finished.update(k for k in keys)
            self.new_rows += len(fresh)

    def end_round(self) -> None:
        """Every row of the round has arrived."""

    def decide(self, decide):
        """``decide()``, computed where the table is and given to every process."""
        return decide()

    def close(self) -> None:
        pass

    @abc.abstractmethod
    def _add(self, rows: pd.DataFrame) -> None:
        """Keep ``rows`` (new replicates' rows)."""

    @abc.abstractmethod
    def table(self) -> pd.DataFrame:
        """Every row kept so far."""

    def finish(self) -> pd.DataFrame:
        """The whole table, sorted by the key columns."""
        return self.table().sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)


class TableSink(Sink):
    """Rows in memory, after those of ``start`` (a table read elsewhere, never written)."""

    def __init__(self, start: pd.DataFrame | None = None):
        super().__init__()
        self.frames = [] if start is None or not len(start) else [start]

    def _add(self, rows: pd.DataFrame) -> None:
        self.frames.append(rows)

    def table(self) -> pd.DataFrame:
        if not self.frames:
            return pd.DataFrame(columns=list(KEY_COLUMNS))
        return self.frames[0] if len(self.frames) == 1 else pd.concat(self.frames,
                                                                      ignore_index=True)


class StoreSink(Sink):
    """Rows appended to the result store at ``path`` (``ResultStore``) as they finish."""

    def __init__(self, path):
        super().__init__()
        self.path, self.store = path, None

    def open(self, plan) -> None:
        self.store = ResultStore(self.path, plan.spec, plan.columns)
        self.store.open()
        super().open(plan)

    def share(self, parts: list) -> list:
        self.store.check_room(sum(part.replicates for part in parts))
        return parts

    def _add(self, rows: pd.DataFrame) -> None:
        self.store.append(rows)

    def table(self) -> pd.DataFrame:
        return self.store.table()

    def finish(self) -> pd.DataFrame:
        return self.store.finish()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    @property
    def file_rows(self) -> int:
        return self.store.rows


class ClusterSink:
    """One process of a ``cluster.Team`` (see the module docstring).

    ``inner`` is process 0's sink (``None`` on the others); ``progress`` counts the rows
    that reach process 0 from the others.
    """

    def __init__(self, team: cluster.Team, inner: Sink | None, progress):
        self.team, self.inner, self.progress = team, inner, progress
        self.frames: list[pd.DataFrame] = []
        self.computed = 0

    def __enter__(self) -> "ClusterSink":
        return self

    def __exit__(self, *exc) -> None:
        if self.inner is not None:
            self.inner.close()

    @property
    def finished(self) -> set:
        return self.inner.finished if self.inner is not None else set()

    @property
    def file_rows(self) -> int | None:
        return self.inner.file_rows if self.inner is not None else None

    @property
    def new_rows(self) -> int:
        """Process 0: the rows added; the others: the rows they computed."""
        return self.inner.new_rows if self.inner is not None else self.computed

    def open(self, plan) -> None:
        self.team.agree({"spec": plan.spec, "eps": list(plan.eps), "seeds": list(plan.seeds),
                         "out": None if plan.out is None else str(plan.out),
                         "data sets": [[ds.label, ds.n] for ds in plan.data],
                         "methods": repr(plan.methods),
                         "precision": repr(plan.precision)})
        if self.inner is not None:
            self.inner.open(plan)

    def share(self, parts: list) -> list:
        """Process 0's parts, as every process receives them; each keeps its share of
        every part's seeds."""
        if self.inner is not None:
            self.inner.share(parts)
        parts = self.team.broadcast([[p.data, p.mechanism, list(p.eps), list(p.seeds)]
                                     for p in parts])
        mine = [Part(d, m, tuple(eps), tuple(cluster.share(seeds, self.team.index,
                                                           self.team.count)))
                for d, m, eps, seeds in parts]
        return [part for part in mine if part.seeds]

    def ready(self) -> None:
        self.team.ready()

    def write(self, rows: pd.DataFrame) -> None:
        self.computed += len(rows)
        if self.inner is None:
            self.team.send(rows)
            self.frames.append(rows)
            return
        self.inner.write(rows)
        self._receive(self.team.receive())

    def _receive(self, frames) -> None:
        for rows in frames:
            self.progress.advance(len(rows))
            self.inner.write(rows)

    def end_round(self) -> None:
        if self.inner is None:
            self.team.done()
        else:
            self._receive(self.team.remaining())

    def decide(self, decide):
        return self.team.broadcast(decide() if self.inner is not None else None)

    def table(self) -> pd.DataFrame:
        if self.inner is not None:
            return self.inner.table()
        if not self.frames:
            return pd.DataFrame(columns=list(KEY_COLUMNS))
        # one set of column types, as process 0 reads the rows it receives
        rows = pd.concat(self.frames, ignore_index=True)
        return read_table("the sweep's rows", rows.to_csv(index=False).encode())

    def finish(self) -> pd.DataFrame:
        if self.inner is not None:
            return self.inner.finish()
        return self.table().sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)
