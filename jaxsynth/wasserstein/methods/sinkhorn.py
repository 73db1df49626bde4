"""``sinkhorn``: certified entropic estimate (``wasserstein.sinkhorn``, ott-jax on use)."""

from __future__ import annotations

import jax
import numpy as np

from jaxsynth.core.keys import as_typed_key
from jaxsynth.wasserstein.method import Batch
from jaxsynth.wasserstein.methods.common import check_options
from jaxsynth.wasserstein.tree import data_points


class Sinkhorn:
    """``w1_sinkhorn_batch`` of every replicate on its canonical atoms; replicate ``i``
    subsamples with ``key`` folded with its ``Batch.key_path``."""

    name = "sinkhorn"
    options = {"rtol": 0.01, "subsample": None, "key": None, "online": None,
               "max_iterations": 20000, "max_stages": 12, "batch_size": 1024,
               "online_threshold": 1 << 27, "group": None}
    columns = {"w1_sinkhorn": "entropic estimate of the ground metric's W1, certified "
                              "to rtol (on subsamples with subsample=)"}
    needs_atoms = True

    def check(self, options, metric):
        options = check_options(self, options)
        if options["key"] is not None:
            options["key"] = as_typed_key(options["key"])  # ValueError naming key
        return options

    def prepare(self, X, metric, options):
        return data_points(X)

    def bytes_per_replicate(self, state, atom_bytes):
        return 0.0  # solved replicate by replicate after the release

    def evaluate(self, state, batch: Batch, metric, options):
        from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn_batch

        options = dict(options)
        keys = batch.keys(options.pop("key"))
        points, weights, _ = jax.device_get(batch.canonical)
        results = w1_sinkhorn_batch(state, points, weights, keys=keys, metric=metric,
                                    **options)
        return (np.array([r.value for r in results], np.float64),)
