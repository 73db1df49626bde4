"""jaxsynth: batched differentially private synthetic data on dyadic partitions, with W1.

    import jaxsynth as js
    X = js.datasets.load("spiral", n=30000, key=0)
    out = js.release(0, js.PMM(depth=15), X, eps=1.0)
    batch = js.release_batch(0, js.PrunedPMM(), X, eps=[0.5, 1, 2], seeds=100)

See SPEC §10 for the public surface.
"""

from jaxsynth import datasets, oracle, plots
from jaxsynth.adaptive import AdaptivePrunedPMM
from jaxsynth.datatree import DataTree
from jaxsynth.measure import SyntheticMeasure
from jaxsynth.pmm import PMM, PrunedPMM
from jaxsynth.privtree import PrivTree
from jaxsynth.rates import estimate_rate
from jaxsynth.release import prepare, release, release_batch
from jaxsynth.simulate import simulate
from jaxsynth.w1 import w1

__all__ = [
    "AdaptivePrunedPMM",
    "DataTree",
    "PMM",
    "PrivTree",
    "PrunedPMM",
    "SyntheticMeasure",
    "datasets",
    "estimate_rate",
    "oracle",
    "plots",
    "prepare",
    "release",
    "release_batch",
    "simulate",
    "w1",
]
