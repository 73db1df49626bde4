"""``sinkhorn``: certified entropic estimate (``wasserstein.sinkhorn``, ott-jax on use)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from jaxsynth.core.keys import as_typed_key
from jaxsynth.core.validate import check_fraction, check_positive_int
from jaxsynth.wasserstein.method import Batch, W1Method, atom_count
from jaxsynth.wasserstein.sinkhorn_limits import CHUNK_ELEMENTS, MOMENTUM_START
from jaxsynth.wasserstein.tree import data_points

DENSE_COPIES = 2
"""``n × m`` float32 arrays a dense round holds at once (the cost matrix and the
kernel's iterate): ``sinkhorn_memory``."""
ONLINE_COPIES = 16
"""The same per row of ``batch_size`` in online mode (ott-jax's batched cost, scanned)."""
CERTIFICATE_COPIES = 3
"""Row-chunk arrays of ``CHUNK_ELEMENTS`` (cost, plan, product) the certificate holds."""


@dataclasses.dataclass(frozen=True, eq=False)
class Sinkhorn(W1Method):
    """``w1_sinkhorn_batch`` of every replicate on its canonical atoms; replicate ``i``
    subsamples with ``key`` folded with its ``Batch.key_path``.

    Attributes:
      rtol: target relative half-width of the certified bracket, in (0, 1).
      subsample: draw this many data points and synthetic draws (``1..n``; needs ``key``).
      key: a ``jax.random`` key or integer seed, for ``subsample``.
      online: force ott-jax's online (batched-cost) mode on or off (``None``: online when
        ``n·m > online_threshold``).
      max_iterations: cap on the Sinkhorn iterations of a solve (``> MOMENTUM_START``).
      max_stages: cap on its ε stages.
      batch_size: row batch of the online mode.
      online_threshold: ``n·m`` above which the online mode is the default.
      group: replicates per vmapped call (``None``: 1 on CPU, 16 on an accelerator).

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PMM(depth=5), X, eps=1.0)
      >>> from jaxsynth.wasserstein import Sinkhorn
      >>> entropic = js.w1(X, out, Sinkhorn(rtol=0.01))
      >>> lower, upper = js.w1(X, out)
      >>> bool(0.99 * lower <= entropic <= 1.01 * upper)
      True
    """

    rtol: float = 0.01
    subsample: int | None = None
    key: Any = None
    online: bool | None = None
    max_iterations: int = 20000
    max_stages: int = 12
    batch_size: int = 1024
    online_threshold: int = 1 << 27
    group: int | None = None
    name: ClassVar[str] = "sinkhorn"
    columns: ClassVar[dict] = {
        "w1_sinkhorn": "entropic estimate of the ground metric's W1, certified to rtol (on "
                       "subsamples with subsample=)"}
    in_chunk: ClassVar[bool] = False

    def __post_init__(self):
        self._set(rtol=check_fraction(self.rtol, "rtol"),
                  max_iterations=check_positive_int(self.max_iterations, "max_iterations",
                                                    MOMENTUM_START + 1),
                  max_stages=check_positive_int(self.max_stages, "max_stages"),
                  batch_size=check_positive_int(self.batch_size, "batch_size"),
                  online_threshold=check_positive_int(self.online_threshold,
                                                      "online_threshold"))
        if self.subsample is not None:
            self._set(subsample=check_positive_int(self.subsample, "subsample"))
        if self.key is not None:
            self._set(key=as_typed_key(self.key))  # ValueError naming key
        if self.online not in (None, True, False):
            raise ValueError(f"online must be True, False or None; got {self.online!r}")
        if self.group is not None:
            self._set(group=check_positive_int(self.group, "group"))

    def prepare(self, X, metric):
        points = data_points(X)
        if self.subsample is not None and self.subsample > len(points):
            raise ValueError(f"subsample must be at most n = {len(points)}; got "
                             f"{self.subsample}")
        return points

    def bytes_per_replicate(self, state, atom_bytes):
        return sinkhorn_memory(len(state), atom_count(atom_bytes, state.shape[1]), self)

    def evaluate(self, state, batch: Batch, metric):
        from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn_batch

        options = {k: v for k, v in self.options.items() if k != "key"}
        points, weights, _ = batch.canonical
        results = w1_sinkhorn_batch(state, points, weights, keys=batch.keys(self.key),
                                    metric=metric, **options)
        return (np.array([r.value for r in results], np.float64),)


def sinkhorn_memory(n: int, m: float, method: Sinkhorn) -> float:
    """The Sinkhorn solve's memory model: bytes of one solve of ``n`` points (or the
    subsample) against ``m`` atoms: the larger of a round's (``DENSE_COPIES`` float32
    ``n × m`` arrays, or in online mode ``ONLINE_COPIES`` per row batch) and the
    certificate's (``CERTIFICATE_COPIES`` row chunks), plus the potentials and marginals."""
    n = min(n, method.subsample or n)
    online = method.online if method.online is not None else n * m > method.online_threshold
    solve = (ONLINE_COPIES * min(n, method.batch_size) if online else DENSE_COPIES * n) * m
    certify = CERTIFICATE_COPIES * min(n * m, CHUNK_ELEMENTS)
    return 4.0 * (max(solve, certify) + 4 * (n + m))
