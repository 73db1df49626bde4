"""PMM and Pruned-PMM mechanism configurations (SPEC §2–§3; seed 001 §3, §4.1, §A.2–A.3).

A mechanism is a small frozen config.  ``run(keys, eps, tree)`` releases a batch of
replicates [E ε values × S seeds] from a ``DataTree`` that holds every true count of the
data set; only noise varies between replicates.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth import batching, partition, schedules
from jaxsynth._validate import check_positive_int
from jaxsynth.datatree import DataTree
from jaxsynth.measure import SyntheticMeasure
from jaxsynth.noise import MAX_DISCRETE_SCALE
from jaxsynth.pmm_core import root_mass
from jaxsynth.pmm_dense import dense_pmm
from jaxsynth.pmm_sparse import sparse_pruned_pmm

PLACEMENTS = ("center", "uniform")
MAX_DENSE_DEPTH = 30
"""The dense engine never builds more than 2^31 nodes per replicate."""

_DENSE_BYTES_PER_NODE = 96
_SPARSE_BYTES_PER_SLOT = 160


def _check_common(depth, schedule, packing_k, placement, adjacency, root_scale):
    if depth is not None:
        check_positive_int(depth, "depth")
    schedules.check_schedule(schedule, packing_k)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}; got {placement!r}")
    schedules.check_adjacency(adjacency)
    if root_scale is not None and not (np.isfinite(root_scale) and root_scale > 0):
        raise ValueError(f"root_scale must be a positive number; got {root_scale!r}")


@dataclasses.dataclass(frozen=True)
class _PMMFamily:
    depth: int | None = None
    schedule: str = "packing"
    packing_k: float | None = None
    placement: str = "center"
    adjacency: str = "replacement"
    root_scale: float | None = None

    def __post_init__(self):
        _check_common(
            self.depth, self.schedule, self.packing_k, self.placement, self.adjacency,
            self.root_scale,
        )

    @property
    def is_oracle(self) -> bool:
        """True for the ``profile`` schedule built from the data's true occupancy."""
        return self.schedule == "profile"

    def resolved_depth(self, eps: float, n: int) -> int:
        """The configured depth, or the ambient-depth rule ``⌈log2(εn)⌉`` (seed 001 §7)."""
        return self.depth if self.depth is not None else schedules.default_depth(eps, n)

    def data_depth(self, n: int, d: int, eps) -> int:
        """Depth of the data tree the release needs."""
        return max(self.resolved_depth(float(e), n) for e in np.atleast_1d(eps))

    def _scales(self, eps: np.ndarray, depth: int, tree: DataTree):
        """Level scales [E, r], root scales [E] and budget dict of [E] arrays."""
        if self.packing_k is not None and self.packing_k > tree.d:
            raise ValueError(f"packing_k={self.packing_k} exceeds the dimension d={tree.d}")
        eps_j = jnp.asarray(eps, jnp.float32)
        budget, sigma0 = schedules.pmm_budget(eps_j, self.adjacency)
        if self.root_scale is not None:
            sigma0 = jnp.full_like(eps_j, self.root_scale)
        sigmas = jnp.stack([
            schedules.level_scales(
                self.schedule, e, depth, tree.d, self.packing_k, tree.occupancy
            )
            for e in eps_j
        ])
        largest = float(jnp.maximum(jnp.max(sigmas), jnp.max(sigma0)))
        if not largest <= MAX_DISCRETE_SCALE:
            raise ValueError(
                f"eps={eps.min():g} gives a noise scale {largest:.3g} above the supported "
                f"{MAX_DISCRETE_SCALE:.3g} (int32 counts); increase eps or reduce the depth"
            )
        return sigmas, sigma0, budget

    def _adjacency_label(self) -> str:
        if self.is_oracle:
            return f"{self.adjacency} (ORACLE profile schedule: not differentially private)"
        return self.adjacency

    def run(self, keys, eps, tree: DataTree, memory_bytes=batching.DEFAULT_MEMORY_BYTES):
        """Release replicates for every ε in ``eps`` [E] and key in ``keys`` [S, 2].

        Returns a ``SyntheticMeasure`` with batch shape [E, S].
        """
        eps = np.asarray(eps, dtype=np.float64)
        depths = np.array([self.resolved_depth(float(e), tree.n) for e in eps])
        parts = {}
        for depth in np.unique(depths):
            idx = np.flatnonzero(depths == depth)
            parts[int(depth)] = (idx, self._run_depth(keys, eps[idx], int(depth), tree, memory_bytes))
        return _merge_by_eps(parts, self._adjacency_label(), self.name)


def root_capacity(keys, sigma0, n: int) -> int:
    """Slots / points a batch needs: its largest root mass (drawn exactly), bucketed.

    Args:
      keys: [S, 2] raw replicate keys (the keys the release will use for its root draw).
      sigma0: [E] root scales.
      n: number of data points.
    """
    m = jax.vmap(lambda s0: jax.vmap(lambda k: root_mass(k, n, s0))(keys))(sigma0)
    return batching.capacity_bucket(int(jnp.max(m)))


def sparse_chunk(capacity: int, d: int, n_eps: int, memory_bytes: int) -> int:
    """Seeds per jitted chunk of the sparse engine with ``capacity`` slots."""
    per_replicate = _SPARSE_BYTES_PER_SLOT * capacity * (1 + d / 4)
    return batching.seeds_per_chunk(per_replicate, n_eps, memory_bytes)


def _merge_by_eps(parts, adjacency, name) -> SyntheticMeasure:
    """Reassemble per-depth groups into one [E, S] measure, padding atoms with zeros."""
    size = max(out.weights.shape[-1] for _, out in parts.values())
    first = next(iter(parts.values()))[1]
    order = np.concatenate([idx for idx, _ in parts.values()])
    inverse = np.argsort(order)

    def gather(get):
        arrays = [get(out) for _, out in parts.values()]
        return jnp.concatenate(arrays, axis=0)[inverse]

    return SyntheticMeasure(
        points=gather(lambda o: batching.pad_atoms(o.points, size)),
        weights=gather(lambda o: batching.pad_atoms(o.weights, size)),
        leaf_depth=gather(lambda o: batching.pad_atoms(o.leaf_depth, size)),
        size=gather(lambda o: o.size),
        visited=gather(lambda o: o.visited),
        leaves=gather(lambda o: o.leaves),
        depth=gather(lambda o: o.depth),
        budget={k: gather(lambda o, k=k: o.budget[k]) for k in first.budget},
        info={k: gather(lambda o, k=k: o.info[k]) for k in first.info},
        adjacency=adjacency,
        mechanism=name,
    )


def _assemble(outputs, depth, budget, adjacency, name) -> SyntheticMeasure:
    points, weights, m, visited, leaves = outputs
    grid = m.shape
    return SyntheticMeasure(
        points=points,
        weights=weights,
        leaf_depth=jnp.broadcast_to(jnp.asarray(depth, jnp.int32)[..., None], weights.shape),
        size=m,
        visited=visited,
        leaves=leaves,
        depth=jnp.broadcast_to(jnp.asarray(depth, jnp.int32), grid),
        budget={k: jnp.broadcast_to(jnp.asarray(v, jnp.float32)[:, None], grid)
                for k, v in budget.items()},
        info={},
        adjacency=adjacency,
        mechanism=name,
    )


@functools.lru_cache(maxsize=None)
def _dense_kernel(rule: str, uniform: bool, capacity: int):
    return functools.partial(dense_pmm, rule=rule, uniform=uniform, capacity=capacity)


@functools.lru_cache(maxsize=None)
def _sparse_kernel(uniform: bool, capacity: int):
    return functools.partial(sparse_pruned_pmm, uniform=uniform, capacity=capacity)


@functools.lru_cache(maxsize=8)
def _leaf_lower(depth: int, d: int):
    cells = partition.leaf_index_to_cells(np.arange(2**depth), depth, d)
    return jnp.asarray(partition.cell_lower_corner(cells, depth), jnp.float32)


def _check_dense(depth: int, memory_bytes: int) -> None:
    need = _DENSE_BYTES_PER_NODE * 2.0 ** (depth + 1)
    if depth > MAX_DENSE_DEPTH or need > memory_bytes:
        raise ValueError(
            f"depth={depth} needs {need / 2**30:.1f} GiB per replicate for the dense complete "
            f"tree (memory budget {memory_bytes / 2**30:.1f} GiB); use "
            "PrunedPMM(engine='sparse'), whose cost follows the active nodes"
        )


def _run_dense(mech, rule, keys, eps, depth, tree, memory_bytes):
    _check_dense(depth, memory_bytes)
    sigmas, sigma0, budget = mech._scales(eps, depth, tree)
    uniform = mech.placement == "uniform"
    capacity = root_capacity(keys, sigma0, tree.n) if uniform else 0
    counts = tuple(jnp.asarray(c) for c in tree.dense_counts(depth))
    per_rep = _DENSE_BYTES_PER_NODE * 2.0 ** (depth + 1) + 16 * capacity * tree.d
    chunk = batching.seeds_per_chunk(per_rep, len(eps), memory_bytes)
    outputs = batching.run_grid(
        _dense_kernel(rule, uniform, capacity), keys, (sigmas, sigma0),
        (counts, _leaf_lower(depth, tree.d)), chunk,
    )
    return _assemble(outputs, depth, budget, mech._adjacency_label(), mech.name)


@dataclasses.dataclass(frozen=True)
class PMM(_PMMFamily):
    """Full-tree Private Measure Mechanism (He, Vershynin, Zhu 2023; seed 001 §3, SPEC §2).

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
    """

    consistency: str = "proportional"
    name = "pmm"

    def __post_init__(self):
        super().__post_init__()
        if self.consistency not in ("proportional", "zero_respecting"):
            raise ValueError(
                f"consistency must be 'proportional' or 'zero_respecting'; got {self.consistency!r}"
            )

    def _run_depth(self, keys, eps, depth, tree, memory_bytes):
        return _run_dense(self, self.consistency, keys, eps, depth, tree, memory_bytes)


@dataclasses.dataclass(frozen=True)
class PrunedPMM(_PMMFamily):
    """Pruned-PMM with the zero-respecting rule (seed 001 §4.1, §A.2, Algorithms 1–2; SPEC §3).

    Only children of active nodes (positive corrected mass) are visited; root mass
    ``max(1, n + LapZ(σ_0))``.  Privacy as PMM: ``ε = 2 Σ_j 1/σ_j`` under replacement
    adjacency (seed 001 Thm A.3: unvisited noise is post-processing of the full tree).

    Attributes (besides those of ``PMM``):
      engine: ``"sparse"`` (fixed-capacity slots, cost O(m·r)), ``"dense"`` (complete tree
        with pruning masks, for shallow trees) or ``"auto"`` (dense when its ``2^{r+1}``
        nodes cost less than the sparse engine's ``n·r`` slot-steps and ``r ≤ 22``).  Both release the same measure for the
        same key.
    """

    engine: str = "auto"
    name = "pruned-pmm"

    def __post_init__(self):
        super().__post_init__()
        if self.engine not in ("auto", "sparse", "dense"):
            raise ValueError(f"engine must be 'auto', 'sparse' or 'dense'; got {self.engine!r}")

    def _run_depth(self, keys, eps, depth, tree, memory_bytes):
        engine = self.engine
        if engine == "auto":  # dense visits 2^{r+1} nodes, sparse K·r slots with K ≈ n
            engine = "dense" if 2 ** (depth + 1) <= tree.n * depth and depth <= 22 else "sparse"
        if engine == "dense":
            return _run_dense(self, "zero_respecting", keys, eps, depth, tree, memory_bytes)
        sigmas, sigma0, budget = self._scales(eps, depth, tree)
        capacity = root_capacity(keys, sigma0, tree.n)
        chunk = sparse_chunk(capacity, tree.d, len(eps), memory_bytes)
        outputs = batching.run_grid(
            _sparse_kernel(self.placement == "uniform", capacity), keys,
            (sigmas, sigma0), (jnp.int32(depth), tree.device), chunk,
        )
        return _assemble(outputs, depth, budget, self._adjacency_label(), self.name)
