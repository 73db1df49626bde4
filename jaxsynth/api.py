"""Public entry points: one replicate (``release``) or a grid of ε × seeds (``release_batch``).

Data-dependent work (the Morton sort and every cell count, ``DataTree``) is
done once per call, or once per data set when a prepared ``DataTree`` is passed; only
the noise is batched (``jaxsynth.engine``).  Replicate ``s`` of ``release_batch(key, ...)``
uses the key ``jax.random.fold_in(key, s)`` for every ε, so it equals
``release(jax.random.fold_in(key, s), ...)`` whatever the batch or chunk size.
"""

from __future__ import annotations

import numpy as np

from jaxsynth import engine
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.keys import as_raw_key, replicate_keys
from jaxsynth.core.measure import NotPrivateDiagnostics, SyntheticMeasure
from jaxsynth.core.validate import check_data, check_epsilon, check_positive_int
from jaxsynth.mechanisms.protocol import Mechanism


def prepare(X, depth: int) -> DataTree:
    """Sort ``X`` [n, d] once into a ``DataTree`` of ``depth`` levels, reusable by releases."""
    return DataTree.build(X, depth)


def check_mechanism(mech, name: str = "mech"):
    """Return ``mech`` if it is a mechanism config (a ``protocol.Mechanism``)."""
    if isinstance(mech, type):
        raise ValueError(f"{name} must be a mechanism config such as jaxsynth.PMM(), an "
                         f"instance; got the class {mech.__name__}")
    if not isinstance(mech, Mechanism):
        raise ValueError(
            f"{name} must be a mechanism config such as jaxsynth.PMM(); got {mech!r}"
        )
    return mech


def check_measurable(mech, n: int, d: int, eps) -> int:
    """The data depth ``mech`` needs at every ε, refused if ``js.w1`` could not measure it.

    The tree W1 handles codes of at most ``MAX_BITS_PER_COORDINATE`` digits per coordinate
    (depth ``r`` in dimension ``d`` uses ``r // d + 1``); a release deeper than that is
    refused here, before any work, rather than released and then refused by ``js.w1``.
    """
    from jaxsynth.wasserstein.tree import MAX_BITS_PER_COORDINATE

    need = int(mech.data_depth(n, d, eps))
    if need // d + 1 > MAX_BITS_PER_COORDINATE:
        raise ValueError(
            f"mech: {mech!r} needs depth {need} in d = {d} ({need // d + 1} digits per "
            f"coordinate) but W1 is measured on trees of at most {MAX_BITS_PER_COORDINATE} "
            f"digits per coordinate (depth <= {MAX_BITS_PER_COORDINATE * d - 1}); lower the depth"
        )
    return need


def data_tree_for(mech, X, eps) -> DataTree:
    """A data tree deep enough for ``mech`` at every ε: ``X`` itself when it is one."""
    if isinstance(X, DataTree):
        need = check_measurable(mech, X.n, X.d, eps)
        return X if X.depth >= need else DataTree.build(X.points, need)
    X = check_data(X)
    return DataTree.build(X, check_measurable(mech, X.shape[0], X.shape[1], eps))


def seed_count(seeds) -> int:
    """The number of seeds ``seeds`` (a count or a list) stands for, without listing them."""
    if isinstance(seeds, range):
        if len(seeds) == 0:
            raise ValueError("seeds is empty")
        if seeds.start < 0 or seeds[-1] < 0 or max(seeds[0], seeds[-1]) >= 2**32:
            raise ValueError(f"seeds must lie in [0, 2^32); got {seeds!r}")
        return len(seeds)
    if isinstance(seeds, (list, tuple, np.ndarray)):
        if isinstance(seeds, np.ndarray) and seeds.ndim != 1:
            raise ValueError(f"seeds must be a count or a 1-D list of ints; got an array of "
                             f"shape {seeds.shape}")
        return len(seeds)
    count = check_positive_int(seeds, "seeds")
    if count > 2**32:
        raise ValueError(f"seeds must be at most 2^32; got {count}")
    return count


def seed_indices(seeds) -> np.ndarray:
    """Seed indices [S] from a count, a ``range`` or a list of distinct non-negative ints."""
    if isinstance(seeds, range):
        seed_count(seeds)
        return np.arange(seeds.start, seeds.stop, seeds.step, dtype=np.int64)
    if isinstance(seeds, (list, tuple, np.ndarray)):
        seed_count(seeds)
        values = list(seeds)
        if not values:
            raise ValueError("seeds is empty")
        for v in values:
            check_positive_int(v.item() if isinstance(v, np.generic) else v, "seeds", minimum=0)
        if len(set(values)) != len(values):
            raise ValueError("seeds has duplicate values")
        if max(values) >= 2**32:
            raise ValueError("seeds must be below 2^32")
        return np.asarray(values, np.int64)
    return np.arange(seed_count(seeds), dtype=np.int64)


def _check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def release(key, mech, X, eps, diagnostics: bool = False):
    """Release one synthetic measure of ``X`` [n, d] with ``mech`` at budget ``eps``.

    Args:
      key: int seed or jax PRNG key; the replicate's whole randomness derives from it.
      mech: a mechanism config (``PMM``, ``PrunedPMM``, ``AdaptivePrunedPMM``, ``PrivTree``).
      X: data in [0,1]^d, or a prepared ``DataTree``.
      eps: total privacy budget ε > 0.
      diagnostics: also return the release's ``NotPrivateDiagnostics`` (statistics
        computed from the true data; NOT private).

    Returns:
      an unbatched ``SyntheticMeasure`` (see its ``accounting`` for the budget split);
      with ``diagnostics``, the pair ``(measure, NotPrivateDiagnostics)``.
    """
    raw = as_raw_key(key)
    check_mechanism(mech)
    eps = check_epsilon(eps)
    if eps.size != 1:
        raise ValueError("eps must be a single number for release; use release_batch for lists")
    diagnostics = _check_flag(diagnostics, "diagnostics")
    tree = data_tree_for(mech, X, eps)
    out = engine.release(mech.plan(tree, eps), raw[None], diagnostics=diagnostics)
    if diagnostics:
        measure, diag = out
        return measure[0, 0], NotPrivateDiagnostics(
            {k: v[0, 0] for k, v in diag.values.items()}, diag.mechanism)
    return out[0, 0]


def release_batch(key, mech, X, eps, seeds=1, memory_bytes: int | None = None,
                  diagnostics: bool = False):
    """Release ``len(eps) × S`` replicates in jitted, vmapped chunks.

    Args:
      key: int seed or jax PRNG key.
      mech: a mechanism config.
      X: data in [0,1]^d, or a prepared ``DataTree``.
      eps: a number or a list of E budgets.
      seeds: a count S or a list of S seed indices (replicate keys ``fold_in(key, s)``).
      memory_bytes: working memory of one chunk (default: ``engine.device_memory()``).
      diagnostics: also return the ``NotPrivateDiagnostics`` [E, S] (the fused tree W1
        against the true data; Adaptive Pruned-PMM's exact selection scores and
        probabilities): for studying the mechanism, NOT private, never part of the release.

    Returns:
      a ``SyntheticMeasure`` with batch shape [E, S] (``out[e, s]`` is one replicate);
      with ``diagnostics``, the pair ``(measure, NotPrivateDiagnostics)``.
    """
    raw = as_raw_key(key)
    check_mechanism(mech)
    eps = check_epsilon(eps)
    count = seed_count(seeds)
    if memory_bytes is not None:
        memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
    diagnostics = _check_flag(diagnostics, "diagnostics")
    tree = data_tree_for(mech, X, eps)
    plan = mech.plan(tree, eps)
    engine.check_results_fit(plan, count)  # before the seed list itself is built
    return engine.release(plan, replicate_keys(raw, seed_indices(seeds)), memory_bytes,
                          diagnostics)
