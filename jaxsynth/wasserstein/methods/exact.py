"""``exact``: the ground metric's W1 certified to a relative gap (``wasserstein.exact``)."""

from __future__ import annotations

import numpy as np

from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein.exact import (
    DEFAULT_CLUSTERS,
    DEFAULT_RTOL,
    ExactData,
    check_rtol,
    check_stacked,
    prepare_exact,
    w1_exact,
)
from jaxsynth.wasserstein.methods.common import check_options
from jaxsynth.wasserstein.tree import data_points


class Exact:
    """Column generation on the transport LP; both ends are proofs."""

    name = "exact"
    options = {"rtol": DEFAULT_RTOL, "clusters": None, "stacked": None}
    columns = {"w1_exact_lower": "certified lower end of the ground metric's W1 of the whole "
                                 "data set (upper − lower ≤ rtol · upper)",
               "w1_exact_upper": "certified upper end of the ground metric's W1 of the whole "
                                 "data set (upper − lower ≤ rtol · upper)"}
    needs_atoms = True

    def check(self, options, metric):
        options = check_options(self, options)
        check_rtol(options["rtol"])
        if options["clusters"] is not None:
            check_positive_int(options["clusters"], "clusters")
        check_stacked(options["stacked"])
        return options

    def prepare(self, X, metric, options):
        if isinstance(X, ExactData):
            if options["clusters"] is not None:
                raise ValueError("clusters: set it in prepare_exact when X is an ExactData")
            return X
        clusters = options["clusters"] or DEFAULT_CLUSTERS
        return prepare_exact(data_points(X), clusters)

    def bytes_per_replicate(self, state, atom_bytes):
        return 0.0  # solved on the host, one replicate per thread

    def evaluate(self, state, batch, metric, options):
        points, weights = np.asarray(batch.points), np.asarray(batch.weights)
        return w1_exact(state, points, weights, metric, options["rtol"],
                        stacked=options["stacked"])
