"""Adaptive Pruned-PMM: private choice of depth and schedule, then one Pruned-PMM run.

[ZAYA26] §4.2 (Algorithm 3), §5.2, §B.1–B.6.  The budget is split
``ε = ε_sel + ε_main``.  From public quantities only (``n, d, ε_main``) a finite set of
depth–schedule candidates is fixed; the exponential mechanism [MT07] with budget
``ε_sel`` picks one with the data-dependent score ``B_a(X)`` built from the occupancy
profile ``O_j(X)`` and sensitivity ``Δ``; then sparse Pruned-PMM runs once with the
chosen depth and schedule, root scale ``1/ε_main`` and randomness independent of the
selection.  Private under *replacement* adjacency only ([ZAYA26] §B.4).

The selection is sharp only where the scores are separated by many ``Δ``; on data of low
intrinsic dimension it is close to uniform over the candidate depths.  Default split:
``eps_sel = 0.1`` (neither paper fixes one).  The formulas, the sharpness argument and
the choice of the split: the documentation's theory page "Adaptive Pruned-PMM
selection".  Keys: ``docs/references.md``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from jaxsynth import engine
from jaxsynth.core import keys as K
from jaxsynth.core import noise
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.frontier import path_words
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.core.validate import (
    check_choice,
    check_epsilon,
    check_fraction,
    check_positive_number,
)
from jaxsynth.mechanisms import pmm_kernels
from jaxsynth.mechanisms.pmm import (
    PLACEMENTS,
    PrunedPMM,
    piece_size,
    root_capacity,
    sparse_capacity,
)
from jaxsynth.mechanisms.protocol import Mechanism
from jaxsynth.mechanisms.schedules import log2_product

CANDIDATE_SETS = ("standard", "enlarged")
DEPTH_BUCKET = 32
"""Scale vectors are padded to a multiple of 32 levels, so nearby ε share a compilation."""
_FLOOR_SLACK = 1e-9
"""``⌊v⌋`` is taken as ``⌊v + 1e-9⌋`` so float64 rounding never drops an exact integer."""


def _floor(v) -> int:
    return int(np.floor(v + _FLOOR_SLACK))


def max_depth(n: int, d: int, eps_main: float) -> int:
    """``L = ⌊d·log2(ε_main n)⌋`` (Zare Moayedi et al. §B.6); requires ``ε_main n ≥ 2``."""
    if not eps_main * n >= 2:
        raise ValueError(
            f"eps_main * n = {eps_main * n:g} but Adaptive Pruned-PMM needs eps_main * n >= 2 "
            "(arXiv 2609.33363 §B.6): increase eps, n, or lower eps_sel"
        )
    return max(1, _floor(d * log2_product(eps_main, n)))


@dataclasses.dataclass(frozen=True)
class Candidates:
    """A public candidate set for one ``(n, d, ε_main)`` (Zare Moayedi et al. §B.1), float64.

    Attributes:
      s: [A] model packing dimensions ``s``.
      depth: [A] depths ``r_a``.
      kind: [A] ``"standard"`` (``r_s°``) or ``"optimal"`` (``r_s*``, enlarged set only).
      active: [A] bool; False for an ``r_s*`` equal to ``r_s°`` (an exact duplicate,
        kept for static shapes but given probability 0, i.e. dropped).
      sigmas: [A, R] level scales ``σ_1..σ_r``, padded with 1 past ``r_a``
        (``R = max depth``; the padding is never used).
      norm: [A] ``A_{s,r}``.
      bound: [A] public model bound ``B_{s,r}``.
      sensitivity_terms: [A] ``(4C/n)·Σ_{j<r_a} σ_{j+1} 2^{−j/d}``; ``Δ`` is their max.
      n, d, eps_main, C: the public inputs.
    """

    s: np.ndarray
    depth: np.ndarray
    kind: np.ndarray
    active: np.ndarray
    sigmas: np.ndarray
    norm: np.ndarray
    bound: np.ndarray
    sensitivity_terms: np.ndarray
    n: int
    d: int
    eps_main: float
    C: float

    @property
    def sensitivity(self) -> float:
        """``Δ = max_a (4C/n)·Σ_{j<r_a} σ^{(a)}_{j+1} 2^{−j/d}`` over active candidates."""
        return float(np.max(self.sensitivity_terms[self.active]))

    def scores(self, occupancy) -> np.ndarray:
        """Scores ``B_a(X)`` [A] from the occupancy ``O_0, O_1, ...`` (at least ``R`` levels)."""
        occ = np.asarray(occupancy, np.float64)
        R = self.sigmas.shape[1]
        if occ.shape[0] < R:
            raise ValueError(f"occupancy has {occ.shape[0]} levels; the candidates need {R}")
        j = np.arange(R)
        used = j < self.depth[:, None]
        noise = (4.0 * self.C / self.n) * np.sum(
            np.where(used, self.sigmas * occ[:R] * np.exp2(-j / self.d), 0.0), axis=1
        )
        return self.C / (self.eps_main * self.n) + noise + 2.0 * np.exp2(-self.depth / self.d)


def _norms(s: int, d: int, L: int) -> np.ndarray:
    """``A_{s,r} = 2 Σ_{j<r} q_s^j`` for ``r = 1..L``, [L] float64.

    For large ``s`` and deep ``r`` (d in the hundreds) ``A`` exceeds every float and is
    ``+inf``: the bound there is larger than any candidate's, which is all it is used for.
    """
    with np.errstate(over="ignore"):
        return 2.0 * np.cumsum(np.exp2(np.arange(L) * (s - 1) / (2.0 * d)))


def public_bound(s: int, n: int, d: int, eps_main: float, C: float = 1.0) -> np.ndarray:
    """``B_{s,r}`` for ``r = 1..L`` [L] (Zare Moayedi et al. §B.1), float64."""
    L = max_depth(n, d, eps_main)
    a = _norms(s, d, L)
    scale = C / (eps_main * n)
    with np.errstate(over="ignore"):  # A = +inf gives B = +inf (see _norms)
        return scale + 2.0 * scale * a**2 + 2.0 * np.exp2(-np.arange(1, L + 1) / d)


def standard_depth(s: int, n: int, d: int, eps_main: float) -> int:
    """``r_1 = L``; ``r_s = max{1, ⌊(d/s)·log2(1 + ε_main n ((s−1)/d)^2)⌋}``.

    Zare Moayedi et al. §B.6.
    """
    if s == 1:
        return max_depth(n, d, eps_main)
    growth = eps_main * n * ((s - 1) / d) ** 2
    log = np.log2(1.0 + growth) if np.isfinite(growth) else log2_product(
        eps_main, n, ((s - 1) / d) ** 2)  # ε_main n past the largest float: 1 + x is x
    return max(1, _floor(d / s * log))


def candidate_set(n: int, d: int, eps_main: float, kind: str = "standard", C: float = 1.0):
    """The public candidates for ``(n, d, ε_main)`` (Zare Moayedi et al. §B.1, §B.6).

    Args:
      n, d: data size and dimension (public).
      eps_main: the synthesis budget ``ε_main``.
      kind: ``"standard"`` (``s = 1..d`` with ``r_s°``; ``A = d``) or ``"enlarged"``
        (also ``r_s*`` for every ``s``, candidates ``d..2d−1``; ``A = 2d``).
      C: the constant ``C_abs`` of the bound and score.

    Returns:
      ``Candidates``.
    """
    if kind not in CANDIDATE_SETS:
        raise ValueError(f"candidates must be one of {CANDIDATE_SETS}; got {kind!r}")
    L = max_depth(n, d, eps_main)
    dims = list(range(1, d + 1))
    depth = [standard_depth(s, n, d, eps_main) for s in dims]
    kinds = ["standard"] * d
    active = [True] * d
    if kind == "enlarged":
        optimal = [int(np.argmin(public_bound(s, n, d, eps_main, C))) + 1 for s in dims]
        active += [r_opt != r_std for r_opt, r_std in zip(optimal, depth)]
        depth += optimal
        dims += dims
        kinds += ["optimal"] * d
    s = np.array(dims)
    depth = np.array(depth)
    norm = np.array([_norms(sa, d, L)[r - 1] for sa, r in zip(dims, depth)])
    bound = np.array([public_bound(sa, n, d, eps_main, C)[r - 1] for sa, r in zip(dims, depth)])
    j = np.arange(int(depth.max()))
    used = j < depth[:, None]
    q_pow = np.exp2(np.where(used, np.outer(s - 1, j), 0) / (2.0 * d))  # [A, R], finite
    sigmas = np.where(used, norm[:, None] / (eps_main * q_pow), 1.0)
    terms = (4.0 * C / n) * np.sum(np.where(used, sigmas * np.exp2(-j / d), 0.0), axis=1)
    return Candidates(
        s=s, depth=depth, kind=np.array(kinds), active=np.array(active), sigmas=sigmas,
        norm=norm, bound=bound, sensitivity_terms=terms, n=n, d=d, eps_main=eps_main, C=C,
    )


def select_candidate(key, gaps, sensitivity, eps_sel):
    """The exponential-mechanism draw of one replicate (Zare Moayedi et al. §B.2, Algorithm 3).

    Args:
      key: raw replicate key [2]; candidate ``a`` races with its ``SELECT`` word ``a``.
      gaps: [A] score gaps ``B_a − min_b B_b`` (``+inf`` for inactive candidates); the
        mechanism is shift invariant and gaps keep float32 exact where it matters.
      sensitivity: ``Δ``.
      eps_sel: selection budget ``ε_sel``.

    Returns:
      int32 candidate index, ``P(a) ∝ exp(−ε_sel·gap_a/(2Δ))``.
    """
    words, _ = K.draw(key, K.SELECT, 0, jnp.arange(gaps.shape[-1], dtype=jnp.uint32))
    logits = noise.exponential_mechanism_logits(gaps, eps_sel, sensitivity)
    return noise.gumbel_argmax(words, logits)


def _probabilities(gaps, eps_sel: float, sensitivity: float) -> np.ndarray:
    """Exact selection probabilities ``∝ exp(−ε_sel·gap/(2Δ))`` (host float64; ``+inf`` → 0)."""
    gaps = np.asarray(gaps, np.float64)
    if sensitivity == 0:  # the scores cannot differ on neighbours: the first minimiser
        return (np.arange(gaps.size) == np.argmin(gaps)).astype(np.float64)
    logits = -eps_sel * gaps / (2.0 * sensitivity)
    weights = np.exp(logits - np.max(logits))
    return weights / weights.sum()


def main_key(key):
    """The key of the synthesis run, independent of the selection words (``keys.MAIN``)."""
    return jnp.stack(K.draw(key, K.MAIN))


def _selected_depth(static, key, params, shared):
    selected = select_candidate(key, params["gaps"], params["sensitivity"], params["eps_sel"])
    return params["depths"][selected]


def adaptive_kernel(static: pmm_kernels.SparseStatic, key, params, shared, token):
    """One replicate: exponential-mechanism selection, then sparse Pruned-PMM (Algorithm 3).

    Args:
      static: ``pmm_kernels.SparseStatic`` of the synthesis run.
      key: raw replicate key [2].
      params: ``gaps`` [A], ``sensitivity``, ``eps_sel``, ``inv_sigmas`` [A, R] (candidate
        schedules), ``depths`` [A], ``inv_sigma0`` (``ε_main``).
      shared: as ``pmm_kernels.sparse_kernel``.
      token: runtime-true flag.

    Returns:
      ``sparse_kernel``'s outputs with the selected depth, plus ``selected``.
    """
    selected = select_candidate(key, params["gaps"], params["sensitivity"], params["eps_sel"])
    synthesis = {
        "inv_sigma": params["inv_sigmas"][selected],
        "inv_sigma0": params["inv_sigma0"],
        "depth": params["depths"][selected],
    }
    out = pmm_kernels.sparse_kernel(static, main_key(key), synthesis, shared, token)
    return {**out, "selected": selected}


def _stack(selections, R: int) -> dict:
    """Per-ε selection inputs stacked to [E, ...]; schedules as inverse scales padded to ``R``."""
    cands = [sel["candidates"] for sel in selections]
    out = {k: np.stack([sel[k] for sel in selections])
           for k in ("gaps", "sensitivity", "scores", "probabilities")}
    out["inv_sigmas"] = np.stack([
        np.pad(1.0 / c.sigmas, ((0, 0), (0, R - c.sigmas.shape[1])), constant_values=1.0)
        for c in cands
    ])
    out["depths"] = np.stack([c.depth for c in cands])
    out["s"] = np.stack([c.s for c in cands])
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdaptivePrunedPMM(Mechanism):
    """Adaptive Pruned-PMM (Zare Moayedi et al. §4.2, Algorithm 3 then Algorithm 1).

    Splits ``ε`` into ``ε_sel = eps_sel·ε`` for an exponential-mechanism choice among
    public depth–schedule candidates and ``ε_main = (1 − eps_sel)·ε`` for one sparse
    Pruned-PMM run with the chosen depth and schedule (``σ_0 = 1/ε_main``, fresh
    randomness).  ``(ε_sel + ε_main)``-DP under replacement adjacency (Zare Moayedi et al. §B.4).
    Cost per replicate O(K·L) (K ≥ root mass, L the largest candidate depth), never 2^r.
    The default split and what the selection does at the Fig. 2 setting: the theory page
    "Adaptive Pruned-PMM selection".

    Attributes:
      eps_sel: the FRACTION of ε spent on selection, in (0, 1); default 0.1.
      candidates: ``"standard"`` (``d`` candidates) or ``"enlarged"`` (adds the public
        optimising depths ``r_s*``; duplicates of ``r_s°`` get probability 0).
      C: the constant ``C_abs`` of the score (1, since ``E|LapZ(σ)| ≤ σ``).
      placement: ``"center"`` or ``"uniform"`` representatives in the leaf cells.

    Raises:
      ValueError: naming the attribute, for a split outside (0, 1), an unknown candidate
        set or placement, or a non-positive ``C``.

    Examples:
      >>> import jaxsynth as js
      >>> mech = js.AdaptivePrunedPMM(eps_sel=0.2)
      >>> [round(e, 3) for e in mech.split(1.0)]          # (ε_sel, ε_main)
      [0.2, 0.8]
      >>> [int(r) for r in mech.candidate_set(30000, 2, 1.0).depth]   # public candidates
      [29, 12]

    References:
      [ZAYA26] §4.2 (Algorithm 3), §B.1–B.6; [MT07] (the exponential mechanism).
    """

    eps_sel: float = 0.1
    candidates: str = "standard"
    C: float = 1.0
    placement: str = "center"
    name = "adaptive-pruned-pmm"
    is_oracle = False

    def __post_init__(self):
        check_fraction(self.eps_sel, "eps_sel")
        check_choice(self.candidates, "candidates", CANDIDATE_SETS)
        check_positive_number(self.C, "C")
        check_choice(self.placement, "placement", PLACEMENTS)

    def split(self, eps: float) -> tuple[float, float]:
        """``(ε_sel, ε_main)`` for a total ``ε``."""
        return self.eps_sel * eps, (1.0 - self.eps_sel) * eps

    def candidate_set(self, n: int, d: int, eps: float) -> Candidates:
        """The public candidates at total budget ``eps``."""
        return candidate_set(n, d, self.split(float(eps))[1], self.candidates, self.C)

    def data_depth(self, n: int, d: int, eps) -> int:
        """Depth of the data tree the release needs: ``max_ε L(ε_main)``."""
        return max(max_depth(n, d, self.split(float(e))[1]) for e in np.atleast_1d(eps))

    def selection_not_private(self, tree: DataTree, eps: float) -> dict:
        """NOT PRIVATE: the exact scores, sensitivity and selection probabilities on the
        true data ``tree`` at budget ``eps`` (what the exponential mechanism draws from).

        Returns:
          dict with ``"candidates"`` (``Candidates``), ``"scores"`` [A] float64,
          ``"sensitivity"``, ``"gaps"`` [A] (``+inf`` for inactive), ``"probabilities"`` [A].
        """
        eps_sel, _ = self.split(float(eps))
        cands = self.candidate_set(tree.n, tree.d, eps)
        if tree.depth < cands.sigmas.shape[1]:
            raise ValueError(
                f"tree has depth {tree.depth}; Adaptive Pruned-PMM at eps={eps:g} needs "
                f"{cands.sigmas.shape[1]} (use DataTree.build(X, mech.data_depth(n, d, eps)))"
            )
        scores = cands.scores(tree.occupancy)
        gaps = np.where(cands.active, scores - scores[cands.active].min(), np.inf)
        probs = _probabilities(gaps, eps_sel, cands.sensitivity)
        return {
            "candidates": cands, "scores": scores, "sensitivity": cands.sensitivity,
            "gaps": gaps, "probabilities": np.asarray(probs, np.float64),
        }

    def candidate_table(self, n: int, d: int, eps: float, data=None):
        """The candidate set as a table (one row per candidate), for notebooks and reports.

        Args:
          n, d, eps: data size, dimension and total budget.
          data: optional ``X`` [n, d] or a ``DataTree``; adds its ``score`` and
            ``probability`` columns, which are NOT private (``selection_not_private``).

        Returns:
          DataFrame with columns ``s, depth, kind, active, A, public_bound,
          sensitivity_term`` (and ``score, probability``); ``attrs`` hold ``eps_sel,
          eps_main, L, sensitivity``.
        """
        import pandas as pd

        eps = float(check_epsilon(eps).item())
        eps_sel, eps_main = self.split(eps)
        cands = self.candidate_set(n, d, eps)
        table = pd.DataFrame({
            "s": cands.s, "depth": cands.depth, "kind": cands.kind, "active": cands.active,
            "A": cands.norm, "public_bound": cands.bound,
            "sensitivity_term": cands.sensitivity_terms,
        })
        if data is not None:
            tree = data
            if not isinstance(data, DataTree):
                tree = DataTree.build(data, self.data_depth(n, d, eps))
            if (tree.n, tree.d) != (n, d):
                raise ValueError(f"data has shape ({tree.n}, {tree.d}); expected ({n}, {d})")
            sel = self.selection_not_private(tree, eps)
            table["score"] = sel["scores"]
            table["probability"] = sel["probabilities"]
        table.attrs.update(
            eps_sel=eps_sel, eps_main=eps_main, L=max_depth(n, d, eps_main),
            sensitivity=cands.sensitivity,
        )
        return table

    def synthesis_plan(self, tree: DataTree, eps: float, candidate: int, *,
                       piece: int | None = None, transcript: bool = False) -> engine.Plan:
        """The synthesis step alone, as if ``candidate`` had been selected at total budget
        ``eps``: zero-respecting PMM noise with that candidate's depth and schedule at
        ``σ_0 = 1/ε_main`` (Zare Moayedi et al., Algorithm 1), on the dense engine, which
        releases the same measure as the sparse one for the same noise.  The privacy
        auditor reads its noisy counts (``transcript``, ``piece``: as ``PMM.plan``); the
        plan's budget is the whole mechanism's.
        """
        plan = self.plan(tree, np.array([eps]))
        depth = int(plan.params["depths"][0, candidate])
        base = PrunedPMM(depth=depth, engine="dense").plan(
            tree, plan.budget["eps_main"], piece=piece, transcript=transcript)
        params = {"inv_sigma": np.asarray(plan.params["inv_sigmas"][:, candidate, :depth],
                                          np.float32),
                  "inv_sigma0": np.asarray(plan.params["inv_sigma0"], np.float32),
                  "depth": np.asarray(plan.params["depths"][:, candidate], np.int32)}
        return dataclasses.replace(base, mechanism=self.name, params=params, eps=plan.eps,
                                   budget=plan.budget, adjacency=plan.adjacency)

    def plan(self, tree: DataTree, eps, *, piece: int | None = None) -> engine.Plan:
        """The engine plan for data ``tree`` and budgets ``eps`` [E] (``piece``: nodes per
        piece, ``None``: the platform's; see ``Mechanism.plan``).

        Selection inputs (scores, ``Δ``, probabilities) are computed once per ε on the host
        from ``tree.occupancy``; only the selection draw and the Pruned-PMM noise vary per
        replicate.  Replicates are chunked in order of their selected depth
        (``engine.Plan.order``), so a chunk's levels end where its replicates' do, and the
        schedules are padded to a multiple of ``DEPTH_BUCKET`` levels.

        The measure's ``depth``/``leaf_depth`` are the selected depths; ``info`` holds
        ``selected`` [E, S] and the public ``candidate_depths``, ``candidate_s`` [E, S, A];
        ``budget`` holds ``epsilon``, ``eps_sel``, ``eps_main``.  The exact selection
        ``scores``, ``probabilities`` [E, S, A] and ``sensitivity`` [E, S] read the data:
        they are NOT private and go to the plan's ``diagnostics``.
        """
        eps = np.asarray(eps, np.float64).ravel()
        selections = [self.selection_not_private(tree, float(e)) for e in eps]
        R = max(int(sel["candidates"].depth.max()) for sel in selections)
        R = -(-R // DEPTH_BUCKET) * DEPTH_BUCKET
        stacked = _stack(selections, R)
        eps_sel, eps_main = self.split(eps)
        capacity = root_capacity(tree.n, eps_main)
        P = piece_size("sparse", piece)
        points = capacity if self.placement == "uniform" else 0
        static = pmm_kernels.SparseStatic(
            max_depth=R, capacity=capacity, piece=P, dim=tree.d, points=points
        )
        params = {
            "gaps": np.asarray(stacked["gaps"], np.float32),
            "sensitivity": np.asarray(stacked["sensitivity"], np.float32),
            "eps_sel": np.asarray(eps_sel, np.float32),
            "inv_sigmas": np.asarray(stacked["inv_sigmas"], np.float32),
            "depths": np.asarray(stacked["depths"], np.int32),
            "inv_sigma0": np.asarray(eps_main, np.float32),
        }
        words = 5 + path_words(R)
        slots = (capacity + capacity // 2 + 2 * P) + 2 * (capacity // 2 + 2 * P)
        return engine.Plan(
            mechanism=self.name,
            kernel=adaptive_kernel,
            static=static,
            params=params,
            shared={"tree": tree.device},
            eps=eps,
            budget={"epsilon": eps, "eps_sel": eps_sel, "eps_main": eps_main},
            adjacency="replacement",
            bytes_per_replicate=4 * words * slots + 4 * capacity * (2 * tree.d + 2),
            atom_bytes=4 * capacity * (tree.d + 2),
            info_fields=("selected",),
            info={"candidate_depths": stacked["depths"], "candidate_s": stacked["s"]},
            diagnostic_fields=LEVEL_FIELDS,
            diagnostics={"probabilities": stacked["probabilities"], "scores": stacked["scores"],
                         "sensitivity": stacked["sensitivity"]},
            order=_selected_depth,
            **sparse_capacity(static),
        )
