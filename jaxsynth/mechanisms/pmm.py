"""PMM and Pruned-PMM mechanism configurations.

PMM is the Private Measure Mechanism of He, Vershynin, Zhu, "Algorithmically Effective
Differentially Private Synthetic Data" (COLT 2023), as described in §3 of Zare Moayedi,
Asadi, Yassaee, Aminian, "Geometry-Adaptive Mechanisms for Private Synthetic Data" (arXiv
2609.33363); Pruned-PMM is that paper's §4.1, §A.2–A.3.

A mechanism is a small frozen config.  ``plan(tree, eps)`` turns it into an engine plan
(``jaxsynth.engine.Plan``) for a data set and a list of budgets: the per-ε inverse scales
and depths, the static shapes, the data arrays, the budget accounting.  The kernels are in
``jaxsynth.mechanisms.pmm_kernels``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth import engine
from jaxsynth.core.datatree import MAX_DEPTH, DataTree
from jaxsynth.core.batching import capacity_bucket
from jaxsynth.core.frontier import path_words
from jaxsynth.core.noise import SATURATION
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.core.validate import (
    check_bool,
    check_choice,
    check_fits,
    check_positive_int,
    check_positive_number,
)
from jaxsynth.mechanisms import pmm_kernels, schedules
from jaxsynth.mechanisms.protocol import Mechanism
from jaxsynth.mechanisms.tree_cache import tree_cached

PLACEMENTS = ("center", "uniform")
ENGINES = ("auto", "sparse", "dense")
MAX_DENSE_DEPTH = 30
"""The complete-tree kernel never builds more than 2^31 nodes per replicate."""
ROOT_NOISE_BOUND = 22.2
"""``|λ_∅| ≤ 22.2 σ_0`` for every draw (``noise`` module: ``E ≤ 31 ln 2``, ``h ≤ ln 2``)."""
COMMON_ROOT_SCALE = 10.0
PIECES = {"dense": {"cpu": 512, "default": 8192}, "sparse": {"cpu": 128, "default": 2048}}
"""Nodes per piece: cache-sized on a CPU, wide on accelerators."""


def piece_size(kind: str, piece: int | None = None) -> int:
    """Nodes per piece of a ``kind`` kernel: ``piece`` if given (a plan's option), else
    the platform's (``PIECES``)."""
    if piece is not None:
        return check_positive_int(piece, "piece")
    table = PIECES[kind]
    return table.get(jax.devices()[0].platform, table["default"])


def _check_dense_fits(R: int, d: int, replicate_bytes: float) -> None:
    """Refuse a complete tree too large for this machine before its counts are built.

    One replicate (``replicate_bytes``: its working arrays and atoms) must fit in the
    device's memory (``engine.result_memory``; on a CPU ``validate.memory_limit()``), and
    the data counts of its ``2^{R+1} − 1`` nodes (int64 while built, int32 kept) in
    ``validate.memory_limit()``.  ``memory_bytes`` is checked later (``engine.chunk_size``).
    """
    hint = "use a smaller depth, or PrunedPMM(engine='sparse'), whose cost follows the active nodes"
    what = f"the dense engine's complete tree of depth {R} (2^{R + 1} − 1 nodes, d = {d})"
    device = jax.devices()[0]
    accelerator = device.platform != "cpu"  # on a CPU: validate.memory_limit()
    check_fits(replicate_bytes, "depth", f"one replicate of {what}",
               engine.result_memory(device) if accelerator else None, hint,
               f"the memory of {device.platform} device" if accelerator else None)
    check_fits(12.0 * 2 ** (R + 1), "depth", f"the data counts of {what}", hint=hint)


def root_capacity(n: int, inv_sigma0) -> int:
    """Slots for every root mass ``m ≤ n + 22.2 σ_0`` (``ROOT_NOISE_BOUND``): no overflow.

    Sized for root scales up to ``COMMON_ROOT_SCALE`` at least, so budgets ε ≥ 0.1 share
    one shape (and one compilation).
    """
    sigma0 = max(float(np.max(1.0 / np.asarray(inv_sigma0))), COMMON_ROOT_SCALE)
    largest = n + ROOT_NOISE_BOUND * sigma0 + 1
    if largest >= SATURATION:
        raise ValueError(
            f"root_scale/eps: the synthetic size m = n + LapZ(σ0) can reach {largest:.3g}, "
            "beyond the 2^30 supported; use a smaller root_scale or a larger eps"
        )
    return capacity_bucket(math.ceil(largest))


def sparse_capacity(safe: pmm_kernels.SparseStatic) -> dict:
    """``retry`` and ``shrink`` of a sparse plan whose safe capacity is ``safe.capacity``.

    The frontier buffers are sized by the slots the first chunk needed (twice that, up to
    a power of two), since a shallow or concentrated tree uses far fewer than the root
    mass; a replicate that overflows them is rerun with the safe capacity.
    """
    def shrink(static, needed):
        size = capacity_bucket(2 * needed, per_octave=1, minimum=1024)
        return dataclasses.replace(static, capacity=min(size, safe.capacity))

    return {"retry": lambda static: safe, "shrink": shrink}


def _by_depth(static, key, params, shared):
    return params["depth"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PMMFamily(Mechanism):
    depth: int | None = None
    schedule: str = "packing"
    packing_k: float | None = None
    placement: str = "center"
    adjacency: str = "replacement"
    root_scale: float | None = None

    def __post_init__(self):
        if self.depth is not None:
            check_positive_int(self.depth, "depth")
            if self.depth > MAX_DEPTH:
                raise ValueError(f"depth must be at most {MAX_DEPTH}; got {self.depth}")
        check_choice(self.schedule, "schedule", schedules.SCHEDULES)
        if self.packing_k is not None:
            check_positive_number(self.packing_k, "packing_k")
            if self.schedule != "packing":
                raise ValueError("packing_k is only used with schedule='packing'")
            if self.packing_k < 1:
                raise ValueError(f"packing_k must lie in [1, d]; got {self.packing_k!r}")
        check_choice(self.placement, "placement", PLACEMENTS)
        check_choice(self.adjacency, "adjacency", schedules.ADJACENCIES)
        if self.root_scale is not None:
            check_positive_number(self.root_scale, "root_scale")

    @property
    def is_oracle(self) -> bool:
        """True for the ``profile`` schedule built from the data's true occupancy."""
        return self.schedule == "profile"

    def resolved_depth(self, eps: float, n: int) -> int:
        """The configured depth, or the ambient-depth rule ``⌈log2(εn)⌉`` (arXiv 2609.33363 §7)."""
        return self.depth if self.depth is not None else schedules.default_depth(eps, n)

    def data_depth(self, n: int, d: int, eps) -> int:
        """Depth of the data tree the release needs."""
        return max(self.resolved_depth(float(e), n) for e in np.atleast_1d(eps))

    def _adjacency_label(self) -> str:
        if self.is_oracle:
            return f"{self.adjacency} (ORACLE profile schedule: not differentially private)"
        return self.adjacency

    def _engine(self, depth: int, n: int) -> str:
        return "dense"

    def eps_groups(self, n: int, eps) -> list[np.ndarray]:
        """Indices of ``eps`` that run on the engine each of them gets alone, in groups.

        A plan runs every ε on the engine its deepest ε picks (``PrunedPMM(engine='auto')``:
        dense while ``2^r ≤ 2n``).  Both engines release the same measure, but the level
        statistics sum in each engine's own order, so its float32 value moves in the last bit
        between them; ``simulate`` plans each group apart, so a replicate's numbers do not
        depend on the other budgets of the sweep.
        """
        kinds = np.array([self._engine(self.resolved_depth(float(e), n), n)
                          for e in np.atleast_1d(eps)])
        return [np.flatnonzero(kinds == kind) for kind in dict.fromkeys(kinds.tolist())]

    def plan(self, tree: DataTree, eps, *, piece: int | None = None,
             transcript: bool = False) -> engine.Plan:
        """The engine plan for data ``tree`` and budgets ``eps`` [E].

        Every ε runs in one compiled kernel: depths and scales are traced per ε.
        ``piece``: nodes per piece (``None``: the platform's, ``piece_size``; see
        ``Mechanism.plan``).  ``transcript``: the dense kernel also returns the noisy
        count of every node (``DenseStatic.transcript``), for the white-box privacy audit.
        """
        eps = np.asarray(eps, np.float64).ravel()
        n, d = tree.n, tree.d
        if self.packing_k is not None and self.packing_k > d:
            raise ValueError(f"packing_k={self.packing_k} exceeds the dimension d={d}")
        depths = np.array([self.resolved_depth(float(e), n) for e in eps], np.int32)
        R = int(depths.max())
        if tree.depth < R:
            raise ValueError(f"the data tree has depth {tree.depth}; this release needs {R}")
        inv = np.ones((len(eps), R))
        budget = {k: [] for k in ("epsilon", "eps_levels", "eps_root")}
        inv0 = np.empty(len(eps))
        for i, (e, r) in enumerate(zip(eps, depths)):
            inv[i, :r] = schedules.inverse_scales(
                self.schedule, float(e), int(r), d, self.packing_k, tree.occupancy
            )
            parts, sigma0 = schedules.pmm_budget(float(e), self.adjacency)
            if self.root_scale is not None:
                sigma0 = self.root_scale
                if self.adjacency == "add_remove":  # the root spends 1/σ_0, whatever ε says
                    parts = {**parts, "eps_root": 1.0 / sigma0,
                             "epsilon": parts["eps_levels"] + 1.0 / sigma0}
            inv0[i] = 1.0 / sigma0  # add/remove: the same level scales spend Σν = ε/2
            for k, v in parts.items():
                budget[k].append(v)
        capacity = root_capacity(n, inv0)
        params = {
            "inv_sigma": np.asarray(inv, np.float32),
            "inv_sigma0": np.asarray(inv0, np.float32),
            "depth": depths,
        }
        points = capacity if self.placement == "uniform" else 0
        kind = self._engine(R, n)
        if check_bool(transcript, "transcript") and kind != "dense":
            raise ValueError("transcript: only the dense engine records one; plan "
                             "PrunedPMM(engine='dense') for it")
        if kind == "dense":
            kernel, static, shared, per_replicate = self._dense(tree, R, points, piece, transcript)
        else:
            kernel, static, shared, per_replicate = self._sparse(tree, R, capacity, points, piece)
        atoms = (points or (2**R if kind == "dense" else capacity)) * (d + 2) * 4
        return engine.Plan(
            mechanism=self.name,
            kernel=kernel,
            static=static,
            params=params,
            shared=shared,
            eps=eps,
            budget={k: np.asarray(v, np.float64) for k, v in budget.items()},
            adjacency=self._adjacency_label(),
            bytes_per_replicate=per_replicate + atoms,
            atom_bytes=atoms,
            info_fields=("transcript",) if transcript else (),
            diagnostic_fields=LEVEL_FIELDS,
            order=_by_depth if len(set(depths.tolist())) > 1 else None,
            **(sparse_capacity(static) if kind == "sparse" else {}),
        )

    def _dense(self, tree: DataTree, R: int, points: int, piece, transcript: bool):
        if R > MAX_DENSE_DEPTH:
            raise ValueError(
                f"depth={R}: {self.name} releases on the complete tree of depth {R} "
                f"(2^{R + 1} - 1 nodes; its dense engine goes to depth {MAX_DENSE_DEPTH}), "
                "whatever W1 method measures it; use a smaller depth, or "
                "PrunedPMM(engine='sparse') (the command line: --mechanism pruned-pmm), whose "
                "cost follows the active nodes"
            )
        rule = getattr(self, "consistency", "zero_respecting")
        static = pmm_kernels.DenseStatic(
            max_depth=R, piece=piece_size("dense", piece), rule=rule, dim=tree.d, points=points,
            transcript=transcript,
        )
        per_replicate = 4 * 2 * (max(2**R, 2 * static.piece) + 2 * static.piece) + 4 * 2**R * tree.d
        if transcript:  # every node's noisy count, and its scratch
            per_replicate += 4 * (2 ** (R + 1) + 2 * static.piece)
        _check_dense_fits(R, tree.d, per_replicate + (points or 2**R) * (tree.d + 2) * 4)
        counts = tree_cached(  # padded so every piece of the last level can be sliced
            tree, ("planar_counts", R, static.piece),
            lambda: jnp.asarray(np.pad(tree.planar_counts(R), (0, 2 * static.piece))),
        )
        shared = {"counts": counts}
        return pmm_kernels.dense_kernel, static, shared, per_replicate

    def _sparse(self, tree: DataTree, R: int, capacity: int, points: int, piece):
        P = piece_size("sparse", piece)
        static = pmm_kernels.SparseStatic(
            max_depth=R, capacity=capacity, piece=P, dim=tree.d, points=points
        )
        shared = {"tree": tree.device}
        words = 5 + path_words(R)
        slots = (capacity + capacity // 2 + 2 * P) + 2 * (capacity // 2 + 2 * P)
        per_replicate = 4 * words * slots + 4 * capacity * tree.d
        return pmm_kernels.sparse_kernel, static, shared, per_replicate


@dataclasses.dataclass(frozen=True, kw_only=True)
class PMM(_PMMFamily):
    """Full-tree Private Measure Mechanism (He, Vershynin, Zhu 2023; Zare Moayedi et al. §3).

    Every node of the complete depth-``r`` tree gets ``LapZ(σ_{|θ|})`` noise; noisy counts
    are made consistent top-down by the ``consistency`` rule and leaf masses become
    synthetic points.  Privacy: ``ε = 2 Σ_j 1/σ_j`` under replacement adjacency; under
    add/remove adjacency ``ε = 1/σ_0 + Σ_j 1/σ_j`` (see ``schedules.pmm_budget``).

    Attributes:
      depth: tree depth ``r``; ``None`` uses ``⌈log2(εn)⌉`` per ε.
      schedule: ``"uniform"``, ``"packing"`` (``packing_k``, default ``d``) or the oracle
        ``"profile"`` (uses the data's true occupancy: not private, labelled so).
      consistency: ``"proportional"`` (default) or ``"zero_respecting"``.
      placement: ``"center"`` (one atom per leaf) or ``"uniform"`` (``m_θ`` i.i.d. points).
      adjacency: ``"replacement"`` (default) or ``"add_remove"``.
      root_scale: ``σ_0``; default ``1/ε`` (replacement, free) or ``2/ε`` (add/remove).

    Raises:
      ValueError: naming the attribute, for a depth, schedule, rule, placement, adjacency
        or scale outside its range (at construction); ``js.release`` refuses a depth
        whose tree does not fit in memory.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PMM(depth=6), X, eps=1.0)
      >>> out.points.shape, round(float(out.weights.sum()), 5)
      ((64, 2), 1.0)
      >>> out.accounting["adjacency"], out.accounting["epsilon"]
      ('replacement', 1.0)

    References:
      [HVZ23]; [ZAYA26] §3, §A.8 (schedules), Thm A.3 (privacy).
    """

    consistency: str = "proportional"
    name = "pmm"

    def __post_init__(self):
        super().__post_init__()
        check_choice(self.consistency, "consistency", ("proportional", "zero_respecting"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrunedPMM(_PMMFamily):
    """Pruned-PMM with the zero-respecting rule (Zare Moayedi et al. §4.1, §A.2, Alg. 1–2).

    Only children of active nodes (positive corrected mass) are visited; root mass
    ``max(1, n + LapZ(σ_0))``.  Privacy as PMM: ``ε = 2 Σ_j 1/σ_j`` under replacement
    adjacency (Zare Moayedi et al. Thm A.3: unvisited noise is post-processing of the full tree).

    Attributes (besides those of ``PMM``):
      engine: ``"sparse"`` (the pruned frontier, cost ``O(N_vis)``), ``"dense"`` (the
        complete tree with the zero-respecting rule, for shallow trees) or ``"auto"``
        (dense while ``2^r ≤ 2n``: there the complete tree has no more nodes than the
        pruned tree can, and a complete-tree node is cheaper).  Both release the same
        measure for the same key.

    Raises:
      ValueError: naming the attribute, as for ``PMM``, or an unknown engine.

    Examples:
      >>> import jaxsynth as js
      >>> js.PrunedPMM(engine="sparse").name
      'pruned-pmm'
      >>> js.PrunedPMM(engine="gpu")
      Traceback (most recent call last):
      ...
      ValueError: engine must be one of ...

    References:
      [ZAYA26] §4.1, §A.2–A.3, Algorithms 1–2, Thm A.3.
    """

    engine: str = "auto"
    name = "pruned-pmm"

    def __post_init__(self):
        super().__post_init__()
        check_choice(self.engine, "engine", ENGINES)

    def _engine(self, depth: int, n: int) -> str:
        if self.engine != "auto":
            return self.engine
        return "dense" if 2**depth <= 2 * n and depth <= MAX_DENSE_DEPTH else "sparse"
