"""jaxsynth: batched differentially private synthetic data on dyadic partitions, with W1.

    import jaxsynth as js
    X = js.datasets.load("spiral", n=30000, key=0)
    out = js.release(0, js.PMM(depth=15), X, eps=1.0)
    batch = js.release_batch(0, js.PrunedPMM(), X, eps=[0.5, 1, 2], seeds=100)
    lower, upper = js.w1(X, out)          # the certified l-inf W1 of the whole data set

The package follows the pipeline: ``core`` (partition, data tree and descent, keys,
noise, frontier), ``mechanisms`` (configs, plans and kernels), ``engine`` (one runner for
every plan), ``wasserstein`` (W1), ``experiments`` (data sets, sweeps, result store,
rates, plots), ``audit``, ``cli``.  The public surface is ``__all__`` (some names
load on first use) and the README's API table.
"""

import importlib

from jaxsynth.api import prepare, release, release_batch, release_fn
from jaxsynth.compilation import enable_compilation_cache
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.measure import NotPrivateDiagnostics, SyntheticMeasure
from jaxsynth.experiments import datasets
from jaxsynth.mechanisms import oracle
from jaxsynth.mechanisms.adaptive import AdaptivePrunedPMM
from jaxsynth.mechanisms.pmm import PMM, PrunedPMM
from jaxsynth.mechanisms.privtree import PrivTree
from jaxsynth.wasserstein.dispatch import w1

_LAZY = {
    "audit": ("jaxsynth.audit", None),
    "audit_mechanism": ("jaxsynth.audit.auditor", "audit_mechanism"),
    "estimate_rate": ("jaxsynth.experiments.rates", "estimate_rate"),
    "join_cluster": ("jaxsynth.experiments.cluster", "join"),
    "plots": ("jaxsynth.experiments.plots", None),
    "simulate": ("jaxsynth.experiments.sweep", "simulate"),
}
"""Names whose modules load pandas, matplotlib or SciPy's statistics: imported on first
use, so ``import jaxsynth`` costs little more than ``import jax``."""


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'jaxsynth' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AdaptivePrunedPMM",
    "DataTree",
    "NotPrivateDiagnostics",
    "PMM",
    "PrivTree",
    "PrunedPMM",
    "SyntheticMeasure",
    "audit_mechanism",
    "datasets",
    "enable_compilation_cache",
    "estimate_rate",
    "join_cluster",
    "oracle",
    "plots",
    "prepare",
    "release",
    "release_batch",
    "release_fn",
    "simulate",
    "w1",
]
