"""The one router of the W1 wing: ``js.w1`` and ``simulate`` both evaluate through it.

``check_methods`` makes the requested methods configured ``W1Method`` objects (a name
with options builds its class, ``registry``; an object is taken as it is) and
``check_metric`` checks the ground metric: the one check of each.  ``Evaluation.build``
prepares each method once for a data set; ``Evaluation.evaluate`` measures a
``method.Batch`` of synthetic measures and returns one float64 array [B] per ``w1_*``
column.  ``batch_of_outputs`` turns an engine chunk [E, S, ...] into such a batch.  Since
a replicate's value depends only on its own measure (``method``), both entry points give
the same numbers by construction.
"""

from __future__ import annotations

import dataclasses

from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import check_choice, is_pair
from jaxsynth.wasserstein.exact import ExactData
from jaxsynth.wasserstein.method import Batch, W1Method
from jaxsynth.wasserstein.methods.exact import Exact
from jaxsynth.wasserstein.registry import METHODS, REGISTRY
from jaxsynth.wasserstein.tree import data_points

__all__ = ["Evaluation", "batch_of_outputs", "check_method", "check_methods", "check_metric",
           "data_dimension"]


def check_metric(metric, methods: str = "methods") -> str:
    """The ground metric (``GROUND_METRICS``), or ``ValueError`` naming ``metric``; W1
    methods given as ``metric=`` are told to use ``methods=`` (the argument of the entry
    point that chooses them: ``method`` for ``js.w1``)."""
    if isinstance(metric, (list, tuple, W1Method)) or (isinstance(metric, str)
                                                       and metric in METHODS):
        raise ValueError(f"metric is the ground metric, one of {GROUND_METRICS}; got "
                         f"{metric!r}: W1 methods are chosen with {methods}=")
    return check_choice(metric, "metric", GROUND_METRICS)


def check_method(method, options: dict | None = None, name: str = "method") -> W1Method:
    """A configured ``W1Method``: ``method`` itself, or the class of its name built with
    ``options`` (as ott-jax's ``solve(**kw)`` builds ``Sinkhorn(**kw)``).

    Raises:
      ValueError: naming ``name`` for an unknown method (a ground metric given as a method
        is pointed to ``metric=``) or options given beside a configured object; naming
        the option for an unknown option (listing the accepted ones) or a bad value.
    """
    options = dict(options or {})
    if isinstance(method, W1Method):
        if options:
            raise ValueError(f"{name}: options {sorted(options)} go with a method's name; "
                             f"{method!r} is configured already (set them there)")
        return method
    if not isinstance(method, str) or method not in REGISTRY:
        hint = f" ({method!r} is a ground metric: metric=)" if method in GROUND_METRICS else ""
        raise ValueError(f"{name}: unknown W1 method {method!r}; known: "
                         f"{', '.join(METHODS)}{hint} (or a configured W1Method)")
    kind = REGISTRY[method]
    accepted = [field.name for field in dataclasses.fields(kind)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for method={method!r}; "
                         f"accepted: {sorted(accepted)}")
    return kind(**options)


def check_methods(methods) -> tuple:
    """The configured ``W1Method`` of each of ``methods``: names, ``(name, options)``
    pairs or ``W1Method`` objects (``check_method``).

    Raises:
      ValueError: naming ``methods`` for an empty list, an unknown method or duplicate
        columns, or the option for a bad option.
    """
    if isinstance(methods, (str, W1Method)) or is_pair(methods):
        methods = [methods]
    if not isinstance(methods, (list, tuple)) or not methods:
        raise ValueError(f"methods must be a non-empty list of {METHODS} or W1Method objects; "
                         f"got {methods!r}")
    out = tuple(check_method(*(item if is_pair(item) else (item, None)), "methods")
                for item in methods)
    names = [c for method in out for c in method.columns]
    if len(set(names)) != len(names):
        raise ValueError(f"methods: duplicate columns {names}")
    return out


def data_dimension(X) -> int:
    """The dimension ``d`` of data ``X`` (validated) or of a prepared data set."""
    return (X.X if isinstance(X, ExactData) else data_points(X)).shape[1]


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluation:
    """Checked W1 methods prepared for one data set.

    Attributes:
      methods: ``(W1Method, prepared state)`` per method.
      metric: the ground metric.
      d: the data dimension.
    """

    methods: tuple
    metric: str
    d: int

    @classmethod
    def build(cls, X, methods, metric: str) -> "Evaluation":
        """Check ``methods`` (``check_methods``) and ``metric`` (``check_metric``) and
        prepare ``X`` (validated data, ``TreeData``, ``DataTree`` or ``ExactData``) for
        each; ``ValueError`` if a method cannot measure it (an ``ExactData`` for another
        method than ``exact``, bracket projections too large, exact1d with d ≠ 1)."""
        methods, metric = check_methods(methods), check_metric(metric)
        if isinstance(X, ExactData):
            other = [m.name for m in methods if not isinstance(m, Exact)]
            if other:
                raise ValueError(f"X: an ExactData serves method='exact' only; got {other}")
        return cls(tuple((m, m.prepare(X, metric)) for m in methods), metric, data_dimension(X))

    @property
    def columns(self) -> list[str]:
        return [c for method, _ in self.methods for c in method.columns]

    @property
    def atoms(self) -> bool:
        """Whether some method reads the released atoms (else the level statistics do)."""
        return any(method.needs_atoms for method, _ in self.methods)

    def bytes_per_replicate(self, atom_bytes: float) -> float:
        """Memory per replicate of a chunk: the release's ``atom_bytes`` plus the model of
        every method measured in blocks of the chunk (``W1Method.in_chunk``; the others
        size their own batches from their models)."""
        return atom_bytes + sum(m.bytes_per_replicate(s, atom_bytes) for m, s in self.methods
                                if m.in_chunk)

    def evaluate(self, batch: Batch) -> dict:
        """Every column's float64 values [B] for ``batch``."""
        values = {}
        for method, state in self.methods:
            values.update(zip(method.columns, method.evaluate(state, batch, self.metric)))
        return values

    def evaluate_outputs(self, out: dict, seeds, eps) -> dict:
        """Every column's float64 values [E, S] for an engine chunk's outputs [E, S, ...]
        (``batch_of_outputs``)."""
        grid = out["size"].shape
        batch = batch_of_outputs(out, self.d, seeds, eps)
        return {k: v.reshape(grid) for k, v in self.evaluate(batch).items()}


def batch_of_outputs(out: dict, d: int, seeds, eps) -> Batch:
    """The ``Batch`` of an engine chunk's outputs [E, S, ...] for the budgets ``eps`` [E]
    and ``seeds`` [S]; replicate ``(e, s)`` folds ``(seeds[s], 0)`` into a method's key,
    as ``js.w1(..., key=fold_in(key, seeds[s]))`` does for the lone measure
    ``js.release(fold_in(key, seeds[s]), ...)``, and messages name it by its ε and seed."""
    grid = out["size"].shape

    def flat(a):
        return None if a is None else a.reshape((-1,) + a.shape[len(grid):])

    levels = {k: flat(out[k]) for k in LEVEL_FIELDS} if LEVEL_FIELDS[0] in out else None
    return Batch(d=d, points=flat(out.get("points")), weights=flat(out.get("weights")),
                 leaf_depth=flat(out.get("leaf_depth")), shift=flat(out.get("shift")),
                 levels=levels,
                 key_path=[(int(seeds[s]), 0) for _ in range(grid[0]) for s in range(grid[1])],
                 names=[f"ε = {float(e):g}, seed {int(s)}" for e in eps for s in seeds])
