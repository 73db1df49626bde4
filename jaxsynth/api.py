"""Public entry points: one replicate (``release``) or a grid of ε × seeds (``release_batch``).

Data-dependent work (the Morton sort and every cell count, ``DataTree``) is
done once per call, or once per data set when a prepared ``DataTree`` is passed; only
the noise is batched (``jaxsynth.engine``).  Replicate ``s`` of ``release_batch(key, ...)``
uses the key ``jax.random.fold_in(key, s)`` for every ε, so it equals
``release(jax.random.fold_in(key, s), ...)`` whatever the batch or chunk size.
"""

from __future__ import annotations

from jaxsynth import engine
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.keys import as_raw_key, replicate_keys
from jaxsynth.core.measure import LEVEL_FIELDS, NotPrivateDiagnostics
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import (
    check_bool,
    check_data,
    check_epsilon,
    check_measurable,
    check_positive_int,
    seed_count,
    seed_indices,
)
from jaxsynth.mechanisms.protocol import check_mechanism


def prepare(X, depth: int) -> DataTree:
    """Sort ``X`` [n, d] once into a ``DataTree`` of ``depth`` levels, reusable by releases.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> tree = js.prepare(X, 6)                    # the data's work, done once
      >>> tree.n, tree.d, tree.depth
      (500, 2, 6)
      >>> out = js.release(0, js.PMM(depth=6), tree, eps=1.0)   # no sorting here
      >>> out.points.shape
      (64, 2)
    """
    return DataTree.build(X, depth)


def data_tree_for(mech, X, eps) -> DataTree:
    """A data tree deep enough for ``mech`` at every ε: ``X`` itself when it is one."""
    if isinstance(X, DataTree):
        need = check_measurable(mech, X.n, X.d, eps)
        return X if X.depth >= need else DataTree.build(X.points, need)
    X = check_data(X)
    return DataTree.build(X, check_measurable(mech, X.shape[0], X.shape[1], eps))


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

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PMM(depth=6), X, eps=1.0)
      >>> out.points.shape, round(float(out.weights.sum()), 5)   # 2^6 cells of the plane
      ((64, 2), 1.0)
      >>> out.accounting                             # replacement: the root count is public
      {'adjacency': 'replacement', 'eps_levels': 1.0, 'eps_root': 0.0, 'epsilon': 1.0}
      >>> again = js.release(0, js.PMM(depth=6), js.prepare(X, 6), eps=1.0)
      >>> bool((again.weights == out.weights).all())            # same key, same release
      True
    """
    raw = as_raw_key(key)
    check_mechanism(mech)
    eps = check_epsilon(eps)
    if eps.size != 1:
        raise ValueError("eps must be a single number for release; use release_batch for lists")
    diagnostics = check_bool(diagnostics, "diagnostics")
    tree = data_tree_for(mech, X, eps)
    out = engine.release(mech.plan(tree, eps), raw[None], diagnostics=diagnostics)
    if diagnostics:
        measure, diag = out
        diag = with_tree_w1(diag, tree.d)
        return measure[0, 0], NotPrivateDiagnostics(
            {k: v[0, 0] for k, v in diag.values.items()}, diag.mechanism)
    return out[0, 0]


def release_fn(mech, X, eps):
    """The pure per-replicate release of ``mech`` on ``X``, to ``jit``/``vmap`` yourself.

    The data-dependent work (the ``DataTree``, the plan) is done here, once; the returned
    ``fn(key, eps_index)`` releases one replicate and is a pure JAX function of its
    arguments.  ``jax.jit(jax.vmap(fn))(keys, eps_indices)`` gives, bit for bit, the
    measures ``release_batch`` gives for those keys (replicate ``s`` of
    ``release_batch(key, ...)`` has the key ``jax.random.fold_in(key, s)``).

    Args:
      mech: a mechanism config.
      X: data in [0,1]^d, or a prepared ``DataTree``.
      eps: a number or a list of E budgets; ``eps_index`` picks one.

    Returns:
      ``fn(key, eps_index) -> SyntheticMeasure`` (unbatched; ``key`` a typed JAX key or a
      raw ``uint32[2]`` one, ``eps_index`` an int in ``[0, E)``).

    Raises:
      ValueError: naming the argument for bad input, or ``mech`` for configurations that
        need the host during a release (capacity reruns, PrivTree's LP reconstruction).

    Examples:
      >>> import jaxsynth as js
      >>> import jax, jax.numpy as jnp
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> fn = js.release_fn(js.PMM(depth=4), X, [0.5, 1.0])
      >>> keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(0), s))(jnp.arange(8))
      >>> out = jax.jit(jax.vmap(fn, in_axes=(0, None)))(keys, 1)  # 8 replicates at ε = 1
      >>> out.weights.shape
      (8, 16)
    """
    check_mechanism(mech)
    eps = check_epsilon(eps)
    return engine.replicate_fn(mech.plan(data_tree_for(mech, X, eps), eps))


def release_batch(key, mech, X, eps, seeds=1, memory_bytes: int | None = None,
                  diagnostics: bool = False):
    """Release ``len(eps) × S`` replicates in jitted, vmapped chunks.

    Args:
      key: int seed or jax PRNG key.
      mech: a mechanism config.
      X: data in [0,1]^d, or a prepared ``DataTree``.
      eps: a number or a list of E budgets.
      seeds: a count S or a list of S seed indices (replicate keys ``fold_in(key, s)``).
      memory_bytes: working memory of one chunk (default: ``core.batching.device_memory()``).
      diagnostics: also return the ``NotPrivateDiagnostics`` [E, S] (the kernel's level
        statistics against the true data, ``LEVEL_FIELDS``, and the tree W1
        ``tree_<metric>`` and its upper end ``upper_<metric>`` the tree method makes of
        them (pass them to ``js.w1(..., levels=)``); Adaptive Pruned-PMM's exact selection scores and
        probabilities): for studying the mechanism, NOT private, never part of the release.

    Returns:
      a ``SyntheticMeasure`` with batch shape [E, S] (``out[e, s]`` is one replicate);
      with ``diagnostics``, the pair ``(measure, NotPrivateDiagnostics)``.

    Examples:
      >>> import jaxsynth as js
      >>> import jax
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> batch = js.release_batch(0, js.PMM(depth=6), X, eps=[0.5, 1.0], seeds=4)
      >>> batch.batch_shape                          # ε × seeds
      (2, 4)
      >>> one = js.release(jax.random.fold_in(jax.random.key(0), 3), js.PMM(depth=6), X, 1.0)
      >>> bool((batch[1, 3].weights == one.weights).all())    # seed 3 at ε = 1
      True
    """
    raw = as_raw_key(key)
    check_mechanism(mech)
    eps = check_epsilon(eps)
    count = seed_count(seeds)
    if memory_bytes is not None:
        memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
    diagnostics = check_bool(diagnostics, "diagnostics")
    tree = data_tree_for(mech, X, eps)
    plan = mech.plan(tree, eps)
    engine.check_results_fit(plan, count)  # before the seed list itself is built
    out = engine.release(plan, replicate_keys(raw, seed_indices(seeds)), memory_bytes,
                         diagnostics)
    return (out[0], with_tree_w1(out[1], tree.d)) if diagnostics else out


def with_tree_w1(diag: NotPrivateDiagnostics, d: int) -> NotPrivateDiagnostics:
    """``diag`` with ``tree_<metric>`` and ``upper_<metric>`` for every ground metric: the
    tree W1 and its upper end the tree method reads from the level statistics (NOT
    PRIVATE, like them; the numbers ``simulate`` and ``js.w1(..., levels=diag)`` give
    before their rounding margins)."""
    from jaxsynth.wasserstein.tree import levels_w1

    if LEVEL_FIELDS[0] not in diag.values:
        return diag
    values = dict(diag.values)
    for metric in GROUND_METRICS:
        values[f"tree_{metric}"], values[f"upper_{metric}"] = levels_w1(values, d, metric)
    return NotPrivateDiagnostics(values, diag.mechanism)
