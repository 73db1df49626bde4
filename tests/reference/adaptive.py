"""Per-node reference of Adaptive Pruned-PMM (arXiv 2609.33363 §4.2, §B.1–B.6).

The paper is Zare Moayedi, Asadi, Yassaee, Aminian, "Geometry-Adaptive Mechanisms for
Private Synthetic Data".

Candidates, schedules, scores and the sensitivity from the paper's formulas (float64, the
occupancy profile counted by brute force); the exponential mechanism as an exponential
race with the ``SELECT`` words (``P(a) ∝ exp(logit_a)`` by
``argmin_a ln E_a − logit_a``); then Pruned-PMM (``pmm.release``) on the key made of the
two ``MAIN`` words.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tests.reference import pmm, rng, tree, variates


@dataclasses.dataclass
class Candidates:
    s: list
    depth: list
    inv_sigma: list  # float64 [r_a] per candidate
    scores: np.ndarray
    sensitivity: float
    eps_sel: float
    eps_main: float


def candidates(counts: tree.Counts, eps: float, frac_sel: float = 0.1, C: float = 1.0):
    """The standard candidate set ``s = 1..d`` with scores and sensitivity."""
    n, d = counts.n, counts.d
    eps_sel, eps_main = frac_sel * eps, (1.0 - frac_sel) * eps
    L = math.floor(d * math.log2(eps_main * n))
    depths, invs, scores, terms = [], [], [], []
    for s in range(1, d + 1):
        if s == 1:
            r = L
        else:
            r = max(1, math.floor(d / s * math.log2(1 + eps_main * n * ((s - 1) / d) ** 2)))
        q = 2.0 ** ((s - 1) / (2.0 * d))
        A = 2.0 * math.fsum(q**j for j in range(r))
        sigma = [A / (eps_main * q**j) for j in range(r)]  # σ_{j+1}, j = 0..r−1
        noise_term = (4.0 * C / n) * math.fsum(
            sigma[j] * counts.occupancy(j) * 2.0 ** (-j / d) for j in range(r)
        )
        scores.append(C / (eps_main * n) + noise_term + 2.0 * 2.0 ** (-r / d))
        terms.append((4.0 * C / n) * math.fsum(sigma[j] * 2.0 ** (-j / d) for j in range(r)))
        depths.append(r)
        invs.append(np.array([1.0 / x for x in sigma]))
    return Candidates(s=list(range(1, d + 1)), depth=depths, inv_sigma=invs,
                      scores=np.array(scores), sensitivity=max(terms),
                      eps_sel=eps_sel, eps_main=eps_main)


def select(key, cands: Candidates) -> tuple:
    """Exponential-mechanism choice by the race of the ``SELECT`` words.

    Returns (index, margin): ``margin`` is the gap between the two smallest race times
    (float64), to tell a genuine disagreement from a float32 tie.
    """
    A = len(cands.depth)
    words, _ = rng.draw(key, rng.SELECT, 0, np.arange(A))
    E = variates.exponential(words, 31).astype(np.float64)
    gaps = np.float32(cands.scores - cands.scores.min())
    # logits as float32, −ε_sel·gap/(2Δ)
    logits = (-np.float32(cands.eps_sel) * gaps) / (np.float32(2.0) * np.float32(cands.sensitivity))
    race = np.log(E) - logits.astype(np.float64)
    order = np.argsort(race)
    return int(order[0]), float(race[order[1]] - race[order[0]])


def release(key, counts: tree.Counts, eps: float, frac_sel: float = 0.1):
    """(selected index, candidates, Pruned-PMM ``pmm.Result`` of the synthesis run)."""
    cands = candidates(counts, eps, frac_sel)
    a, margin = select(key, cands)
    main = tuple(int(w) for w in rng.draw(key, rng.MAIN, 0, 0))
    res = pmm.release(main, counts, cands.depth[a], cands.inv_sigma[a].astype(np.float32),
                      np.float32(cands.eps_main), "zero_respecting", pruned=True)
    return a, margin, cands, res
