"""jaxsynth: batched differentially private synthetic data on dyadic partitions, with W1.

    import jaxsynth as js
    X = js.datasets.load("spiral", n=30000, key=0)
    out = js.release(0, js.PMM(depth=15), X, eps=1.0)
    batch = js.release_batch(0, js.PrunedPMM(), X, eps=[0.5, 1, 2], seeds=100)
    lower, upper = js.w1(X, out)          # the certified l-inf W1 of the whole data set
    lower, upper = js.w1(X, out, js.wasserstein.Exact(rtol=1e-3))  # a configured method

The package follows the pipeline: ``core`` (partition, data tree and descent, keys,
noise, frontier), ``mechanisms`` (configs, plans and kernels), ``engine`` (one runner for
every plan), ``wasserstein`` (W1), ``experiments`` (data sets, sweeps, result store,
rates, plots), ``audit``, ``cli``.  The public surface is ``__all__`` (every name
loads on first use), documented in the API reference of the documentation.
"""

import importlib
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("jaxsynth")
except _metadata.PackageNotFoundError:  # a source tree on the path, not installed
    __version__ = "0+unknown"

_LAZY = {
    "AdaptivePrunedPMM": ("jaxsynth.mechanisms.adaptive", "AdaptivePrunedPMM"),
    "DataTree": ("jaxsynth.core.datatree", "DataTree"),
    "NotPrivateDiagnostics": ("jaxsynth.core.measure", "NotPrivateDiagnostics"),
    "PMM": ("jaxsynth.mechanisms.pmm", "PMM"),
    "PrivTree": ("jaxsynth.mechanisms.privtree", "PrivTree"),
    "PrunedPMM": ("jaxsynth.mechanisms.pmm", "PrunedPMM"),
    "SyntheticMeasure": ("jaxsynth.core.measure", "SyntheticMeasure"),
    "audit": ("jaxsynth.audit", None),
    "audit_mechanism": ("jaxsynth.audit.auditor", "audit_mechanism"),
    "datasets": ("jaxsynth.experiments.datasets", None),
    "enable_compilation_cache": ("jaxsynth.compilation", "enable_compilation_cache"),
    "estimate_rate": ("jaxsynth.experiments.rates", "estimate_rate"),
    "join_cluster": ("jaxsynth.experiments.cluster", "join"),
    "oracle": ("jaxsynth.mechanisms.oracle", None),
    "plots": ("jaxsynth.experiments.plots", None),
    "prepare": ("jaxsynth.api", "prepare"),
    "release": ("jaxsynth.api", "release"),
    "release_batch": ("jaxsynth.api", "release_batch"),
    "release_fn": ("jaxsynth.api", "release_fn"),
    "simulate": ("jaxsynth.experiments.sweep", "simulate"),
    "summarize": ("jaxsynth.experiments.summary", "summarize"),
    "w1": ("jaxsynth.wasserstein.dispatch", "w1"),
    "wasserstein": ("jaxsynth.wasserstein", None),
}
"""Every public name, imported on first use: ``import jaxsynth`` (and the command line,
which parses and refuses its arguments first) loads neither JAX nor pandas.  Beside
``__all__``, ``js.wasserstein`` is the W1 namespace (``js.wasserstein.Exact(rtol=1e-3)``),
with its own API reference page."""


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
    "summarize",
    "w1",
]
