"""The W1 method protocol, the batch of measures it evaluates, and the wing's one chunker.

A W1 method (``W1Method``) is one object: the options it takes, the columns it writes
and what each measures, ``prepare`` (once per data set), ``bytes_per_replicate`` (its
memory per replicate in a sweep's chunk) and ``evaluate`` (a ``Batch`` of measures to
one float64 array [B] per column).  ``registry.METHODS`` lists them, and
``evaluate.Evaluation`` runs them for ``js.w1`` and ``simulate`` alike.

A replicate's value never depends on its batch.  Methods on a replicate's atoms
(``atom_blocks``) read its positive atoms in the canonical order
(``core.measure.canonical_order``), cut to ``atom_width`` of its own count (the one
bucket rule), in blocks of ``BLOCK`` replicates (``run_blocks``, the one chunker): one
program per width, whatever the batch.  The tree W1 read from a kernel's level
statistics is a sequential float64 sum per replicate.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core.frontier import capacity_bucket
from jaxsynth.core.measure import canonical_order

__all__ = ["BLOCK", "Batch", "W1Method", "atom_blocks", "atom_width", "run_blocks"]

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
    """

    d: int
    points: Any
    weights: Any
    leaf_depth: Any
    shift: Any = None
    levels: dict | None = None
    key_path: list | None = None

    @property
    def size(self) -> int:
        source = self.weights if self.weights is not None else self.levels["level_gap"]
        return int(source.shape[0])

    @functools.cached_property
    def canonical(self):
        """``(points, weights, counts)`` in the canonical order, on the device (once)."""
        return canonical_order(jnp.asarray(self.points), jnp.asarray(self.weights))

    def keys(self, key) -> list | None:
        """One typed key per replicate: ``key`` with the replicate's ``key_path`` folded in."""
        if key is None or self.key_path is None:
            return None
        return [functools.reduce(jax.random.fold_in, path, key) for path in self.key_path]


@runtime_checkable
class W1Method(Protocol):
    """A way of measuring W1 between the data and a batch of synthetic measures.

    Attributes:
      name: the ``method=`` name.
      options: accepted options and their defaults.
      columns: the columns it writes (``w1_*``), each with what it measures.
      needs_atoms: whether it reads the released atoms (otherwise the kernel's levels).
    """

    name: str
    options: dict
    columns: dict
    needs_atoms: bool

    def check(self, options: dict, metric: str) -> dict:
        """Validated options, defaults filled in; ``ValueError`` naming a bad one."""

    def prepare(self, X, metric: str, options: dict) -> Any:
        """The data prepared once for every batch (``X`` validated [n, d], or the
        ``TreeData`` / ``DataTree`` / ``ExactData`` the user passed)."""

    def bytes_per_replicate(self, state, atom_bytes: float) -> float:
        """Working memory per replicate beyond the release's own ``atom_bytes``."""

    def evaluate(self, state, batch: Batch, metric: str, options: dict) -> tuple:
        """One float64 array [B] per column, in ``columns`` order."""


def run_blocks(fn: Callable, arrays, block: int):
    """Apply a jitted batch function to ``arrays`` (leading axis B) in fixed-size blocks.

    Every block has ``min(block, B)`` rows (the last padded by repeating its last row), so
    one compilation serves every block; results are concatenated and trimmed to ``B``.
    """
    total = arrays[0].shape[0]
    size = max(1, min(int(block), total))
    outs = []
    for start in range(0, total, size):
        rows = np.minimum(np.arange(start, start + size), total - 1)
        outs.append(fn(*(a[rows] for a in arrays)))
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs)[:total], *outs)


def atom_width(count: int) -> int:
    """Atom slots of a replicate with ``count`` positive atoms: a power of two, at least 64
    (the wing's one rounding rule, ``frontier.capacity_bucket``, one value per octave)."""
    return capacity_bucket(int(count), per_octave=1, minimum=64)


@functools.partial(jax.jit, static_argnames=("width",))
def _select(points, weights, counts, rows, width):
    """Canonical replicates ``rows`` cut (or padded) to ``width`` slots each; slots past a
    replicate's own atoms repeat its first atom with weight 0.  Exact."""
    p, w, c = points[rows], weights[rows], counts[rows]
    if width > w.shape[1]:
        extra = width - w.shape[1]
        p = jnp.concatenate([p, jnp.repeat(p[:, :1], extra, axis=1)], axis=1)
        w = jnp.concatenate([w, jnp.zeros((w.shape[0], extra), w.dtype)], axis=1)
    p, w = p[:, :width], w[:, :width]
    pad = jnp.arange(width)[None] >= c[:, None]
    return jnp.where(pad[..., None], p[:, :1], p), jnp.where(pad, jnp.zeros_like(w), w)


def atom_blocks(fn: Callable, batch: Batch) -> np.ndarray:
    """``fn(points [BLOCK, width, d], weights [BLOCK, width]) -> [BLOCK]`` of every
    replicate of ``batch`` on its own canonical atoms; float64 [B] on the host.

    Replicates are grouped by ``atom_width`` of their positive-atom count and run through
    ``run_blocks``: a replicate's value depends on its atoms alone.
    """
    points, weights, counts_dev = batch.canonical
    counts = np.asarray(counts_dev)
    widths = np.array([atom_width(c) for c in counts])
    values = np.empty(len(counts), np.float64)
    for width in np.unique(widths):
        index = np.flatnonzero(widths == width)
        rows = np.concatenate([index, np.repeat(index[-1:], -len(index) % BLOCK)])  # full blocks
        block = functools.partial(_select, points, weights, counts_dev, width=int(width))
        raw = run_blocks(lambda r: fn(*block(r)), (jnp.asarray(rows, jnp.int32),), BLOCK)
        values[index] = np.asarray(raw, np.float64)[: len(index)]
    return values
