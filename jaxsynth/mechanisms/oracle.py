"""NON-PRIVATE oracle partitions and oracle measures ([He] §2.3, §4, §5.1).

Nothing in this module is differentially private: every function reads exact cell
counts of the data.  The outputs are ``SyntheticMeasure`` objects labelled with
``adjacency = "none (ORACLE: not private)"`` and budget ``ε = inf``, so the same W1 code
applies and no table can mistake them for private releases.  They isolate the
*resolution* error of a partition from the *privacy* error of its noisy leaf masses.

* ``hard_threshold(X, θ)``: split a cell while ``μ(Q) > θ`` ([He] Algorithm 3), capped at
  a public depth;
* ``soft_threshold(X, θ, δ)``: split while ``μ(Q) > θ + depth(Q)·δ`` ([He] Algorithm 4);
* ``oracle_measure(X, tree)``: the measure ``Σ_Q μ(Q) δ_{y_Q}`` on the leaves of a
  measure's tree ([He] Algorithm 1);
* ``resolution_functional(X, tree)``: ``R_T(μ) = Σ_Q p_Q 2^{−depth(Q)/d}``, with
  ``W1(μ, ν_T) ≤ 2d·R_T(μ)`` ([He] Lemma 2.5).

Leaves include the empty cells (atoms of weight 0), so they partition the cube; the leaf
count is bounded in advance, so the node table never overflows.  Keys:
``docs/references.md``; more on the theory page "Mechanisms and accounting".
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxsynth import engine
from jaxsynth.core import partition
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.batching import capacity_bucket
from jaxsynth.core.measure import SyntheticMeasure
from jaxsynth.core.validate import check_data, check_positive_int
from jaxsynth.mechanisms.privtree import MAX_BISECTIONS, tree_plan
from jaxsynth.mechanisms.privtree_kernel import TreeStatic

ORACLE_ADJACENCY = "none (ORACLE: not private)"


def _leaf_capacity(n: int, theta_count: float, delta_count: float, cap: int) -> int:
    """Upper bound on the leaves: ``1 + Σ_{k<cap} min(2^k, n // c_min(k))`` (a full binary tree)."""
    internal = 0
    for k in range(cap):
        threshold = theta_count + k * delta_count
        c_min = max(1, math.floor(threshold - 0.5) + 1)
        internal += min(2**k, n // c_min)
    return 1 + internal


def _threshold_measure(X, theta, delta, depth_cap, name) -> SyntheticMeasure:
    X = check_data(X)
    n, d = X.shape
    if not (np.isfinite(theta) and 0 <= theta <= 1):
        raise ValueError(f"theta must lie in [0, 1]; got {theta!r}")
    if not (np.isfinite(delta) and delta >= 0):
        raise ValueError(f"delta must be a finite number >= 0; got {delta!r}")
    cap = MAX_BISECTIONS * d if depth_cap is None else check_positive_int(depth_cap, "depth_cap")
    if cap > MAX_BISECTIONS * d:
        raise ValueError(f"depth_cap={cap} exceeds {MAX_BISECTIONS}·d = {MAX_BISECTIONS * d}")
    theta_count, delta_count = theta * n, delta * n
    reached = 2 * _leaf_capacity(n, theta_count, delta_count, cap)  # cells = 2·leaves − 1
    static = TreeStatic(capacity=capacity_bucket(reached), piece=64, max_depth=cap, dim=d,
                        rule="threshold")
    params = {"lam": np.ones(1, np.float32), "delta": np.asarray([delta_count], np.float32),
              "leaf_scale": np.ones(1, np.float32), "theta": np.asarray([theta_count], np.float32),
              "cap": np.asarray([cap], np.int32)}

    def overflow(static):  # the bound is exact: only float rounding could break it
        raise ValueError(f"the oracle tree exceeded its bound of {static.capacity} cells")

    plan = tree_plan(name, static, params, DataTree.build(X, cap), [np.inf],
                     budget={"epsilon": np.asarray([np.inf])}, adjacency=ORACLE_ADJACENCY,
                     retry=overflow, info={"depth_cap": np.asarray([cap], np.int32)})
    return engine.release(plan, jnp.zeros((1, 2), jnp.uint32))[0, 0]


def hard_threshold(X, theta: float, depth_cap: int | None = None) -> SyntheticMeasure:
    """ORACLE (not private): the hard-threshold partition ``T_θ`` and its measure ``ν_T``.

    He §4.1 (Algorithm 3 with a depth cap): a cell is split while ``μ(Q) > θ`` and
    its level is below ``depth_cap``; leaves carry their exact mass at the cell center.

    Args:
      X: [n, d] data in [0,1]^d.
      theta: threshold ``θ ∈ [0, 1]``.
      depth_cap: public depth cap; default ``22·d`` (the finest supported level).

    Returns:
      an unbatched ``SyntheticMeasure`` (mechanism ``"oracle-hard"``); ``info["cap_hits"]``
      counts cells at the cap that would have been split.

    Raises:
      ValueError: naming ``X``, ``theta`` or ``depth_cap`` for bad input.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> nu = js.oracle.hard_threshold(X, 0.05, depth_cap=8)
      >>> nu.accounting
      {'adjacency': 'none (ORACLE: not private)', 'epsilon': inf}
      >>> round(float(js.oracle.resolution_functional(X, nu)), 4)
      0.1614

    References:
      [He] §4.1, Algorithm 3.
    """
    return _threshold_measure(X, float(theta), 0.0, depth_cap, "oracle-hard")


def soft_threshold(X, theta: float, delta: float, depth_cap: int | None = None) -> SyntheticMeasure:
    """ORACLE (not private): the soft-threshold partition and its measure ``ν_{θ,δ}``.

    He §5 (Algorithm 4): a cell at level ``k`` is split while
    ``μ(Q) > θ + k·δ`` and ``k < depth_cap``.  PrivTree with its noise removed and the
    clamp irrelevant is this rule with ``θ = 0``, ``δ = σ ln 2``.

    Args:
      X: [n, d] data in [0,1]^d.
      theta: base threshold ``θ ∈ [0, 1]``.
      delta: depth increment ``δ ≥ 0``.
      depth_cap: public depth cap; default ``22·d``.

    Returns:
      an unbatched ``SyntheticMeasure`` (mechanism ``"oracle-soft"``).

    Raises:
      ValueError: naming ``X``, ``theta``, ``delta`` or ``depth_cap`` for bad input.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> nu = js.oracle.soft_threshold(X, 0.0, 0.01, depth_cap=8)
      >>> nu.mechanism, round(float(nu.weights.sum()), 5)
      ('oracle-soft', 1.0)

    References:
      [He] §5, Algorithm 4.
    """
    return _threshold_measure(X, float(theta), float(delta), depth_cap, "oracle-soft")


def _masks(depth: int, n_words: int) -> np.ndarray:
    """uint32 masks [W] keeping the first ``depth`` bits of a Morton code."""
    bits = np.clip(depth - partition.WORD_BITS * np.arange(n_words), 0, partition.WORD_BITS)
    return np.array([(0xFFFFFFFF << (32 - b)) & 0xFFFFFFFF if b else 0 for b in bits], np.uint32)


def _count_equal(reference: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each row of ``queries`` [Q, W], the number of equal rows of ``reference`` [R, W]."""
    _, inverse = np.unique(np.concatenate([reference, queries]), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    per_group = np.bincount(inverse[: len(reference)], minlength=inverse.max() + 1)
    return per_group[inverse[len(reference) :]]


def leaf_masses(X, tree: SyntheticMeasure) -> np.ndarray:
    """ORACLE: exact data mass ``μ(Q)`` of the leaf cell of every atom of ``tree``.

    Each atom names the level-``leaf_depth`` cell that contains it (of the partition
    shifted by ``−U`` when ``tree.info`` has ``"shift"``; digits computed exactly,
    ``partition.morton_words_of_sum``).  Atoms whose cell strictly contains another
    atom's cell of the same replicate are padding and get mass 0 (the convention of the
    tree W1).  Host NumPy, one pass per distinct leaf depth, vectorised over replicates
    (with a shift the data codes are computed per replicate).

    Args:
      X: [n, d] data in [0,1]^d.
      tree: a ``SyntheticMeasure`` with batch shape ``B`` and M atoms.

    Returns:
      [*B, M] float64 masses (summing to 1 per replicate when the leaves cover the data).

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PrivTree(), X, eps=1.0)
      >>> masses = js.oracle.leaf_masses(X, out)     # exact μ(Q) of each atom's leaf
      >>> masses.shape == out.weights.shape, round(float(masses.sum()), 5)
      (True, 1.0)
    """
    X = check_data(X)
    n, d = X.shape
    points = np.asarray(tree.points, np.float64)
    batch, size = points.shape[:-2], points.shape[-2]
    if points.shape[-1] != d:
        raise ValueError(f"tree has dimension {points.shape[-1]}, X has d={d}")
    points = points.reshape(-1, size, d)
    depth = np.asarray(tree.leaf_depth).reshape(-1, size)
    n_rep = points.shape[0]
    code_depth = max(1, int(depth.max()))
    shift = tree.info.get("shift") if isinstance(tree.info, dict) else None
    rep = np.repeat(np.arange(n_rep, dtype=np.uint32), size)[:, None]
    if shift is None:
        data = partition.morton_words(X, code_depth)
        atoms = partition.morton_words(points.reshape(-1, d), code_depth)
    else:
        shift = np.asarray(shift, np.float64).reshape(-1, 1, d)
        data = np.stack([
            np.stack(partition.morton_words_of_sum(np, X, u, code_depth, True), axis=-1) for u in shift
        ]).reshape(n_rep * n, -1)
        data = np.concatenate([np.repeat(np.arange(n_rep, dtype=np.uint32), n)[:, None], data], 1)
        atoms = np.stack(partition.morton_words_of_sum(np, points, shift, code_depth, True), axis=-1)
        atoms = atoms.reshape(n_rep * size, -1)
    flat_depth = depth.reshape(-1)
    counts = np.zeros(flat_depth.size, np.int64)
    padding = np.zeros(flat_depth.size, bool)
    for k in np.unique(flat_depth):
        mask = _masks(int(k), atoms.shape[1])
        here = np.flatnonzero(flat_depth == k)
        deeper = np.flatnonzero(flat_depth > k)
        masked = np.concatenate([rep, atoms & mask], axis=1)
        if shift is None:
            counts[here] = _count_equal(data & mask, atoms[here] & mask)
        else:
            counts[here] = _count_equal(data & np.append(np.uint32(0xFFFFFFFF), mask), masked[here])
        if deeper.size:
            padding[here] = _count_equal(masked[deeper], masked[here]) > 0
    masses = np.where(padding, 0.0, counts / n)
    return masses.reshape(batch + (size,))


def oracle_measure(X, tree: SyntheticMeasure) -> SyntheticMeasure:
    """ORACLE (not private): ``ν_T`` of ``tree``'s partition with exact leaf masses (Algorithm 1).

    He Algorithm 1 / §5.2: the same representatives and leaves as ``tree`` (e.g. a
    PrivTree release), each weighted by the exact data mass of its leaf.  Then
    ``W1(μ, ν_T)`` is the resolution error and ``W1(ν_T, released)`` the privacy error.

    Args:
      X: [n, d] data in [0,1]^d.
      tree: a ``SyntheticMeasure`` whose atoms name the leaves (any batch shape).

    Returns:
      a ``SyntheticMeasure`` with the same batch shape, mechanism ``"oracle[<name>]"``;
      ``info["shift"]`` is kept so the W1 code uses the same partition.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PrivTree(), X, eps=1.0)
      >>> nu = js.oracle.oracle_measure(X, out)      # same leaves, exact masses
      >>> nu.mechanism, round(float(nu.weights.sum()), 5)
      ('oracle[privtree]', 1.0)

    References:
      [He] Algorithm 1, §5.2.
    """
    masses = leaf_masses(X, tree)
    weights = jnp.asarray(masses, jnp.float32)
    batch = weights.shape[:-1]
    info = {"shift": tree.info["shift"]} if "shift" in tree.info else {}
    return SyntheticMeasure(
        points=tree.points,
        weights=weights,
        leaf_depth=tree.leaf_depth,
        size=jnp.sum(weights > 0, axis=-1).astype(jnp.int32),
        visited=tree.visited,
        leaves=tree.leaves,
        depth=tree.depth,
        budget={"epsilon": jnp.full(batch, jnp.inf, jnp.float32)},
        info=info,
        adjacency=ORACLE_ADJACENCY,
        mechanism=f"oracle[{tree.mechanism}]",
    )


def resolution_functional(X, tree: SyntheticMeasure) -> np.ndarray:
    """ORACLE: ``R_T(μ) = Σ_{leaves Q} μ(Q)·2^{−depth(Q)/d}`` of ``tree``'s partition.

    He §2.3 (Lemma 2.5: ``W1(μ, ν_T) ≤ Σ p_Q diam(Q) ≤ 2d·R_T(μ)``).  For a shifted
    partition the depths are those of the partition of ``[0,2]^d``.

    Args:
      X: [n, d] data in [0,1]^d.
      tree: a ``SyntheticMeasure`` whose atoms name the leaves (any batch shape).

    Returns:
      [*B] float64, one value per replicate of ``tree``.

    Examples:
      >>> import jaxsynth as js
      >>> import numpy as np
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PrivTree(), X, eps=1.0)
      >>> R = js.oracle.resolution_functional(X, out)
      >>> by_hand = js.oracle.leaf_masses(X, out) * 2.0 ** (-np.asarray(out.leaf_depth) / 2)
      >>> bool(np.isclose(R, by_hand.sum()))         # Σ μ(Q)·2^(−depth(Q)/d), d = 2
      True

    References:
      [He] §2.3, Lemma 2.5.
    """
    masses = leaf_masses(X, tree)
    d = np.asarray(tree.points).shape[-1]
    depth = np.asarray(tree.leaf_depth, np.float64)
    return np.sum(masses * np.exp2(-depth / d), axis=-1)
