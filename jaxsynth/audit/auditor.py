"""The Monte Carlo privacy auditor: ``audit_mechanism(mech, eps)`` and the audit table.

For a mechanism and worst-case neighbours under the adjacency it claims
(``jaxsynth.audit.neighbours``), the auditor releases many replicates of each data set,
chooses an output event on the first half of the replicates and reports a lower
confidence bound on the privacy loss ``ln P[M(X) ∈ E]/P[M(X') ∈ E]`` from Clopper–Pearson
intervals on the second half, beside the claimed ε.  A correct ε-DP mechanism exceeds its
claim with probability at most ``1 − confidence`` (Bonferroni over its black-box and
white-box findings), so the verdict ``"VIOLATION"`` is a statistically certified bug.
Small trees make the audit strong; the claims hold at every depth.

Each mechanism family registers its audit for its config classes (``_audit``, a
``functools.singledispatch`` registry: a subclass, such as a planted bug, takes its
family's); the audit asks the config for every plan it runs (small pieces, the dense
kernel's transcript: ``Mechanism.plan``'s options) and edits none.

The findings, their events and the choice of trees: the documentation's privacy audit
page ("How the audit works").
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import numpy as np

from jaxsynth import engine
from jaxsynth.audit import events, features, neighbours, whitebox
from jaxsynth.audit.settings import (
    DEFAULT_CONFIDENCE,
    DEFAULT_REPLICATES,
    MECHANISMS,
    MIN_REPLICATES,
)
from jaxsynth.core.batching import capacity_bucket
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.keys import as_raw_key, replicate_keys
from jaxsynth.core.validate import (
    check_epsilon,
    check_fits,
    check_fraction,
    check_positive_int,
)
from jaxsynth.mechanisms import adaptive, pmm_kernels
from jaxsynth.mechanisms.pmm import PMM, PrunedPMM
from jaxsynth.mechanisms.privtree import PrivTree
from jaxsynth.mechanisms.privtree_kernel import privtree_split

PMM_DEPTH = 2
"""Default audit depth of the PMM family (depth 1–3 reveal the noise most directly)."""
PRIVTREE_CAP = 3
"""Default depth cap of PrivTree's black-box runs (a small tree shows its noise directly)."""
PRIVTREE_PATH_LEVELS = 12
"""Depth cap of PrivTree's white-box path audit: the levels past the clamp, where a
missing clamp leaks ``ε/6`` per level, must exist to be audited."""
COMPONENT_DRAWS = 64
"""Draws per replicate of the factorised audits (PrivTree's per-node split tests and leaf
noise, Adaptive's selection), which cost a thousandth of a release ..."""
MAX_COMPONENT_DRAWS = 2**22
"""... up to this many per node and data set."""
PRIVTREE_COUNT = 1
"""Points at ``x0`` in PrivTree's smaller data set."""
ADAPTIVE_DIM = 2
CHUNK = {"dense": 8192, "tree": 2048, "sparse": 1024}
"""Replicates per vmapped chunk of the audit runs (one compilation per kernel)."""
PIECE = {"tree": 8, "sparse": 8}
"""Nodes per piece of the audit runs: small trees need no wide pieces (results do not
depend on the piece size)."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One audit of one mechanism.

    Attributes:
      audit: what was audited (``"black-box: released measure"``, ``"white-box: ..."``).
      claimed: the claimed ε of what was audited (the total, or a part of the accounting).
      lower_bound: the audited lower bound on the privacy loss (confidence ``confidence``).
      confidence: the confidence of this bound alone (Bonferroni share).
      event: the event tested, in words.
      counts: ``(k, n, k', n')``: releases in the event, numerator then denominator
        (empty for the factorised PrivTree audit).
    """

    audit: str
    claimed: float
    lower_bound: float
    confidence: float
    event: str
    counts: tuple = ()

    @property
    def verdict(self) -> str:
        """``"VIOLATION"`` if the lower bound exceeds the claimed ε, else ``"pass"``."""
        return "VIOLATION" if self.lower_bound > self.claimed else "pass"


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The audit of one mechanism at one ε.

    Attributes:
      mechanism: the mechanism's name.
      adjacency: the adjacency it claims (and the neighbours used).
      eps: the claimed total ε.
      confidence: the confidence of the verdict (all findings together).
      replicates: releases per data set and sampling run.
      neighbours: the neighbouring data sets, in words.
      findings: the individual audits.
    """

    mechanism: str
    adjacency: str
    eps: float
    confidence: float
    replicates: int
    neighbours: str
    findings: tuple

    @property
    def verdict(self) -> str:
        """``"VIOLATION"`` if any finding's bound exceeds its claim, else ``"pass"``."""
        return "VIOLATION" if any(f.verdict != "pass" for f in self.findings) else "pass"

    @property
    def lower_bound(self) -> float:
        """The largest lower bound among the findings that audit the total ε."""
        total = [f.lower_bound for f in self.findings if f.claimed == self.eps]
        return max(total) if total else -math.inf

    def rows(self) -> list[dict]:
        """One table row per finding."""
        return [{
            "mechanism": self.mechanism, "adjacency": self.adjacency, "audit": f.audit,
            "claimed eps": f.claimed, "lower bound": f.lower_bound, "verdict": f.verdict,
            "replicates": self.replicates, "event": f.event,
        } for f in self.findings]


def _finding(audit, claimed, outcome: events.Outcome, alpha) -> Finding:
    ev = outcome.evaluation
    return Finding(audit, float(claimed), ev.lower_bound, 1.0 - alpha, outcome.description,
                   (ev.k, ev.n, ev.k_den, ev.n_den))


def _stream(key, stream: int, replicates: int) -> np.ndarray:
    """Independent replicate keys [S, 2] of sampling stream ``stream``."""
    return replicate_keys(jax.random.fold_in(key, stream), replicates)


def _draws(replicates: int) -> int:
    """Draws per node and data set of the factorised audits."""
    return max(replicates, min(COMPONENT_DRAWS * replicates, MAX_COMPONENT_DRAWS))


def _check_memory(replicates: int, columns: int) -> None:
    """Refuse, before any release, an audit whose releases' features would not fit in the
    host's memory: per data set (two), ``replicates`` rows of ``columns`` float64 values
    and a key (``events.audit_features`` reads them as float64)."""
    check_fits(2.0 * replicates * 8 * (columns + 1), "replicates",
               f"the features of {replicates} releases per data set ({columns} per release, "
               "float64, two data sets)", hint="use fewer replicates or a smaller depth")


def _chunk(kind: str, replicates: int) -> int:
    return min(CHUNK[kind], capacity_bucket(replicates, per_octave=1, minimum=1))


def _run(plan, keys, reduce, kind: str) -> dict:
    """Features [S, ...] of ``plan``'s releases for ``keys`` (reduced on the device)."""

    def keep(out):  # the engine's capacity checks read these after the reduction
        return {**reduce(out), **{k: out[k] for k in ("overflow", "needed") if k in out}}

    out = engine.run(plan, keys, atoms=True, chunk=_chunk(kind, len(keys)), reduce=keep,
                     host=True)
    return {k: v[0] for k, v in out.items()}


def _transcript_piece(R: int) -> int:
    """Nodes per piece of a transcript run: the deepest level of a small tree in two."""
    return max(1, 2 ** (R - 1))


def _node_scales(plan, R: int) -> np.ndarray:
    """``1/σ`` of every planar node [2^{R+1} − 1] of a dense PMM-family plan (ε index 0)."""
    level = np.floor(np.log2(np.arange(1, 2 ** (R + 1)))).astype(int)
    inv = np.concatenate([[plan.params["inv_sigma0"][0]], plan.params["inv_sigma"][0]])
    return np.asarray(inv, np.float64)[level]


def _node_counts(trees, R: int):
    """Planar counts [2^{R+1} − 1] of the two data sets, and the nodes where they differ."""
    cx, cy = (np.asarray(t.planar_counts(R), np.int64) for t in trees)
    return cx, cy, np.flatnonzero(cx != cy)


def _transcript_finding(name, claimed, plans, counts, R, out_x, out_y, alpha):
    """White-box finding from the transcripts of a dense plan on the two data sets
    (``counts``: ``_node_counts``)."""
    cx, cy, changed = counts
    level = np.floor(np.log2(changed + 1)).astype(int)
    labels = [f"noisy count of node {i} (level {lev})" for i, lev in zip(changed, level)]
    nu = _node_scales(plans[0], R)[changed]
    model = whitebox.claimed_llr(cx[changed], cy[changed], nu)
    outcome = events.audit_features(out_x["transcript"], out_y["transcript"], alpha, labels,
                                    model_scores=model,
                                    model_names=("log-likelihood ratio of the claimed noise",))
    return _finding(name, claimed, outcome, alpha)


@functools.singledispatch
def _audit(mech, eps, replicates, key, confidence, depth):
    """``(plan, neighbours in words, findings)``: the audit registered for ``mech``'s
    config class (or a base class: ``functools.singledispatch``), one per family."""
    raise ValueError(f"mech must be a PMM, PrunedPMM, AdaptivePrunedPMM or PrivTree config "
                     f"(or a name); got {mech!r}")


@_audit.register(PMM)
@_audit.register(PrunedPMM)
def _audit_pmm_family(mech, eps, replicates, key, confidence, depth):
    alpha = (1.0 - confidence) / 2  # two findings
    R = PMM_DEPTH if depth is None else depth
    small = dataclasses.replace(mech, depth=R)
    probe = small.plan(DataTree.build(neighbours.replacement(1).X, R), np.array([eps]))
    inv = np.asarray(probe.params["inv_sigma"][0, :R], np.float64)
    k = math.ceil(3.0 / max(float(inv.min()), 1e-9)) + 1
    if small.adjacency == "replacement":
        pair = neighbours.replacement(k)
    else:
        pair = neighbours.add_remove(k, k, "x0")
    trees = [DataTree.build(Z, R) for Z in (pair.X, pair.Y)]
    plans = [small.plan(t, np.array([eps])) for t in trees]
    claimed = float(plans[0].budget["epsilon"][0])
    bb_reduce, names = features.measure_reducer(R, 1, np.stack(neighbours.corners(1)), True)
    dense = plans[0].kernel is pmm_kernels.dense_kernel
    # the transcript comes from the dense engine (the same law as the sparse one's)
    recorder = small if dense else dataclasses.replace(small, engine="dense")
    wb_plans = [recorder.plan(t, np.array([eps]), transcript=True,
                              piece=_transcript_piece(R)) for t in trees]
    counts = _node_counts(trees, R)
    _check_memory(replicates, len(names) + len(counts[2]))
    tr_reduce = features.transcript_reducer(counts[2])
    outs = []
    for i, (t, wb) in enumerate(zip(trees, wb_plans)):
        keys = _stream(key, i, replicates)
        if dense:
            outs.append(_run(wb, keys, features.combine(bb_reduce, tr_reduce), "dense"))
        else:
            o = _run(small.plan(t, np.array([eps]), piece=PIECE["sparse"]), keys, bb_reduce,
                     "sparse")
            o.update(_run(wb, _stream(key, 2 + i, replicates), tr_reduce, "dense"))
            outs.append(o)
    black = events.audit_features(outs[0]["features"], outs[1]["features"], alpha, names)
    white = _transcript_finding("white-box: noisy counts (dense kernel)", claimed, wb_plans,
                                counts, R, outs[0], outs[1], alpha)
    findings = (_finding("black-box: released measure", claimed, black, alpha), white)
    return plans[0], f"depth {R}; " + pair.description, findings


@_audit.register(PrivTree)
def _audit_privtree(mech, eps, replicates, key, confidence, depth):
    alpha = (1.0 - confidence) / 2  # two findings
    cap = PRIVTREE_CAP if depth is None else depth
    small = dataclasses.replace(mech, depth_cap=cap)
    pair = neighbours.add_remove(PRIVTREE_COUNT, 0, "x1")
    plans = [small.plan(DataTree.build(Z, small.data_depth(Z.shape[0], 1, eps)), np.array([eps]),
                        piece=PIECE["tree"]) for Z in (pair.X, pair.Y)]
    claimed = float(plans[0].budget["epsilon"][0])
    reduce, names = features.measure_reducer(min(cap, 4), 1, np.stack(neighbours.corners(1)),
                                             False)
    _check_memory(replicates, len(names))
    outs = [_run(p, _stream(key, i, replicates), reduce, "tree") for i, p in enumerate(plans)]
    black = events.audit_features(outs[0]["features"], outs[1]["features"], alpha, names)
    params = plans[0].params
    levels = max(cap, PRIVTREE_PATH_LEVELS)
    path = whitebox.privtree_path(
        plans[0].static.split or privtree_split, float(params["lam"][0]),
        float(params["delta"][0]), float(params["leaf_scale"][0]), PRIVTREE_COUNT, levels,
        _draws(replicates), jax.random.fold_in(key, 7), alpha,
    )
    white = Finding("white-box: split tests and leaf noise on the path", claimed,
                    path.lower_bound, 1.0 - alpha, path.description)
    findings = (_finding("black-box: released measure", claimed, black, alpha), white)
    described = (f"black-box: depth cap {cap}, {pair.description}; white-box: depth cap "
                 f"{levels}, {PRIVTREE_COUNT} vs {PRIVTREE_COUNT + 1} points at x0")
    return plans[0], described, findings


def _adaptive_k(mech, eps: float, d: int) -> int:
    """Points per corner so the shallowest candidate's counts sit 3 scales above 0."""
    k = 1
    for _ in range(20):
        cands = mech.candidate_set(2 * k + 1, d, eps)
        a = int(np.argmin(cands.depth))
        need = math.ceil(3.0 * float(np.max(cands.sigmas[a, : cands.depth[a]]))) + 1
        if need <= k:
            return k
        k = need
    return k


@_audit.register(adaptive.AdaptivePrunedPMM)
def _audit_adaptive(mech, eps, replicates, key, confidence, depth):
    if depth is not None:
        raise ValueError("depth does not apply to adaptive-pruned-pmm, which selects its own")
    alpha = (1.0 - confidence) / 3  # three findings
    d = ADAPTIVE_DIM
    k = _adaptive_k(mech, eps, d)
    pair = neighbours.replacement(k, d)
    n = pair.X.shape[0]
    trees = [DataTree.build(Z, mech.data_depth(n, d, eps)) for Z in (pair.X, pair.Y)]
    plans = [mech.plan(t, np.array([eps])) for t in trees]
    plan = plans[0]
    claimed = float(plan.budget["epsilon"][0])
    findings = []
    # black-box: the adaptive kernel itself
    reduce, names = features.measure_reducer(4, d, np.stack(neighbours.corners(d)), True)
    _check_memory(replicates, len(names))
    outs = [_run(mech.plan(t, np.array([eps]), piece=PIECE["sparse"]),
                 _stream(key, i, replicates), reduce, "sparse") for i, t in enumerate(trees)]
    black = events.audit_features(outs[0]["features"], outs[1]["features"], alpha, names)
    findings.append(_finding("black-box: released measure", claimed, black, alpha))
    # white-box: the selection, on score neighbours at the sensitivity Δ
    # (Zare Moayedi et al., arXiv 2609.33363, §B.2)
    eps_sel, eps_main = float(plan.budget["eps_sel"][0]), float(plan.budget["eps_main"][0])
    depths = np.asarray(plan.params["depths"][0])
    spec_delta = whitebox.spec_sensitivity(plan.info["candidate_s"][0], depths, n, d, eps_main,
                                           mech.C)
    sel = whitebox.selection(
        adaptive.select_candidate, float(plan.params["sensitivity"][0]),
        float(plan.params["eps_sel"][0]), spec_delta, depths.size, _draws(replicates),
        jax.random.fold_in(key, 5), alpha,
    )
    findings.append(_finding("white-box: selection (score neighbours)", eps_sel, sel, alpha))
    # white-box: the synthesis transcript with the shallowest candidate's schedule
    a = int(np.argmin(depths))
    R = int(depths[a])
    dense = [mech.synthesis_plan(t, eps, a, transcript=True, piece=_transcript_piece(R))
             for t in trees]
    counts = _node_counts(trees, R)
    tr_reduce = features.transcript_reducer(counts[2])
    outs = [_run(p, _stream(key, 3 + i, replicates), tr_reduce, "dense")
            for i, p in enumerate(dense)]
    white = _transcript_finding(f"white-box: synthesis noisy counts (candidate depth {R})",
                                eps_main, dense, counts, R, outs[0], outs[1], alpha)
    findings.append(white)
    return plan, pair.description, tuple(findings)


def _resolve(mech):
    if isinstance(mech, str):
        from jaxsynth.mechanisms.registry import mechanism

        return mechanism(mech)
    return mech


def audit_mechanism(mech, eps=1.0, *, replicates: int = DEFAULT_REPLICATES,
          confidence: float = DEFAULT_CONFIDENCE, key=0, depth: int | None = None
          ) -> AuditResult:
    """Monte Carlo privacy audit of ``mech`` at budget ``eps`` (``js.audit_mechanism``).

    Args:
      mech: a mechanism config (``PMM``, ``PrunedPMM``, ``AdaptivePrunedPMM``,
        ``PrivTree``, or a subclass) or its command-line name.
      eps: the claimed total budget ε.
      replicates: releases per data set and sampling run (at least 200; 10^6 by default).
      confidence: confidence of the verdict, in (0, 1); split among the findings.
      key: int seed or jax key of the audit's randomness.
      depth: tree depth of the PMM family (default 2) or depth cap of PrivTree's
        black-box runs (default 3); Adaptive Pruned-PMM selects its own depth.

    Returns:
      ``AuditResult``: claimed ε, the lower bound of every finding, the verdict.

    Raises:
      ValueError: naming the argument for bad input.

    Examples:
      The fewest replicates, to show the result; a bound worth reading needs the
      default 10^6 (``jaxsynth audit``):

      >>> import jaxsynth as js
      >>> result = js.audit_mechanism(js.PMM(), eps=1.0, replicates=200)
      >>> result.mechanism, result.adjacency, result.verdict
      ('pmm', 'replacement', 'pass')
      >>> [f.audit for f in result.findings]
      ['black-box: released measure', 'white-box: noisy counts (dense kernel)']

    References:
      [CP34] (the confidence bounds); the privacy proofs audited: [ZAYA26] Thm A.3,
      §B.4; [ZXX16]; [He] §3.
    """
    mech = _resolve(mech)
    eps = check_epsilon(eps)
    if eps.size != 1:
        raise ValueError("eps must be a single number for audit")
    eps = float(eps[0])
    replicates = check_positive_int(replicates, "replicates", minimum=MIN_REPLICATES)
    confidence = check_fraction(confidence, "confidence")
    raw = as_raw_key(key)
    if depth is not None:
        depth = check_positive_int(depth, "depth")
    plan, described, findings = _audit(mech, eps, replicates, raw, confidence, depth)
    return AuditResult(
        mechanism=plan.mechanism, adjacency=plan.adjacency, eps=float(plan.budget["epsilon"][0]),
        confidence=confidence, replicates=replicates, neighbours=described,
        findings=tuple(findings),
    )


def audit_all(eps=1.0, *, replicates: int = DEFAULT_REPLICATES,
              confidence: float = DEFAULT_CONFIDENCE, key=0, mechanisms=MECHANISMS) -> list:
    """``audit_mechanism`` of every mechanism of ``mechanisms`` (names or configs) at ``eps``."""
    return [audit_mechanism(m, eps, replicates=replicates, confidence=confidence, key=key)
            for m in mechanisms]


def audit_table(results) -> str:
    """The markdown audit table of ``AuditResult``s: one row per finding."""
    lines = [
        "| mechanism | adjacency | audit | claimed ε | audited lower bound | verdict |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in results:
        for f in r.findings:
            bound = "−∞" if f.lower_bound == -math.inf else f"{f.lower_bound:.3f}"
            lines.append(f"| {r.mechanism} | {r.adjacency} | {f.audit} | {f.claimed:.3g} | "
                         f"{bound} | {f.verdict} |")
    if results:
        r = results[0]
        lines.append("")
        lines.append(f"Lower bounds at confidence {r.confidence:g} per mechanism (Bonferroni over "
                     f"its audits), {r.replicates:,} releases per data set and run.")
    return "\n".join(lines)
