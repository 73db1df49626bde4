"""PrivTree on the cyclic partition with Laplace leaf masses.

The mechanism of Y. He, "Intrinsic-Dimensional Wasserstein Guarantees for Private
Synthetic Measures" ("He" below) §3, §5.2, §6, built on PrivTree (Zhang, Xiao, Xie, "PrivTree: A
Differentially Private Algorithm for Hierarchical Decompositions", SIGMOD 2016).

**Mechanism** (add/remove adjacency, He §2.2; total budget ``ε``):

1. *Tree* (``ε/2``, PrivTree of Zhang–Xiao–Xie 2016, Algorithm 2, fanout ``β = 2``).
   A reached cell ``Q`` at level ``k`` with ``c_Q`` data points has the biased count
   ``b(Q) = max(c_Q − k·δ, θ − δ)`` and is split iff ``b(Q) + Lap(λ) > θ``, with
   ``θ = 0``, ``λ = (2β−1)/((β−1)·ε/2) = 6/ε`` and ``δ = λ·ln β = λ ln 2``.  In He's mass
   units (``p_Q = c_Q/n``) this is ``σ = 6/(εn)``, ``δ = σ ln 2``, ``θ = 0`` (He §5.2,
   the ``ε/2`` parameter choice); counts are used on the device because the test is
   scale-free for ``θ = 0``.  The clamp at ``θ − δ`` is what makes PrivTree
   private; it is kept.  Unsplit cells are leaves.
2. *Leaf masses* (``ε/2``, He Algorithm 2 / Proposition 3.1): every leaf gets
   ``p̃_Q = p_Q + Lap(2/(εn))``; each point lies in exactly one leaf, so the leaf-count
   vector has ℓ1 sensitivity 1 under add/remove adjacency.
3. *Reconstruction* (post-processing) into a probability vector on the leaves:
   ``"topdown"`` (default): noisy subtree sums ``S_v = Σ_{leaves under v} p̃_Q``, root mass
   1, a node's mass split between its children in proportion to ``(S_child)_+`` (evenly
   when both are ``≤ 0``); ``"lp"``: the projection of He's Algorithm 2, exact by
   linear programming (``lp_projection``; host side, at most ``LP_MAX_LEAVES`` leaves).
4. *Representatives*: the cell center (default) or a uniform point of the cell.

**Random shift** (``shift=True``, He §6).  A public ``U`` is drawn from the replicate
key (independent of the data); the data move to ``Ω + U ⊂ [0,2]^d``, partitioned
cyclically.  Equivalently ``y = (x + U)/2`` lies in ``[U/2, (1+U)/2] ⊂ [0,1]^d`` with the
standard partition, which is what is computed.  A reached cell disjoint from that window
is discarded (no noise, never split, no mass, not a leaf); representatives lie in
``Q ∩ (Ω + U)`` and are shifted back by ``−U``, so every representative lies in Ω.
``out.info["shift"]`` holds ``U``.  The Morton order of the shifted data depends on ``U``,
so each replicate codes and sorts its shifted data on the device
(``privtree_kernel.shifted_codes``, ``O(n log n)``) and descends them by binary search;
nothing runs on the host per replicate.

*Choice, documented:* ``U`` is uniform on the midpoints ``(2k+1)·2^-23``,
``k = 0..2^22−1``, of a 2^-22 grid per coordinate rather than on the continuum: then
``U``, ``(1+U)/2`` and every cell boundary of up to ``MAX_BISECTIONS = 22`` bisections
per coordinate are exact float32 numbers, the window boundary never coincides with a
cell boundary, and ``x ↦ (x + U)/2`` assigns cells exactly (the data are truncated to 29
binary digits first, which leaves every cell assignment at ≤ 22 bisections unchanged,
so ``2^30·(x + U)/2`` is an exact uint32).  The law of ``U`` differs from Unif[0,1]^d by at most
2^-23 in every coordinate, far below the cell sizes the analysis uses.

**Depth cap and capacity.**  Ghost subtrees of PrivTree are subcritical (an empty cell
splits with probability ``P(Lap(λ) > δ) = 1/4``), so the tree is finite almost surely
but has no deterministic depth bound, and data with repeated points split deep.  A
public cap stops it: cells at level ``depth_cap`` are leaves; their split test is still
drawn so ``info["cap_hits"]`` counts the splits the cap prevented (a capped tree is the
truncation of the uncapped one: post-processing, no privacy cost).  Default
``depth_cap = d·(⌈log2(εn)⌉ + 1)``, at most ``22·d``: cubes of side ``≤ 1/(2εn)``, whose
diameter is below the ``~1/(εn)`` floor of any ε-DP release.  The node table (every
reached cell) has a fixed capacity ``K`` so it vmaps over seeds and ε.  The expected number of leaves is at most
``6 + εn/(4 ln 2)`` (He §5.2, for the uncapped tree; truncation and the shift's
discarding only remove leaves), and never above ``2^cap``.  On structured data it is
far smaller, so the default capacity is computed from the exact expected leaf count of
the data (``expected_leaves``, unshifted) with margins: twice ``1.25 E + 6√E + 32``
(a tree has fewer than twice as many reached cells as leaves).  Every
replicate detects overflow; in the default ``capacity=None`` mode the
overflowing seeds are rerun with doubled capacity until none overflows (node randomness
depends only on the node's path, so a rerun reproduces the same tree and results never
depend on capacity or batching).  An explicit ``capacity`` that overflows raises
``ValueError``.  Nothing is ever silently truncated.

Node randomness (``jaxsynth.core.keys``): a cell's split test uses the word its parent's
``EXPAND`` block drew for it (the root's ``ROOT`` word), its leaf noise its ``LEAF`` word,
its uniform representative its ``PLACE`` words; the shift the replicate's ``SHIFT`` words.
Every ``Lap`` draw is exact up to a tail truncation at ``22·b`` (``core.noise``).

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
import math

import jax.numpy as jnp
import numpy as np

from jaxsynth import engine
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.frontier import path_words
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.core.validate import check_bool, check_choice, check_positive_int
from jaxsynth.mechanisms.privtree_kernel import FIXED_POINT_BITS, TreeStatic, tree_kernel
from jaxsynth.mechanisms.protocol import Mechanism

MAX_BISECTIONS = 22
"""Bisections per coordinate supported (exact float32 cells, centers and shifts)."""
LP_MAX_LEAVES = 300
"""Largest leaf count for ``reconstruction="lp"`` (the LP has ``L^2 + 3L`` variables)."""
MAX_CAPACITY = 2**26
"""Largest node-table capacity the automatic doubling tries."""
RECONSTRUCTIONS = ("topdown", "lp")
PLACEMENTS = ("center", "uniform")


def privtree_scales(eps):
    """PrivTree scales in count units for a total budget ``eps``: ``(λ, δ, leaf scale)``.

    ``λ = 6/ε`` (``ε/2`` for the tree, β = 2), ``δ = λ ln 2``, leaf noise ``Lap(2/ε)``
    (``ε/2``, sensitivity 1).  Divide by ``n`` for the mass units of He §5.2.
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
    Used to size the node table; ``O(Σ_j O_j)`` work.
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


def fixed_point(tree: DataTree):
    """The data as ``⌊x·2^29⌋`` uint32 [n, d] on the device (cached on the tree)."""
    return tree.cached("fixed_point", lambda: jnp.asarray(
        np.floor(tree.points * 2.0**FIXED_POINT_BITS).astype(np.uint32)
    ))


def tree_plan(name, static: TreeStatic, params: dict, tree: DataTree, eps, budget: dict,
              adjacency: str, retry=None, info=None, finish=None) -> engine.Plan:
    """An engine plan of ``privtree_kernel.tree_kernel`` (PrivTree and the oracles)."""
    d, P, Q, L = tree.d, static.piece, static.capacity, static.max_depth
    if static.shifted:
        shared = {"fixed": fixed_point(tree)}
        per_replicate = 4 * tree.n * (2 * path_words(L) + d)
    else:
        shared = {"tree": tree.device}
        per_replicate = 0
    node_words = 6 + path_words(L) + d
    per_replicate += 4 * (Q + 2 * P) * (2 * node_words + 6 + d) + 4 * Q * (d + 4)
    info_fields = ("cap_hits",) + (("shift",) if static.shifted else ())
    return engine.Plan(
        mechanism=name, kernel=tree_kernel, static=static, params=params, shared=shared,
        eps=np.asarray(eps, np.float64), budget=budget, adjacency=adjacency,
        bytes_per_replicate=per_replicate, atom_bytes=4 * Q * (d + 3), info_fields=info_fields,
        diagnostic_fields=LEVEL_FIELDS,
        atom_fields=("noisy_mass",), info=info or {}, retry=retry, finish=finish,
    )


def lp_projection(noisy_mass, points, bound=None):
    """He's Algorithm 2 projection, exact by linear programming (host, SciPy HiGHS).

    Solves ``min_{p ≥ 0, Σp = 1} max_{|f_Q| ≤ B, |f_Q − f_R| ≤ ‖y_Q − y_R‖_2} Σ_Q (p_Q − p̃_Q) f_Q``
    with ``B = d`` (the class ``F`` of He §2.1: 1-Lipschitz, ``‖f‖_∞ ≤ d``).  The
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



@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivTree(Mechanism):
    """PrivTree + Laplace leaf masses, optionally on a randomly shifted partition.

    He §3, §5.2 (the parameters ``θ = 0``, ``σ = 6/(εn)``, ``δ = σ ln 2``
    for an ``ε/2`` tree) and §6 (shift).  Privacy: ``ε``-DP under add/remove adjacency,
    ``ε/2`` for the tree (PrivTree, Zhang–Xiao–Xie 2016, Corollary 1) and ``ε/2`` for the
    leaf masses (Laplace mechanism), by adaptive composition; reconstruction, placement,
    capping and discarding are post-processing of public or released values.

    Attributes:
      shift: randomly shifted partition of He §6 (name ``"privtree-shift"``).
      depth_cap: public depth cap; ``None`` uses ``default_depth_cap(n, d, ε)``.  At most
        ``22·d``.
      reconstruction: ``"topdown"`` or ``"lp"`` (at most ``LP_MAX_LEAVES`` leaves, SciPy).
      placement: ``"center"`` or ``"uniform"`` (one point uniform in the leaf's box).
      capacity: node-table slots; ``None`` starts from the expected size and doubles for
        overflowing replicates, an int is used as is and overflow raises ``ValueError``.
    """

    shift: bool = False
    depth_cap: int | None = None
    reconstruction: str = "topdown"
    placement: str = "center"
    capacity: int | None = None

    def __post_init__(self):
        check_bool(self.shift, "shift")
        if self.depth_cap is not None:
            check_positive_int(self.depth_cap, "depth_cap")
        if self.capacity is not None:
            check_positive_int(self.capacity, "capacity")
        check_choice(self.reconstruction, "reconstruction", RECONSTRUCTIONS)
        check_choice(self.placement, "placement", PLACEMENTS)

    is_oracle = False

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
        """Depth of the data tree ``plan`` needs (1 with the shift: it sorts per replicate)."""
        if self.shift:
            return 1
        return max(self.resolved_cap(n, d, float(e)) for e in np.atleast_1d(eps))

    def plan(self, tree: DataTree, eps) -> engine.Plan:
        """The engine plan for data ``tree`` and budgets ``eps`` [E]."""
        eps = np.asarray(eps, np.float64).ravel()
        n, d = tree.n, tree.d
        caps = np.array([self.resolved_cap(n, d, float(e)) for e in eps], np.int32)
        L = int(caps.max())
        if not self.shift and tree.depth < L:
            raise ValueError(f"the data tree has depth {tree.depth} < depth_cap {L}")
        lam, delta, leaf_scale = privtree_scales(eps)
        params = {
            "lam": np.asarray(lam, np.float32), "delta": np.asarray(delta, np.float32),
            "leaf_scale": np.asarray(leaf_scale, np.float32),
            "theta": np.zeros(len(eps), np.float32), "cap": caps,
        }
        static = TreeStatic(
            capacity=self.capacity or self._initial_capacity(tree, eps, caps),
            piece=128, max_depth=L, dim=d, rule="privtree",
            shifted=self.shift, uniform=self.placement == "uniform",
        )
        return tree_plan(
            self.name, static, params, tree, eps,
            budget={"epsilon": eps, "eps_tree": eps / 2, "eps_leaves": eps / 2},
            adjacency="add_remove", retry=self._retry,
            info={"depth_cap": caps}, finish=self._lp if self.reconstruction == "lp" else None,
        )

    def _initial_capacity(self, tree: DataTree, eps, caps) -> int:
        """Twice ``1.25 E + 6√E + 32`` reached cells up to a power of two (``E``: exact expected leaves)."""
        if self.shift:  # the unshifted expectation, from a data tree built for it
            tree = tree if tree.depth >= caps.max() else DataTree.build(tree.points, int(caps.max()))
        mean = max(expected_leaves(tree, float(e), int(c)) for e, c in zip(eps, caps))
        need = math.ceil(2 * (1.25 * mean + 6.0 * math.sqrt(mean) + 32.0))
        need = 1 << (need - 1).bit_length()  # powers of two: nearby ε share a compilation
        return int(min(need, 2 ** min(int(caps.max()) + 1, 40)))

    def _retry(self, static: TreeStatic) -> TreeStatic:
        if self.capacity is not None:
            raise ValueError(
                f"capacity={self.capacity} overflowed (a PrivTree release reached more cells); "
                "use capacity=None (automatic doubling) or a larger capacity"
            )
        if 2 * static.capacity > MAX_CAPACITY:
            raise ValueError(f"PrivTree needs more than {MAX_CAPACITY} node-table slots")
        return dataclasses.replace(static, capacity=2 * static.capacity)

    def _lp(self, out):
        """``reconstruction="lp"``: replace the weights by the LP projection (host)."""
        leaves = np.asarray(out.leaves)
        if leaves.max() > LP_MAX_LEAVES:
            raise ValueError(
                f"reconstruction='lp' supports at most {LP_MAX_LEAVES} leaves; a replicate has "
                f"{int(leaves.max())} (use reconstruction='topdown' or a smaller εn)"
            )
        noisy = np.asarray(out.info["noisy_mass"])
        points = np.asarray(out.points)
        weights = np.zeros(np.asarray(out.weights).shape)
        for idx in np.ndindex(leaves.shape):  # the leaves are the first atoms
            size = int(leaves[idx])
            weights[idx][:size] = lp_projection(noisy[idx][:size], points[idx][:size])[0]
        return dataclasses.replace(out, weights=jnp.asarray(weights, jnp.float32))
