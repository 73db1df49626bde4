"""PrivTree on the cyclic partition with Laplace leaf masses (SPEC §5; seed 000 §3, §5.2, §6).

**Mechanism** (add/remove adjacency, seed 000 §2.2; total budget ``ε``):

1. *Tree* (``ε/2``, PrivTree of Zhang–Xiao–Xie 2016, Algorithm 2, fanout ``β = 2``).
   A reached cell ``Q`` at level ``k`` with ``c_Q`` data points has the biased count
   ``b(Q) = max(c_Q − k·δ, θ − δ)`` and is split iff ``b(Q) + Lap(λ) > θ``, with
   ``θ = 0``, ``λ = (2β−1)/((β−1)·ε/2) = 6/ε`` and ``δ = λ·ln β = λ ln 2``.  In the mass
   units of seed 000 (``p_Q = c_Q/n``) this is ``σ = 6/(εn)``, ``δ = σ ln 2``, ``θ = 0``
   (seed 000 §5.2, the ``ε/2`` parameter choice); counts are used on the device because
   the test is scale-free for ``θ = 0``.  The clamp at ``θ − δ`` is what makes PrivTree
   private; it is kept.  Unsplit cells are leaves.
2. *Leaf masses* (``ε/2``, seed 000 Algorithm 2 / Proposition 3.1): every leaf gets
   ``p̃_Q = p_Q + Lap(2/(εn))``; each point lies in exactly one leaf, so the leaf-count
   vector has ℓ1 sensitivity 1 under add/remove adjacency.
3. *Reconstruction* (post-processing) into a probability vector on the leaves:
   ``"topdown"`` (default): noisy subtree sums ``S_v = Σ_{leaves under v} p̃_Q``, root mass
   1, a node's mass split between its children in proportion to ``(S_child)_+`` (evenly
   when both are ``≤ 0``); ``"lp"``: the projection of seed 000 Algorithm 2, exact by
   linear programming (``lp_projection``; host side, at most ``LP_MAX_LEAVES`` leaves).
4. *Representatives*: the cell center (default) or a uniform point of the cell.

**Random shift** (``shift=True``, seed 000 §6).  A public ``U`` is drawn from the replicate
key (independent of the data); the data move to ``Ω + U ⊂ [0,2]^d``, partitioned
cyclically.  Equivalently ``y = (x + U)/2`` lies in ``[U/2, (1+U)/2] ⊂ [0,1]^d`` with the
standard partition, which is what is computed.  A reached cell disjoint from that window
is discarded (no noise, never split, no mass, not a leaf); representatives lie in
``Q ∩ (Ω + U)`` and are shifted back by ``−U``, so every representative lies in Ω.
``out.info["shift"]`` holds ``U``.  Because the Morton order of the shifted data depends
on ``U``, the data tree is rebuilt on the host for every seed (``O(n log n)`` each,
shared by all ε of that seed); the noise is still batched on the device.

*Choice, documented:* ``U`` is uniform on the midpoints ``(2k+1)·2^-23``,
``k = 0..2^22−1``, of a 2^-22 grid per coordinate rather than on the continuum: then
``U``, ``(1+U)/2`` and every cell boundary of up to ``MAX_BISECTIONS = 22`` bisections
per coordinate are exact float32 numbers, the window boundary never coincides with a
cell boundary, and ``x ↦ (x + U)/2`` assigns cells exactly (the data are truncated to 29
binary digits first, which leaves every cell assignment at ≤ 22 bisections unchanged,
so the sums are exact in float64).  The law of ``U`` differs from Unif[0,1]^d by at most
2^-23 in every coordinate, far below the cell sizes the analysis uses.

**Depth cap and capacity.**  Ghost subtrees of PrivTree are subcritical (an empty cell
splits with probability ``P(Lap(λ) > δ) = 1/4``), so the tree is finite almost surely
but has no deterministic depth bound, and data with repeated points split deep.  A
public cap stops it: cells at level ``depth_cap`` are leaves; their split test is still
drawn so ``info["cap_hits"]`` counts the splits the cap prevented (a capped tree is the
truncation of the uncapped one: post-processing, no privacy cost).  Default
``depth_cap = d·(⌈log2(εn)⌉ + 1)``, at most ``22·d``: cubes of side ``≤ 1/(2εn)``, whose
diameter is below the ``~1/(εn)`` floor of any ε-DP release.  The frontier has a fixed
capacity ``K`` so it vmaps over seeds and ε.  The expected number of leaves is at most
``6 + εn/(4 ln 2)`` (seed 000 §5.2, for the uncapped tree; truncation and the shift's
discarding only remove leaves), and never above ``2^cap``.  On structured data it is
far smaller, so the default capacity is computed from the exact expected leaf count of
the data (``expected_leaves``) plus five standard-deviation-like margins.  Every
replicate detects overflow; in the default ``capacity=None`` mode the
overflowing seeds are rerun with doubled capacity until none overflows (node randomness
depends only on the node's path, so a rerun reproduces the same tree and results never
depend on capacity or batching).  An explicit ``capacity`` that overflows raises
``ValueError``.  Nothing is ever silently truncated.

Node randomness: a node with key ``k`` draws its children's keys from ``fold_in(k, 0/1)``,
its split test from ``fold_in(k, 2)`` (``jaxsynth.keys``), its leaf noise from
``fold_in(k, LEAF_NOISE)`` and its uniform representative from
``fold_in(k, PLACEMENT + t)``; the shift from ``fold_in(replicate_key, SHIFT_TAG)``.

Note on ``out.size``: PrivTree releases a probability vector, not an integer sample; its
``size`` is the number of atoms with positive released mass; ``leaves`` counts all leaves
(zero-mass ones included: every leaf that can hold data carries an atom, which the tree
W1 needs), ``visited`` the cells whose split test was drawn, ``depth`` the deepest leaf.
``info`` holds ``noisy_mass`` (the released ``p̃_Q``, [.., M]), ``cap_hits``, ``depth_cap``,
``capacity`` and, with the shift, ``shift``.  ``cap_hits`` and ``capacity`` are
diagnostics computed from the data and are *not* differentially private.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth import batching
from jaxsynth import keys as K
from jaxsynth._validate import check_positive_int
from jaxsynth.datatree import DataTree
from jaxsynth.descent import DeviceTree, child_boundary
from jaxsynth.frontier import compact
from jaxsynth.measure import SyntheticMeasure
from jaxsynth.noise import open_uniform
from jaxsynth.pmm_core import leaf_side

LEAF_NOISE = 4
"""Tag of a leaf's Laplace mass noise: ``fold_in(node_key, LEAF_NOISE)``."""
PLACEMENT = 5
"""First tag of a leaf's uniform representative: ``fold_in(node_key, PLACEMENT + t)``."""
SHIFT_TAG = 0x5BD1E995
"""Tag of the public shift: ``fold_in(replicate_key, SHIFT_TAG)``."""
MAX_BISECTIONS = 22
"""Bisections per coordinate supported (exact float32 cells, centers and shifts)."""
LP_MAX_LEAVES = 300
"""Largest leaf count for ``reconstruction="lp"`` (the LP has ``L^2 + 3L`` variables)."""
MAX_CAPACITY = 2**26
"""Largest frontier capacity the automatic doubling tries."""
RECONSTRUCTIONS = ("topdown", "lp")
PLACEMENTS = ("center", "uniform")
_TRUNCATE_BITS = 29
_BYTES_PER_SLOT = 320


def privtree_scales(eps):
    """PrivTree scales in count units for a total budget ``eps``: ``(λ, δ, leaf scale)``.

    ``λ = 6/ε`` (``ε/2`` for the tree, β = 2), ``δ = λ ln 2``, leaf noise ``Lap(2/ε)``
    (``ε/2``, sensitivity 1).  Divide by ``n`` for the mass units of seed 000 §5.2.
    """
    lam = 6.0 / eps
    return lam, lam * math.log(2.0), 2.0 / eps


def split_probability(count, level, eps):
    """Exact ``P(split)`` of a cell with ``count`` points at ``level``: ``P(Lap(λ) > −b)``.

    ``b = max(count − level·δ, −δ)``; NumPy float64, for checks and documentation.
    """
    lam, delta, _ = privtree_scales(np.asarray(eps, np.float64))
    b = np.maximum(np.asarray(count, np.float64) - np.asarray(level) * delta, -delta)
    tail = 0.5 * np.exp(-np.abs(b) / lam)
    return np.where(b >= 0, 1.0 - tail, tail)


def expected_leaves(tree: DataTree, eps: float, cap: int) -> float:
    """Exact ``E[#leaves]`` of the capped, unshifted PrivTree on ``tree`` (host, float64).

    Split decisions are independent given the data, so a cell is reached with the product
    of its ancestors' split probabilities (``split_probability``).  Occupied cells are
    followed level by level through the data tree; an empty child of an occupied cell is
    the root of a ghost tree whose cells split with probability ``q = P(Lap(λ) > δ) = 1/4``
    (the clamp), with ``g(cap) = 1`` and ``g(k) = 1 − q + 2q·g(k + 1)`` expected leaves.
    Used to size the frontier; ``O(Σ_j O_j)`` work.
    """
    if tree.depth < cap:
        raise ValueError(f"the data tree has depth {tree.depth} < cap {cap}")
    quarter = 0.25  # P(Lap(λ) > δ) = e^{-ln 2}/2
    ghost = [1.0] * (cap + 1)
    for k in range(cap - 1, -1, -1):
        ghost[k] = 1.0 - quarter + 2.0 * quarter * ghost[k + 1]
    starts = np.zeros(1, np.int64)
    reach = np.ones(1)
    total = 0.0
    for j in range(cap):
        counts = np.diff(np.append(starts, tree.n))
        split = reach * split_probability(counts, j, eps)
        total += float(np.sum(reach) - np.sum(split))
        child_starts = np.flatnonzero(tree.split < j + 1)
        parent = np.searchsorted(starts, child_starts, side="right") - 1
        occupied = np.bincount(parent, minlength=starts.size)
        total += float(np.sum(split * (2 - occupied))) * ghost[j + 1]
        starts, reach = child_starts, split[parent]
    return total + float(np.sum(reach))


def default_depth_cap(n: int, d: int, eps: float) -> int:
    """``d·(⌈log2(εn)⌉ + 1)`` (at least ``d``), capped at ``MAX_BISECTIONS·d``."""
    k = max(0, math.ceil(math.log2(max(eps * n, 1.0)) - 1e-12)) + 1
    return min(MAX_BISECTIONS, k) * d


def laplace_from_bits(bits, scale):
    """``Lap(scale)`` float32 from two uint32 words per draw, ``bits`` [..., 2]."""
    e = -jnp.log(open_uniform(bits))
    return (e[..., 0] - e[..., 1]) * jnp.asarray(scale, jnp.float32)


def privtree_split(lam, delta):
    """PrivTree's rule ``max(c − kδ, −δ) + Lap(λ) > 0`` as ``split(counts, level, noise_bits)``."""

    def split(counts, level, noise_bits):
        biased = jnp.maximum(counts.astype(jnp.float32) - level.astype(jnp.float32) * delta, -delta)
        return biased + laplace_from_bits(noise_bits, lam) > 0

    return split


def shift_vectors(keys, d: int) -> np.ndarray:
    """Public shifts ``U`` [S, d] float32, one per replicate key [S, 2] (see module doc)."""

    def one(key):
        bits = jax.random.bits(K.fold_in(key, SHIFT_TAG), (d,), jnp.uint32)
        return ((bits >> 10).astype(jnp.float32) * 2.0 + 1.0) * jnp.float32(2.0**-23)

    return np.asarray(jax.vmap(one)(jnp.asarray(keys, jnp.uint32)))


def shifted_points(X, shift) -> np.ndarray:
    """``(x + U)/2`` of data ``X`` [n, d], exact for cells of ≤ 22 bisections per coordinate.

    ``X`` is truncated to 29 binary digits first.  A cell boundary ``B`` of ``x + U`` at up
    to 22 bisections per coordinate is a multiple of 2^-21 and ``U`` one of 2^-23, so
    ``x ≥ B − U`` compares ``x`` with a multiple of 2^-23, which truncation to 2^-29 cannot
    change; the float64 sum of the truncated data and ``U`` is exact.
    """
    X = np.asarray(X, np.float64)
    scale = 2.0**_TRUNCATE_BITS
    return (np.floor(X * scale) / scale + np.asarray(shift, np.float64)) / 2.0


class Frontier(NamedTuple):
    """Slots of a growing tree, in Morton (depth-first) order; arrays [K, ...].

    ``lca[i]`` is the level of the lowest common ancestor of slots ``i−1`` and ``i``
    (``−1`` for slot 0 and padding); ``open`` marks nodes still to be tested (all at the
    current level); the others are leaves.  Slots ``≥ count`` are padding.
    """

    lo: jax.Array
    hi: jax.Array
    keys: jax.Array
    lower: jax.Array
    level: jax.Array
    lca: jax.Array
    open: jax.Array
    count: jax.Array
    visited: jax.Array
    overflow: jax.Array


def _intersects(lower, side, window):
    """Cells ``[lower, lower+side)`` meeting the closed box ``window = (lo, hi)``.

    Window and cell boundaries never coincide (module doc), so strict tests are exact.
    """
    return jnp.all((lower < window[1]) & (lower + side > window[0]), axis=-1)


def grow(dev: DeviceTree, key, split_fn, cap, n_levels: int, capacity: int, window=None):
    """Grow an adaptive binary tree level by level on a fixed-capacity frontier.

    Every open slot at level ``j < cap`` is tested with ``split_fn``; a
    split slot becomes its two children (children disjoint from ``window`` are
    discarded), an unsplit slot becomes a leaf and stays in place.  After ``n_levels``
    steps (levels ``≥ cap`` are no-ops) the open slots, at level ``cap``, are leaves whose
    test is drawn once more to count ``cap_hits``.  The slots then hold exactly the
    leaves, in depth-first order.

    Args:
      dev: data tree on device (depth ``≥ n_levels``).
      key: raw root key [2].
      split_fn: ``(counts [K] int32, level int32, noise_bits [K, 2]) -> [K] bool``; the
        uint32 words are each node's ``fold_in(key, NOISE)`` (``jaxsynth.keys``).
      cap: depth cap (traced int32, ``≤ n_levels``).
      n_levels: static number of level steps.
      capacity: static slot count ``K``.
      window: ``None`` or ``(lo [d], hi [d])``, the closed box reached cells must meet.

    Returns:
      (final ``Frontier``, cap_hits int32).  ``overflow`` is true when some level needed
      more than ``capacity`` slots (the result is then invalid).
    """
    d = dev.dim
    n = dev.split.shape[0]
    slot = jnp.arange(capacity, dtype=jnp.int32)
    first = slot == 0
    state = Frontier(
        lo=jnp.zeros(capacity, jnp.int32),
        hi=jnp.where(first, n, 0).astype(jnp.int32),
        keys=jnp.where(first[:, None], key, 0).astype(jnp.uint32),
        lower=jnp.zeros((capacity, d), jnp.float32),
        level=jnp.zeros(capacity, jnp.int32),
        lca=jnp.full(capacity, -1, jnp.int32),
        open=first,
        count=jnp.int32(1),
        visited=jnp.int32(0),
        overflow=jnp.bool_(False),
    )

    def interleave(a0, a1):
        return jnp.stack([a0, a1], axis=1).reshape((-1,) + a0.shape[1:])

    def body(s: Frontier, j):
        live = j < cap
        valid = slot < s.count
        hashed = K.fold_in(s.keys, (0, 1, K.NOISE))  # child keys, own noise: one hash
        split = s.open & split_fn(s.hi - s.lo, j, hashed[:, 2])
        p = child_boundary(dev, s.lo, s.hi, j)
        child_keys = hashed[:, :2]
        step = jnp.exp2(-(j // d + 1).astype(jnp.float32)) * (jnp.arange(d) == j % d)
        upper_lower = s.lower + step
        if window is None:
            ok0 = ok1 = True
        else:
            side = leaf_side(j + 1, d)
            ok0 = _intersects(s.lower, side, window)
            ok1 = _intersects(upper_lower, side, window)
        keep0 = valid & (~split | ok0)
        keep1 = split & ok1
        keep = interleave(keep0, keep1)
        total = jnp.sum(keep)
        lo, hi, keys, lower, level, lca, open_ = compact(
            keep,
            capacity,
            interleave(s.lo, p),
            interleave(jnp.where(split, p, s.hi), s.hi),
            interleave(jnp.where(split[:, None], child_keys[:, 0], s.keys), child_keys[:, 1]),
            interleave(s.lower, upper_lower),
            interleave(jnp.where(split, j + 1, s.level), jnp.full_like(s.level, j + 1)),
            interleave(s.lca, jnp.where(keep0, j, s.lca)),
            interleave(split, split),
        )
        count = jnp.minimum(total, capacity).astype(jnp.int32)
        new = Frontier(
            lo, hi, keys, lower, level, lca, open_ & (slot < count), count,
            s.visited + jnp.sum(s.open).astype(jnp.int32), s.overflow | (total > capacity),
        )
        return jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), new, s), None

    state, _ = jax.lax.scan(body, state, jnp.arange(n_levels, dtype=jnp.int32))
    at_cap = state.open & split_fn(
        state.hi - state.lo, jnp.asarray(cap, jnp.int32), K.noise_bits(state.keys)
    )
    valid = slot < state.count
    state = state._replace(
        lca=jnp.where(valid, state.lca, -1),
        visited=state.visited + jnp.sum(state.open).astype(jnp.int32),
    )
    return state, jnp.sum(at_cap).astype(jnp.int32)


def topdown_weights(noisy, lca, n_levels: int):
    """Top-down reconstruction of leaf weights from noisy leaf masses (SPEC §5).

    Leaves are in depth-first order; leaves ``i−1, i`` share their level-``j`` ancestor
    iff ``lca[i] ≥ j``, so the level-``j`` nodes are runs and their noisy subtree sums
    ``S_v`` are segment sums.  Level by level, a node's mass goes to its children in
    proportion to ``(S_child)_+``, evenly among its present children when all are
    ``≤ 0``.  A leaf shallower than ``j`` is its own only "child" (ratio 1).

    Args:
      noisy: [K] float noisy leaf masses (0 on padding).
      lca: [K] int32 lowest-common-ancestor levels with the previous leaf (−1 on slot 0
        and padding).
      n_levels: static number of levels (≥ the deepest leaf).

    Returns:
      [K] float32 weights, non-negative, summing to 1 over the leaves.
    """
    size = noisy.shape[0]
    noisy = noisy.astype(jnp.float32)

    def segment(values, ids):
        return jax.ops.segment_sum(values, ids, num_segments=size)[ids]

    def body(mass, j):
        parent = jnp.cumsum(lca < j) - 1
        start = lca < j + 1
        child = jnp.cumsum(start) - 1
        positive = jnp.maximum(segment(noisy, child), 0.0)
        total = segment(jnp.where(start, positive, 0.0), parent)
        n_children = segment(start.astype(jnp.float32), parent)
        ratio = jnp.where(total > 0, positive / jnp.where(total > 0, total, 1.0), 1.0 / n_children)
        return mass * ratio, None

    mass, _ = jax.lax.scan(body, jnp.ones(size, jnp.float32), jnp.arange(n_levels, dtype=jnp.int32))
    return mass


def cell_boxes(lower, level, shift):
    """Boxes ``[a, b)`` [K, d] in Ω of cells ``(lower, level)`` of the (shifted) partition.

    Unshifted: the cell itself.  Shifted (``shift`` = U [d]): ``Q ∩ (Ω + U)`` mapped back
    by ``−U``, i.e. ``[max(2·lower − U, 0), min(2·upper − U, 1)]``; exact in float32.
    """
    side = leaf_side(level[:, None], lower.shape[-1])
    if shift is None:
        return lower, lower + side
    a = jnp.maximum(2.0 * lower - shift, 0.0)
    b = jnp.minimum(2.0 * (lower + side) - shift, 1.0)
    return a, b


def representatives(a, b, node_keys, uniform: bool):
    """Box centers ``a + (b − a)/2`` (exact), or uniform points in ``[a, b)`` from node keys."""
    if not uniform:
        return a + 0.5 * (b - a)
    d = a.shape[-1]
    tags = tuple(PLACEMENT + t for t in range(-(-d // 2)))
    words = K.fold_in(node_keys, tags).reshape(node_keys.shape[:-1] + (-1,))[..., :d]
    u = open_uniform(words)
    return jnp.minimum(a + u * (b - a), jnp.nextafter(b, a))


def _privtree_kernel(key, shift, dev, eps, cap, *, n_levels, capacity, uniform, shifted):
    """One replicate: grow the tree, release leaf masses, reconstruct, place atoms."""
    n = dev.split.shape[0]
    lam, delta, leaf_scale = privtree_scales(eps)
    window = (shift / 2.0, (1.0 + shift) / 2.0) if shifted else None
    fr, cap_hits = grow(dev, key, privtree_split(lam, delta), cap, n_levels, capacity, window)
    valid = jnp.arange(capacity) < fr.count
    counts = (fr.hi - fr.lo).astype(jnp.float32)
    noise = laplace_from_bits(K.fold_in(fr.keys, LEAF_NOISE), leaf_scale)
    noisy = jnp.where(valid, counts + noise, 0.0)
    weights = topdown_weights(noisy, fr.lca, n_levels)
    weights = jnp.where(valid, weights, 0.0)
    weights = weights / jnp.sum(weights)
    a, b = cell_boxes(fr.lower, fr.level, shift if shifted else None)
    points = jnp.where(valid[:, None], representatives(a, b, fr.keys, uniform), 0.0)
    return dict(
        points=points,
        weights=weights,
        leaf_depth=jnp.where(valid, fr.level, 0),
        noisy_mass=noisy / n,
        leaves=fr.count,
        visited=fr.visited,
        depth=jnp.max(jnp.where(valid, fr.level, 0)),
        cap_hits=cap_hits,
        overflow=fr.overflow,
    )


@functools.lru_cache(maxsize=None)
def _batched(n_levels: int, capacity: int, uniform: bool, shifted: bool):
    kernel = functools.partial(
        _privtree_kernel, n_levels=n_levels, capacity=capacity, uniform=uniform, shifted=shifted
    )
    over_seeds = jax.vmap(kernel, in_axes=(0, 0, 0 if shifted else None, None, None))
    return jax.jit(jax.vmap(over_seeds, in_axes=(None, None, None, 0, 0)))


def _stack_trees(trees) -> DeviceTree:
    return DeviceTree(
        words=jnp.asarray(np.stack([t.words for t in trees])),
        split=jnp.asarray(np.stack([t.split for t in trees])),
        table=jnp.asarray(np.stack([t.range_min_table for t in trees])),
        dim=trees[0].d,
    )


def lp_projection(noisy_mass, points, bound=None):
    """Seed 000 Algorithm 2 projection, exact by linear programming (host, SciPy HiGHS).

    Solves ``min_{p ≥ 0, Σp = 1} max_{|f_Q| ≤ B, |f_Q − f_R| ≤ ‖y_Q − y_R‖_2} Σ_Q (p_Q − p̃_Q) f_Q``
    with ``B = d`` (the class ``F`` of seed 000 §2.1: 1-Lipschitz, ``‖f‖_∞ ≤ d``).  The
    inner maximum is replaced by its LP dual (a flow ``π ≥ 0`` between leaves and slacks
    ``a, b ≥ 0`` to the bound): ``min Σ ‖y_i − y_j‖ π_ij + B Σ (a_i + b_i)`` subject to
    ``Σ_j π_ij − Σ_j π_ji + a_i − b_i = p_i − p̃_i`` and ``Σ p = 1``, one LP with
    ``L(L−1) + 3L`` variables.

    Args:
      noisy_mass: [L] noisy leaf masses ``p̃``.
      points: [L, d] representatives ``y_Q``.
      bound: ``B``; default ``d``.

    Returns:
      (p [L] float64 probability vector, optimal value).
    """
    from scipy import optimize, sparse
    from scipy.spatial.distance import cdist

    target = np.asarray(noisy_mass, np.float64)
    y = np.asarray(points, np.float64)
    size, d = y.shape
    bound = float(d if bound is None else bound)
    if size > LP_MAX_LEAVES:
        raise ValueError(
            f"reconstruction='lp' supports at most {LP_MAX_LEAVES} leaves; got {size} "
            "(use reconstruction='topdown')"
        )
    i, j = np.nonzero(~np.eye(size, dtype=bool))
    n_flow = i.size
    # columns: p [L], flow [n_flow], a [L], b [L]
    diag = np.arange(size)
    rows = np.concatenate([diag, i, j, diag, diag, np.full(size, size)])
    cols = np.concatenate([
        np.arange(size), size + np.arange(n_flow), size + np.arange(n_flow),
        size + n_flow + np.arange(size), 2 * size + n_flow + np.arange(size), np.arange(size),
    ])
    vals = np.concatenate([
        -np.ones(size), np.ones(n_flow), -np.ones(n_flow), np.ones(size), -np.ones(size),
        np.ones(size),
    ])
    A = sparse.csr_matrix((vals, (rows, cols)), shape=(size + 1, 3 * size + n_flow))
    rhs = np.append(-target, 1.0)
    cost = np.concatenate([np.zeros(size), cdist(y, y)[i, j], np.full(2 * size, bound)])
    res = optimize.linprog(cost, A_eq=A, b_eq=rhs, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the LP reconstruction failed: {res.message}")
    p = np.maximum(res.x[:size], 0.0)
    return p / p.sum(), float(res.fun)


@dataclasses.dataclass(frozen=True)
class PrivTree:
    """PrivTree + Laplace leaf masses, optionally on a randomly shifted partition (SPEC §5).

    Seed 000 §3, §5.2 (the parameters ``θ = 0``, ``σ = 6/(εn)``, ``δ = σ ln 2``
    for an ``ε/2`` tree) and §6 (shift).  Privacy: ``ε``-DP under add/remove adjacency,
    ``ε/2`` for the tree (PrivTree, Zhang–Xiao–Xie 2016, Corollary 1) and ``ε/2`` for the
    leaf masses (Laplace mechanism), by adaptive composition; reconstruction, placement,
    capping and discarding are post-processing of public or released values.

    Attributes:
      shift: randomly shifted partition of seed 000 §6 (name ``"privtree-shift"``).
      depth_cap: public depth cap; ``None`` uses ``default_depth_cap(n, d, ε)``.  At most
        ``22·d``.
      reconstruction: ``"topdown"`` or ``"lp"`` (at most ``LP_MAX_LEAVES`` leaves, SciPy).
      placement: ``"center"`` or ``"uniform"`` (one point uniform in the leaf's box).
      capacity: frontier slots; ``None`` starts from the expected-size bound and doubles
        for overflowing seeds, an int is used as is and overflow raises ``ValueError``.
    """

    shift: bool = False
    depth_cap: int | None = None
    reconstruction: str = "topdown"
    placement: str = "center"
    capacity: int | None = None

    def __post_init__(self):
        if self.depth_cap is not None:
            check_positive_int(self.depth_cap, "depth_cap")
        if self.capacity is not None:
            check_positive_int(self.capacity, "capacity")
        if self.reconstruction not in RECONSTRUCTIONS:
            raise ValueError(
                f"reconstruction must be one of {RECONSTRUCTIONS}; got {self.reconstruction!r}"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}; got {self.placement!r}")

    @property
    def name(self) -> str:
        return "privtree-shift" if self.shift else "privtree"

    def resolved_cap(self, n: int, d: int, eps: float) -> int:
        """The depth cap used at budget ``eps``."""
        cap = self.depth_cap if self.depth_cap is not None else default_depth_cap(n, d, eps)
        if cap > MAX_BISECTIONS * d:
            raise ValueError(
                f"depth_cap={cap} exceeds {MAX_BISECTIONS}·d = {MAX_BISECTIONS * d} "
                f"({MAX_BISECTIONS} bisections per coordinate)"
            )
        return cap

    def data_depth(self, n: int, d: int, eps) -> int:
        """Depth of the data tree ``run`` needs (1 with the shift: it sorts per seed)."""
        if self.shift:
            return 1
        return max(self.resolved_cap(n, d, float(e)) for e in np.atleast_1d(eps))

    def run(self, keys, eps, tree: DataTree, memory_bytes=batching.DEFAULT_MEMORY_BYTES):
        """Release replicates for every ε in ``eps`` [E] and raw key in ``keys`` [S, 2].

        Returns a ``SyntheticMeasure`` with batch shape [E, S].
        """
        eps = np.asarray(eps, np.float64).ravel()
        keys = jnp.asarray(keys, jnp.uint32)
        n, d = tree.n, tree.d
        caps = np.array([self.resolved_cap(n, d, float(e)) for e in eps], np.int32)
        n_levels = int(caps.max())
        if not self.shift and tree.depth < n_levels:
            raise ValueError(f"the data tree has depth {tree.depth} < depth_cap {n_levels}")
        shifts = shift_vectors(keys, d) if self.shift else np.zeros((keys.shape[0], d), np.float32)
        capacity = self.capacity or self._initial_capacity(tree, shifts, eps, caps)
        seeds = np.arange(keys.shape[0])
        out = self._grid(keys, shifts, seeds, eps, caps, tree, n_levels, capacity, memory_bytes)
        out["capacity"] = np.full(caps.shape + seeds.shape, capacity, np.int32)
        while out["overflow"].any():
            if self.capacity is not None:
                raise ValueError(
                    f"capacity={self.capacity} overflowed (a PrivTree release has more leaves); "
                    "use capacity=None (automatic doubling) or a larger capacity"
                )
            capacity *= 2
            if capacity > MAX_CAPACITY:
                raise ValueError(f"PrivTree needs more than {MAX_CAPACITY} frontier slots")
            bad = np.flatnonzero(out["overflow"].any(axis=0))
            # pad the rerun to a power of two of seeds: few distinct compiled shapes
            padded = np.resize(bad, 1 << (len(bad) - 1).bit_length())
            redo = self._grid(
                keys, shifts, padded, eps, caps, tree, n_levels, capacity, memory_bytes
            )
            redo = {k: v[:, : len(bad)] for k, v in redo.items()}
            redo["capacity"] = np.full(caps.shape + bad.shape, capacity, np.int32)
            out = {k: _pad_atoms(v, capacity) for k, v in out.items()}
            for k, v in redo.items():
                out[k][:, bad] = v
        if self.reconstruction == "lp":
            out["weights"] = self._lp_weights(out)
        return self._assemble(out, eps, caps, shifts)

    def _initial_capacity(self, tree, shifts, eps, caps) -> int:
        """``E + 5√E + 16`` slots, ``E`` the exact expected leaf count (``expected_leaves``).

        With the shift the expectation of the first seed's partition is used (ignoring
        discards, which only remove leaves); other seeds rely on overflow doubling.
        """
        n_levels = int(caps.max())
        ref = tree
        if self.shift:
            ref = DataTree.build(shifted_points(tree.points, shifts[0]), n_levels)
        mean = max(expected_leaves(ref, float(e), int(c)) for e, c in zip(eps, caps))
        need = batching.capacity_bucket(math.ceil(mean + 5.0 * math.sqrt(mean) + 16.0))
        return int(min(need, 2 ** min(n_levels, 40)))

    def _grid(self, keys, shifts, seeds, eps, caps, tree, n_levels, capacity, memory_bytes):
        """Outputs (NumPy, [E, len(seeds), ...]) of the replicates ``seeds`` at ``capacity``."""
        per_rep = _BYTES_PER_SLOT * capacity * (1 + tree.d / 4)
        if self.shift:
            per_rep += 4 * tree.n * (-(-n_levels // 32) + 2 + int(tree.n).bit_length())
        chunk = batching.seeds_per_chunk(per_rep, len(eps), memory_bytes)
        fn = _batched(n_levels, capacity, self.placement == "uniform", self.shift)
        eps_j, caps_j = jnp.asarray(eps, jnp.float32), jnp.asarray(caps)
        parts = []
        for start in range(0, len(seeds), chunk):
            idx = seeds[start : start + chunk]
            if self.shift:
                dev = _stack_trees([
                    DataTree.build(shifted_points(tree.points, shifts[s]), n_levels) for s in idx
                ])
            else:
                dev = tree.device
            parts.append(fn(keys[idx], jnp.asarray(shifts[idx]), dev, eps_j, caps_j))
        return {
            k: np.concatenate([np.asarray(p[k]) for p in parts], axis=1) for k in parts[0]
        }

    def _lp_weights(self, out):
        leaves = out["leaves"]
        if leaves.max() > LP_MAX_LEAVES:
            raise ValueError(
                f"reconstruction='lp' supports at most {LP_MAX_LEAVES} leaves; a replicate has "
                f"{int(leaves.max())} (use reconstruction='topdown' or a smaller εn)"
            )
        weights = np.zeros_like(out["weights"])
        for idx in np.ndindex(leaves.shape):
            size = int(leaves[idx])
            weights[idx][:size] = lp_projection(
                out["noisy_mass"][idx][:size], out["points"][idx][:size]
            )[0]
        return weights

    def _assemble(self, out, eps, caps, shifts) -> SyntheticMeasure:
        grid = out["leaves"].shape
        eps_grid = np.broadcast_to(eps[:, None], grid).astype(np.float32)
        info = {
            "noisy_mass": out["noisy_mass"],
            "cap_hits": out["cap_hits"],
            "depth_cap": np.broadcast_to(caps[:, None], grid).astype(np.int32),
            "capacity": out["capacity"],
        }
        if self.shift:
            info["shift"] = np.broadcast_to(shifts[None], grid + shifts.shape[-1:])
        return SyntheticMeasure(
            points=jnp.asarray(out["points"]),
            weights=jnp.asarray(out["weights"], jnp.float32),
            leaf_depth=jnp.asarray(out["leaf_depth"]),
            size=jnp.asarray(np.sum(out["weights"] > 0, axis=-1), jnp.int32),
            visited=jnp.asarray(out["visited"]),
            leaves=jnp.asarray(out["leaves"]),
            depth=jnp.asarray(out["depth"]),
            budget={
                "epsilon": jnp.asarray(eps_grid),
                "eps_tree": jnp.asarray(eps_grid / 2),
                "eps_leaves": jnp.asarray(eps_grid / 2),
            },
            info={k: jnp.asarray(v) for k, v in info.items()},
            adjacency="add_remove",
            mechanism=self.name,
        )


def _pad_atoms(a: np.ndarray, size: int) -> np.ndarray:
    """Pad per-atom arrays [E, S, M, ...] with zeros to ``M = size``; others unchanged."""
    if a.ndim < 3 or a.shape[2] >= size:
        return a.copy()
    pad = [(0, 0), (0, 0), (0, size - a.shape[2])] + [(0, 0)] * (a.ndim - 3)
    return np.pad(a, pad)
