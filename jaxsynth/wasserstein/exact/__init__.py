"""Certified W1 between the whole data set and a synthetic measure (``w1_exact``).

``solver`` runs multiscale column generation over the levels of the data and certifies
``lower ≤ W1 ≤ upper`` with ``upper − lower ≤ rtol · upper``; ``lp`` solves each
restricted transport LP (by ``simplex``, restarted from the previous round's basis);
``levels`` holds the data's levels of blocks and ``certificate`` the two ends;
``passes`` stacks concurrent replicates' passes over all atoms into one device call.
Derivations: ``docs/theory/exact-w1.md``.
"""

from jaxsynth.wasserstein.exact.certificate import pair_cost
from jaxsynth.wasserstein.exact.levels import DEFAULT_CLUSTERS, ExactData, prepare_exact
from jaxsynth.wasserstein.exact.solver import (
    DEFAULT_RTOL,
    check_rtol,
    check_stacked,
    w1_exact,
    w1_exact_replicate,
)

__all__ = [
    "DEFAULT_CLUSTERS",
    "DEFAULT_RTOL",
    "ExactData",
    "check_rtol",
    "check_stacked",
    "pair_cost",
    "prepare_exact",
    "w1_exact",
    "w1_exact_replicate",
]
