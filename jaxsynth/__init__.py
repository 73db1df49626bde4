"""jaxsynth: batched differentially private synthetic data on dyadic partitions, with W1.

    import jaxsynth as js
    X = js.datasets.load("spiral", n=30000, key=0)
    out = js.release(0, js.PMM(depth=15), X, eps=1.0)
    batch = js.release_batch(0, js.PrunedPMM(), X, eps=[0.5, 1, 2], seeds=100)
    js.w1(X, out, method="tree")

The package follows the pipeline: ``core`` (partition, data tree and descent, keys,
noise, frontier), ``mechanisms`` (configs, plans and kernels), ``engine`` (one runner for
every plan), ``wasserstein`` (W1), ``experiments`` (data sets, sweeps, result store,
rates, plots), ``cli``.  SPEC §10 lists the public surface.
"""

from jaxsynth.api import prepare, release, release_batch
from jaxsynth.audit import audit
from jaxsynth.compilation import enable_compilation_cache
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.measure import NotPrivateDiagnostics, SyntheticMeasure
from jaxsynth.experiments import datasets, plots
from jaxsynth.experiments.rates import estimate_rate
from jaxsynth.experiments.sweep import simulate
from jaxsynth.mechanisms import oracle
from jaxsynth.mechanisms.adaptive import AdaptivePrunedPMM
from jaxsynth.mechanisms.pmm import PMM, PrunedPMM
from jaxsynth.mechanisms.privtree import PrivTree
from jaxsynth.wasserstein.dispatch import w1

__all__ = [
    "AdaptivePrunedPMM",
    "DataTree",
    "PMM",
    "PrivTree",
    "PrunedPMM",
    "NotPrivateDiagnostics",
    "SyntheticMeasure",
    "audit",
    "datasets",
    "enable_compilation_cache",
    "estimate_rate",
    "oracle",
    "plots",
    "prepare",
    "release",
    "release_batch",
    "simulate",
    "w1",
]
