"""White-box audits: the transcripts the privacy proofs cover.

A black-box audit sees the noise only through consistency and reconstruction; the
privacy proofs ([ZAYA26] Thm A.3, §B.4; [ZXX16]) are about transcripts of independent
noisy quantities, and auditing those makes a bug show at the claimed ε:

* PMM family: the noisy counts of every node, read from the dense kernel, with the exact
  privacy loss of a transcript under the claimed noise (``claimed_llr``);
* PrivTree: the split tests and leaf noise along the changed point's path, composed from
  per-node Clopper–Pearson bounds as the proof composes them (``privtree_path``);
* Adaptive Pruned-PMM: the selection on worst-case score neighbours at the sensitivity
  recomputed from the formula (``selection``).

Why each transcript, and why data neighbours cannot see a halved sensitivity: the
documentation's privacy audit page ("The white-box audits").  Keys: ``docs/references.md``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.audit import events
from jaxsynth.audit.bounds import log_ratio_lower
from jaxsynth.core import noise
from jaxsynth.core.keys import replicate_keys


def clamped_log_pmf(t, c, inv_sigma):
    """``ln P[(c + Z)_+ = t]`` for ``Z ~ LapZ(σ)``, ``ν = 1/σ`` (host float64).

    ``P[t] = (1−q)/(1+q)·q^{|t−c|}`` for ``t > 0`` and ``P[0] = q^c/(1+q)``, ``q = e^{−ν}``.
    """
    t, c = np.asarray(t, np.float64), np.asarray(c, np.float64)
    nu = np.asarray(inv_sigma, np.float64)
    log1pq = np.log1p(np.exp(-nu))
    positive = np.log(-np.expm1(-nu)) - log1pq - nu * np.abs(t - c)
    return np.where(t > 0, positive, -nu * c - log1pq)


def claimed_llr(counts_x, counts_y, inv_sigma):
    """Model score: ``t [N, F] -> [1, N]``, the exact log-likelihood ratio of transcript
    entries under the claimed discrete-Laplace noise (counts and scales per entry)."""
    cx, cy = np.asarray(counts_x), np.asarray(counts_y)
    nu = np.asarray(inv_sigma, np.float64)

    def score(t):
        return np.sum(clamped_log_pmf(t, cx, nu) - clamped_log_pmf(t, cy, nu), axis=1)[None]

    return score


def _bits(key, shape) -> jax.Array:
    return jax.random.bits(jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32)), shape,
                           jnp.uint32)


@dataclasses.dataclass(frozen=True)
class PathOutcome:
    """The PrivTree path event chosen on the selection half and bounded on the test half.

    Attributes:
      lower_bound: the test-half bound (sum of the factors' bounds).
      selection_bound: the bound the event reached on the selection half.
      description: the event in words.
      factors: per-factor test-half bounds (levels, then the leaf).
    """

    lower_bound: float
    selection_bound: float
    description: str
    factors: tuple


def _split_rates(words, counts, levels, lam, delta, split):
    """Split counts [L] of ``split(counts[l], levels[l], words)`` over the words [N]
    (float32 counts and levels, as the kernel passes them; the words are shared)."""
    tests = split(counts.astype(jnp.float32)[:, None], levels.astype(jnp.float32)[:, None],
                  words[None, :], lam, delta)
    return jnp.sum(tests, axis=1, dtype=jnp.int32)


_split_rates = jax.jit(_split_rates, static_argnames=("split",))


def privtree_path(split, lam, delta, leaf_scale, count: int, cap: int, replicates: int,
                  key, alpha: float) -> PathOutcome:
    """White-box audit of PrivTree's tree and leaf transcript on one path.

    ``X``: ``count`` points at one location, ``X'``: one more there (add/remove).  For
    every level ``k < cap``, ``replicates`` draws of the split test at count ``count``
    and at ``count + 1`` estimate ``p_k`` and ``p'_k``; as many draws of the leaf's noisy
    count ``c + Lap(leaf_scale)`` estimate the leaf factor.  Every bound is a union of
    marginal Clopper–Pearson bounds, which needs no independence between them, so all
    levels and both counts share one array of words (common random numbers: one noise
    draw per word, cheap).  Candidate events: "split at levels ``< K``" (optionally "and not at ``K``")
    and "leaf value ``≥ τ``" (or ``≤ τ``), in the orientation ``P[X']/P[X]`` or
    ``P[X]/P[X']``; the best on the first half of every sample is bounded on the second,
    each of its ``F`` factors at level ``α/F``.

    Args:
      split: the kernel's split test ``(counts, level, word, lam, delta) -> bool``.
      lam, delta, leaf_scale: the plan's ``λ``, ``δ`` (count units) and leaf scale.
      count: ``c ≥ 1``.
      cap: the depth cap (levels ``0..cap−1`` can split).
      replicates: draws per level and data set.
      key: raw key [2].
      alpha: ``1 −`` confidence.
    """
    half = replicates // 2
    keys = replicate_keys(key, 2)
    levels = jnp.arange(cap, dtype=jnp.int32)
    words = _bits(keys[0], (replicates,))
    rates = {}
    for c in (count, count + 1):
        rates[c] = [np.asarray(_split_rates(  # [selection, test] split counts per level
            words[part], jnp.full(cap, c, jnp.int32), levels, jnp.float32(lam),
            jnp.float32(delta), split=split)) for part in (slice(0, half), slice(half, None))]
    leaf_noise = np.asarray(noise.laplace(_bits(keys[1], (replicates,)), leaf_scale))
    leaf = {c: (np.sort(c + leaf_noise[:half]), np.sort(c + leaf_noise[half:]))
            for c in (count, count + 1)}
    n_sel, n_test = half, replicates - half

    def tree_counts(part, K, stop, c):
        """Factor counts (k, n) of the tree event at count ``c``: splits at levels < K."""
        hits = rates[c][part]
        n = n_sel if part == 0 else n_test
        ks = [int(hits[k]) for k in range(K)]
        if stop:
            ks.append(n - int(hits[K]))
        return ks, n

    def leaf_counts(part, tau, upper, c):
        values = leaf[c][part]
        k = values.size - np.searchsorted(values, tau, "left") if upper else \
            np.searchsorted(values, tau, "right")
        return k, values.size

    x, y = count, count + 1
    taus = np.unique(np.quantile(np.concatenate([leaf[x][0], leaf[y][0]]),
                                 np.linspace(0.0, 1.0, 257)))
    best = (-np.inf, None)
    for y_over_x in (True, False):
        num, den = (y, x) if y_over_x else (x, y)
        for K in range(cap + 1):
            for stop in ((False, True) if K < cap else (False,)):
                if K == 0 and not stop:
                    continue  # the empty tree event
                F = K + stop + 1
                kn, n = tree_counts(0, K, stop, num)
                kd, _ = tree_counts(0, K, stop, den)
                tree = float(np.sum(log_ratio_lower(np.array(kn), n, np.array(kd), n, alpha / F)))
                ln, nl = leaf_counts(0, taus, y_over_x, num)
                ld, _ = leaf_counts(0, taus, y_over_x, den)
                bounds = log_ratio_lower(ln, nl, ld, nl, alpha / F)
                j = int(np.argmax(bounds))
                total = tree + float(bounds[j])
                if total > best[0]:
                    best = (total, (y_over_x, K, stop, float(taus[j])))
    selection_bound, (y_over_x, K, stop, tau) = best
    num, den = (y, x) if y_over_x else (x, y)
    F = K + stop + 1
    kn, n = tree_counts(1, K, stop, num)
    kd, _ = tree_counts(1, K, stop, den)
    factors = [float(v) for v in log_ratio_lower(np.array(kn), n, np.array(kd), n, alpha / F)]
    ln, nl = leaf_counts(1, tau, y_over_x, num)
    ld, _ = leaf_counts(1, tau, y_over_x, den)
    factors.append(float(log_ratio_lower(ln, nl, ld, nl, alpha / F)))
    path = f"split at levels 0..{K - 1}" if K else "no split"
    if stop:
        path += f", not at level {K}"
    sign = "≥" if y_over_x else "≤"
    ratio = "P[X']/P[X]" if y_over_x else "P[X]/P[X']"
    description = (f"path of x0 {path}; leaf noisy count {sign} {tau:.3g} "
                   f"({ratio}; {count} vs {count + 1} points)")
    return PathOutcome(float(np.sum(factors)), selection_bound, description, tuple(factors))


def spec_sensitivity(s, depths, n: int, d: int, eps_main: float, C: float) -> float:
    """``Δ = max_a (4C/n)·Σ_{j<r_a} σ^{(a)}_{j+1} 2^{−j/d}`` (Zare Moayedi et al. §B.2).

    ``σ^{(s,r)}_{j+1} = A_{s,r}/(ε_main q_s^j)``, ``q_s = 2^{(s−1)/(2d)}``,
    ``A_{s,r} = 2 Σ_{j<r} q_s^j`` — computed here independently of the mechanism's code.
    """
    terms = []
    for s_a, r in zip(np.asarray(s, np.float64), np.asarray(depths, np.int64)):
        q = 2.0 ** ((s_a - 1.0) / (2.0 * d))
        j = np.arange(int(r))
        norm = 2.0 * np.sum(q**j)
        sigma = norm / (eps_main * q**j)
        terms.append(4.0 * C / n * np.sum(sigma * 2.0 ** (-j / d)))
    return float(max(terms))


def _select_many(select, keys, gaps, sensitivity, eps_sel):
    return jax.vmap(lambda k: select(k, gaps, sensitivity, eps_sel))(keys)


_select_many = jax.jit(_select_many, static_argnames=("select",))

SELECTION_GAPS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0)
"""Gaps of the target candidate, in units of ``2Δ/ε_sel`` (one score neighbour pair each)."""


def selection(select, sensitivity: float, eps_sel: float, spec_delta: float, candidates: int,
              replicates: int, key, alpha: float) -> events.Outcome:
    """White-box audit of the exponential-mechanism selection on score neighbours.

    Scores ``B``: the target candidate (the last) at gap ``G`` above the others (all 0);
    ``B'``: the target ``Δ`` lower and every other candidate ``Δ`` higher — the largest
    move the claimed sensitivity ``Δ = spec_delta`` allows, the worst case of the
    exponential mechanism's proof.  For each ``G`` in ``SELECTION_GAPS`` (units of
    ``2Δ/ε_sel``) ``replicates`` draws of ``select(key, gaps, sensitivity, eps_sel)`` per
    score vector (the same keys for both: the bound is a union of marginal bounds, which
    needs no independence); the event (a ``G`` and "the target is / is not selected") is
    chosen on the first half of every sample and bounded on the second.

    Args:
      select: the kernel's selection draw (``adaptive.select_candidate``).
      sensitivity, eps_sel: what the plan passes to it.
      spec_delta: the sensitivity of Zare Moayedi et al. §B.2 (``spec_sensitivity``).
      candidates: number of candidates ``A ≥ 2``.
    """
    if candidates < 2:
        raise ValueError("the selection audit needs at least two candidates (d >= 2)")
    unit = 2.0 * spec_delta / eps_sel
    target = candidates - 1
    samples = []
    for g, gap in enumerate(SELECTION_GAPS):
        b = np.zeros(candidates)
        b[target] = gap * unit
        b_prime = b + spec_delta
        b_prime[target] = b[target] - spec_delta
        keys = jnp.asarray(replicate_keys(jax.random.fold_in(jnp.asarray(key, jnp.uint32), g),
                                          replicates))
        picks = []
        for scores in (b, b_prime):  # common random numbers (the bounds are a union bound)
            chosen = _select_many(select, keys, jnp.asarray(scores - scores.min(), jnp.float32),
                                  jnp.float32(sensitivity), jnp.float32(eps_sel))
            picks.append((np.asarray(chosen) == target).astype(np.float64))
        samples.append(picks)
    half = replicates // 2
    best = (-np.inf, 0, None)
    for g, (px, py) in enumerate(samples):
        choice = events.choose(px[None, :half], py[None, :half], alpha)
        if choice.selection_bound > best[0]:
            best = (choice.selection_bound, g, choice)
    _, g, choice = best
    px, py = samples[g]
    result = events.evaluate(choice, px[None, half:], py[None, half:], alpha)
    picked = "is" if choice.upper else "is not"  # {selected ≥ 1} or {selected ≤ 0}
    ratio = "P[B]/P[B']" if choice.x_over_y else "P[B']/P[B]"
    description = (f"target candidate {picked} selected ({ratio}); scores B: target "
                   f"{SELECTION_GAPS[g]:g}·2Δ/ε_sel above the rest, B': target −Δ, rest +Δ "
                   f"(Δ = {spec_delta:.4g} from the paper's formula)")
    return events.Outcome(choice, result, description)
