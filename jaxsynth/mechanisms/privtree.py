"""PrivTree on the cyclic partition with Laplace leaf masses, plain or randomly shifted.

The mechanism of [He] §3, §5.2, §6, built on PrivTree [ZXX16] (Algorithm 2, fanout 2).
Under add/remove adjacency, ``ε/2`` grows the tree (a cell at level ``k`` with ``c``
points splits iff ``max(c − kδ, −δ) + Lap(6/ε) > 0``, ``δ = (6/ε) ln 2``), ``ε/2`` adds
``Lap(2/(εn))`` to every leaf mass, and reconstruction (``"topdown"`` or ``"lp"``) is
post-processing.  ``shift=True`` moves the data by a public uniform ``U`` drawn from the
replicate key ([He] §6), on a 2^-22 grid so that every cell boundary stays exact in
float32.

A public depth cap (default ``d·(⌈log2(εn)⌉ + 1)``, at most ``22·d`` and the deepest
data tree, 4096 levels) makes the tree finite; the node table's capacity is fitted to
the expected leaf count, and a replicate that overflows is rerun with doubled capacity
(same result: node randomness depends only on the node).  ``info`` holds ``noisy_mass``,
``cap_hits``, ``depth_cap`` and, with the shift, ``shift``.  ``cap_hits`` counts the
capped cells whose split test passed: a function of the uncapped PrivTree's output, so
post-processing.  The capacity is fitted to the data without noise and is *not* private,
so the released arrays are cut to the power of two holding the batch's most leaves
(``engine.Plan.fitted_width``): their width is a function of the release (an explicit,
public ``capacity`` is kept as the width).

The derivation, the shift's grid, the capacity bound and the node randomness: the
documentation's theory page "PrivTree and the shift".  Keys: ``docs/references.md``.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from jaxsynth import engine
from jaxsynth.core.batching import capacity_bucket
from jaxsynth.core.datatree import MAX_DEPTH, DataTree
from jaxsynth.core.frontier import path_words
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.core.validate import check_bool, check_choice, check_positive_int
from jaxsynth.mechanisms.privtree_kernel import FIXED_POINT_BITS, TreeStatic, tree_kernel
from jaxsynth.mechanisms.protocol import Mechanism
from jaxsynth.mechanisms.tree_cache import tree_cached

MAX_BISECTIONS = 22
"""Bisections per coordinate supported (exact float32 cells, centers and shifts)."""
LP_MAX_LEAVES = 300
"""Largest leaf count for ``reconstruction="lp"`` (the LP has ``L^2 + 3L`` variables)."""
MAX_CAPACITY = 2**26
"""Largest node-table capacity the automatic doubling tries."""
PIECE = 128
"""Nodes per piece of the tree kernel."""
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
    """``d·(⌈log2(εn)⌉ + 1)`` (at least ``d``), capped at ``MAX_BISECTIONS·d`` and at the
    deepest data tree, ``⌊MAX_DEPTH/d⌋·d`` (a default that always runs, d up to 1024)."""
    reach = min(max(eps * n, 1.0), 2.0**MAX_BISECTIONS)  # beyond, the cap is reached
    k = max(0, math.ceil(math.log2(reach) - 1e-12)) + 1
    return min(MAX_BISECTIONS, k, MAX_DEPTH // d) * d


def fixed_point(tree: DataTree):
    """The data as ``⌊x·2^29⌋`` uint32 [n, d] on the device, once per tree (``tree_cache``)."""
    return tree_cached(tree, ("fixed_point",), lambda: jnp.asarray(
        np.floor(tree.points * 2.0**FIXED_POINT_BITS).astype(np.uint32)
    ))


def tree_plan(name, static: TreeStatic, params: dict, tree: DataTree, eps, budget: dict,
              adjacency: str, retry=None, info=None, finish=None,
              fitted_width: bool = False) -> engine.Plan:
    """An engine plan of ``privtree_kernel.tree_kernel`` (PrivTree and the oracles);
    ``fitted_width``: ``static.capacity`` was fitted to the data (``engine.Plan``)."""
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
        fitted_width=fitted_width,
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
        ``22·d`` and ``MAX_DEPTH`` (4096, the deepest data tree).
      reconstruction: ``"topdown"`` or ``"lp"`` (at most ``LP_MAX_LEAVES`` leaves, SciPy).
      placement: ``"center"`` or ``"uniform"`` (one point uniform in the leaf's box).
      capacity: node-table slots; ``None`` starts from the expected size and doubles for
        overflowing replicates, an int is used as is and overflow raises ``ValueError``.

    Raises:
      ValueError: naming the attribute, for a bad cap, capacity, reconstruction or
        placement; at release, when an explicit ``capacity`` overflows.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PrivTree(), X, eps=1.0)
      >>> out.accounting
      {'adjacency': 'add_remove', 'eps_leaves': 0.5, 'eps_tree': 0.5, 'epsilon': 1.0}
      >>> round(float(out.weights.sum()), 5)
      1.0

    References:
      [He] §3, §5.2, §6; [ZXX16] Algorithm 2, Corollary 1.
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
        if cap > MAX_DEPTH:
            raise ValueError(f"depth_cap={cap} exceeds the deepest data tree, {MAX_DEPTH} "
                             f"levels (the default cap in d = {d} is at most "
                             f"{MAX_DEPTH // d * d})")
        return cap

    def data_depth(self, n: int, d: int, eps) -> int:
        """Depth of the data tree ``plan`` needs (1 with the shift: it sorts per replicate)."""
        if self.shift:
            return 1
        return max(self.resolved_cap(n, d, float(e)) for e in np.atleast_1d(eps))

    def plan(self, tree: DataTree, eps, *, piece: int | None = None) -> engine.Plan:
        """The engine plan for data ``tree`` and budgets ``eps`` [E]; ``piece``: nodes per
        piece (``None``: ``PIECE``; see ``Mechanism.plan``)."""
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
            piece=PIECE if piece is None else check_positive_int(piece, "piece"),
            max_depth=L, dim=d, rule="privtree",
            shifted=self.shift, uniform=self.placement == "uniform",
        )
        return tree_plan(
            self.name, static, params, tree, eps,
            budget={"epsilon": eps, "eps_tree": eps / 2, "eps_leaves": eps / 2},
            adjacency="add_remove", retry=self._retry,
            info={"depth_cap": caps}, finish=self._lp if self.reconstruction == "lp" else None,
            fitted_width=self.capacity is None,
        )

    def _initial_capacity(self, tree: DataTree, eps, caps) -> int:
        """Twice ``1.25 E + 6√E + 32`` reached cells up to a power of two (``E``: exact expected leaves)."""
        if self.shift:  # the unshifted expectation, from a data tree built for it
            tree = tree if tree.depth >= caps.max() else DataTree.build(tree.points, int(caps.max()))
        mean = max(expected_leaves(tree, float(e), int(c)) for e, c in zip(eps, caps))
        need = math.ceil(2 * (1.25 * mean + 6.0 * math.sqrt(mean) + 32.0))
        need = capacity_bucket(need, per_octave=1, minimum=1)  # nearby ε share a compilation
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
