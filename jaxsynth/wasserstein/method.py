"""The W1 method base class, the batch of measures it evaluates, and its blocks of atoms.

A W1 method (``W1Method``) is a frozen dataclass whose fields are its options, checked
when it is made (``Exact(rtol=1e-3)``; ``ValueError`` naming the option): the columns it
writes and what each measures, ``prepare`` (once per data set), ``bytes_per_replicate``
(its one memory model) and ``evaluate`` (a ``Batch`` of measures to one float64 array
[B] per column).  ``registry.METHODS`` names them, and ``evaluate.Evaluation`` runs them
for ``js.w1`` and ``simulate`` alike.

A replicate's value never depends on its batch.  Methods on a replicate's atoms
(``atom_blocks``) read its positive atoms in the canonical order
(``core.measure.canonical_atoms``), cut to ``atom_width`` of its own count (the one
bucket rule), in blocks of ``BLOCK`` replicates (``core.batching.chunked``, the one
chunker): one program per width, whatever the batch.  The tree W1 read from a kernel's
level statistics is a sequential float64 sum per replicate.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Callable, ClassVar

import jax
import numpy as np

from jaxsynth.core.batching import capacity_bucket, chunked
from jaxsynth.core.measure import canonical_atoms

__all__ = ["BLOCK", "Batch", "W1Method", "atom_blocks", "atom_count", "atom_width"]

BLOCK = 16
"""Replicates per call of the methods on a replicate's atoms: a fixed shape."""


@dataclasses.dataclass(frozen=True, eq=False)
class Batch:
    """A flat batch of ``B`` synthetic measures, as a W1 method reads them.

    Attributes:
      d: the data dimension.
      points: [B, M, d] float32 atoms (host or device), or ``None`` when no method of
        the evaluation reads atoms (``W1Method.needs_atoms``).
      weights: [B, M] float32 weights.
      leaf_depth: [B, M] int32 leaf levels.
      shift: [B, d] partition shifts (PrivTree ``shift=True``), or ``None``.
      levels: NOT PRIVATE level statistics (``core.measure.LEVEL_FIELDS``, each
        [B, L+1]) from the release kernel, or ``None``.
      key_path: per replicate, the integers folded into a method's ``key`` option (for
        Sinkhorn's subsampling), or ``None``.
      names: per replicate, how a message names it (``"out[0, 3]"``, ``"ε = 1, seed
        3"``), or ``None`` (its index in the batch).
    """

    d: int
    points: Any
    weights: Any
    leaf_depth: Any
    shift: Any = None
    levels: dict | None = None
    key_path: list | None = None
    names: list | None = None

    @property
    def size(self) -> int:
        source = self.weights if self.weights is not None else self.levels["level_gap"]
        return int(source.shape[0])

    @functools.cached_property
    def canonical(self):
        """``(points [B, W, d], weights [B, W], counts [B])``: every replicate's positive
        atoms in the canonical order (``core.measure.canonical_atoms``; host, once)."""
        return canonical_atoms(self.points, self.weights)

    def keys(self, key) -> list | None:
        """One typed key per replicate: ``key`` with the replicate's ``key_path`` folded in."""
        if key is None or self.key_path is None:
            return None
        return [functools.reduce(jax.random.fold_in, path, key) for path in self.key_path]


@dataclasses.dataclass(frozen=True)
class W1Method(abc.ABC):
    """A way of measuring W1 between the data and a batch of synthetic measures.

    Subclasses are frozen dataclasses: their fields are the options, checked in
    ``__post_init__`` (``ValueError`` naming the option).  The ground metric and the
    measures are checked once, by the router (``evaluate``), before a method sees them.

    Class attributes:
      name: the ``method=`` name.
      columns: the columns it writes (``w1_*``), each with what it measures.
      needs_atoms: whether it reads the released atoms (otherwise the kernel's levels).
      in_chunk: whether its memory model counts for every replicate of a sweep's chunk
        (``evaluate.Evaluation.bytes_per_replicate``); ``False``: it sizes its own
        batches from the model (the tree's vmapped chunks, the exact solver's threads,
        Sinkhorn's solves one at a time).
    """

    name: ClassVar[str]
    columns: ClassVar[dict]
    needs_atoms: ClassVar[bool] = True
    in_chunk: ClassVar[bool] = True

    @property
    def options(self) -> dict:
        """The options, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _set(self, **values) -> None:
        """Store checked (normalised) option values on the frozen object."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @abc.abstractmethod
    def prepare(self, X, metric: str) -> Any:
        """The data prepared once for every batch (``X`` validated [n, d], or the
        ``TreeData`` / ``DataTree`` / ``ExactData`` the user passed)."""

    @abc.abstractmethod
    def bytes_per_replicate(self, state, atom_bytes: float) -> float:
        """The method's memory model: its working memory per replicate measured at once,
        beyond the release's own ``atom_bytes`` (``tests/wasserstein/test_memory.py``
        checks it against measured peaks)."""

    @abc.abstractmethod
    def evaluate(self, state, batch: "Batch", metric: str) -> tuple:
        """One float64 array [B] per column, in ``columns`` order."""


def atom_width(count):
    """Atom slots of a replicate with ``count`` positive atoms (an integer or an array):
    a power of two, at least 64 (``batching.capacity_bucket``, one value per octave)."""
    return capacity_bucket(count, per_octave=1, minimum=64)


def atom_blocks(fn: Callable, batch: Batch) -> np.ndarray:
    """``fn(points [BLOCK, width, d], weights [BLOCK, width]) -> [BLOCK]`` of every
    replicate of ``batch`` on its own canonical atoms; float64 [B] on the host.

    Replicates are grouped by ``atom_width`` of their positive-atom count, cut (or
    padded: slots past a replicate's atoms repeat its first atom with weight 0) to that
    width and run in ``BLOCK``-replicate chunks: a replicate's value depends on its
    atoms alone.
    """
    points, weights, counts = batch.canonical
    widths = atom_width(counts)
    values = np.empty(len(counts), np.float64)
    for width in np.unique(widths):
        index = np.flatnonzero(widths == width)
        rows = np.concatenate([index, np.repeat(index[-1:], -len(index) % BLOCK)])  # full blocks
        extra = max(0, int(width) - weights.shape[1])
        p = np.concatenate([points[rows], np.repeat(points[rows, :1], extra, axis=1)], axis=1)
        w = np.pad(weights[rows], ((0, 0), (0, extra)))
        raw = chunked(fn, (p[:, :width], w[:, :width]), BLOCK)
        values[index] = np.asarray(raw, np.float64)[: len(index)]
    return values


def atom_count(atom_bytes: float, d: int) -> float:
    """Atoms of a replicate whose release holds ``atom_bytes`` (an atom: ``d`` float32
    coordinates, a float32 weight and an int32 depth)."""
    return atom_bytes / (4.0 * (d + 2))
