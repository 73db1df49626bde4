"""Public entry points: one replicate (``release``) or a grid of ε × seeds (``release_batch``).

SPEC §10.  Data-dependent work (the Morton sort and every cell count, ``DataTree``) is
done once per call, or once per data set when a prepared ``DataTree`` is passed; only
the noise is batched.  Replicate ``s`` of ``release_batch(key, ...)`` uses the key
``jax.random.fold_in(key, s)`` for every ε, so it equals
``release(jax.random.fold_in(key, s), ...)`` whatever the batch or chunk size.
"""

from __future__ import annotations


from jaxsynth import batching
from jaxsynth._validate import check_data, check_epsilon
from jaxsynth.datatree import DataTree
from jaxsynth.keys import as_raw_key, replicate_keys
from jaxsynth.measure import SyntheticMeasure


def prepare(X, depth: int) -> DataTree:
    """Sort ``X`` [n, d] once into a ``DataTree`` of ``depth`` levels, reusable by releases."""
    return DataTree.build(X, depth)


def data_tree_for(mech, X, eps) -> DataTree:
    """A data tree deep enough for ``mech`` at every ε: ``X`` itself when it is one."""
    if isinstance(X, DataTree):
        need = mech.data_depth(X.n, X.d, eps)
        return X if X.depth >= need else DataTree.build(X.points, need)
    X = check_data(X)
    return DataTree.build(X, mech.data_depth(X.shape[0], X.shape[1], eps))


def release(key, mech, X, eps: float) -> SyntheticMeasure:
    """Release one synthetic measure of ``X`` [n, d] with ``mech`` at budget ``eps``.

    Args:
      key: int seed or jax PRNG key; the replicate's whole randomness derives from it.
      mech: a mechanism config (``PMM``, ``PrunedPMM``, ``AdaptivePrunedPMM``, ``PrivTree``).
      X: data in [0,1]^d, or a prepared ``DataTree``.
      eps: total privacy budget ε > 0.

    Returns:
      an unbatched ``SyntheticMeasure`` (see its ``accounting`` for the budget split).
    """
    eps = check_epsilon(eps)
    if eps.size != 1:
        raise ValueError("eps must be a single number for release; use release_batch for lists")
    tree = data_tree_for(mech, X, eps)
    return mech.run(as_raw_key(key)[None], eps, tree)[0, 0]


def release_batch(
    key, mech, X, eps, seeds=1, memory_bytes: int = batching.DEFAULT_MEMORY_BYTES
) -> SyntheticMeasure:
    """Release ``len(eps) × S`` replicates in jitted, vmapped calls.

    Args:
      key: int seed or jax PRNG key.
      mech: a mechanism config.
      X: data in [0,1]^d, or a prepared ``DataTree``.
      eps: a number or a list of E budgets.
      seeds: a count S or a list of S seed indices (replicate keys ``fold_in(key, s)``).
      memory_bytes: working-memory budget per jitted chunk; seeds are chunked to fit.

    Returns:
      a ``SyntheticMeasure`` with batch shape [E, S] (``out[e, s]`` is one replicate).
    """
    eps = check_epsilon(eps).ravel()
    tree = data_tree_for(mech, X, eps)
    return mech.run(replicate_keys(key, seeds), eps, tree, memory_bytes)
