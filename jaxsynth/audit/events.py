"""Output events chosen on one half of the releases, tested on the other.

The audit's event must not depend on the releases it is tested on, or the Clopper–Pearson
bound (``jaxsynth.audit.bounds``) is void.  So the releases of each neighbour are split in
two halves: on the *selection* half the auditor fits score functions and searches their
level sets ``{s ≥ τ}`` (or ``{s ≤ τ}``); exactly one event — the one whose bound is best on
the selection half — is then counted on the *test* half, which gives the reported bound.

Score functions (each a map from a release's features to a number):

* every feature itself (e.g. the weight of one cell: the events "weight of cell ``c`` is at
  least ``t``"), in both directions;
* the *empirical log-likelihood ratio*: each feature is discretised (its distinct values,
  or quantile bins when there are many), its histograms under the two neighbours are
  estimated on the selection half (add-½ smoothing), and the score is the sum over
  features of ``ln p̂_X(v)/p̂_X'(v)``.  By Neyman–Pearson the level sets of the true
  likelihood ratio are the most powerful events; the sum over features is its estimate
  under independence, exact for a transcript of independent noisy counts (the white-box
  audit) and a heuristic elsewhere — which never affects validity, only power;
* model scores passed by the caller (e.g. the log-likelihood ratio the claimed noise pmf
  gives a transcript).

Every event ``{s ≥ τ}`` or ``{s ≤ τ}`` is tried in both orientations, bounding
``ln P_X(E)/P_X'(E)`` and ``ln P_X'(E)/P_X(E)``: both are privacy losses of the
neighbouring pair.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxsynth.audit.bounds import log_ratio_lower

MAX_THRESHOLDS = 512
"""Candidate thresholds per score: its distinct values, or this many quantiles."""
MAX_BINS = 64
"""Histogram bins of a feature in the empirical likelihood ratio."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """An event chosen on the selection half.

    Attributes:
      score: index of the score function.
      threshold: ``τ``.
      upper: ``True`` for ``{s ≥ τ}``, ``False`` for ``{s ≤ τ}``.
      x_over_y: bound ``ln P_X/P_X'`` (else ``ln P_X'/P_X``).
      selection_bound: the bound the event reached on the selection half.
    """

    score: int
    threshold: float
    upper: bool
    x_over_y: bool
    selection_bound: float


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """An event counted on the test half: ``k`` of ``n`` releases of the numerator data
    set fall in it against ``k_den`` of ``n_den`` of the denominator's."""

    lower_bound: float
    k: int
    n: int
    k_den: int
    n_den: int


def _thresholds(x, y) -> np.ndarray:
    pooled = np.concatenate([x, y])
    values = np.unique(pooled)
    if values.size <= MAX_THRESHOLDS:
        return values
    return np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, MAX_THRESHOLDS)))


def _counts(sorted_scores, taus, upper: bool) -> np.ndarray:
    """``#{s ≥ τ}`` (upper) or ``#{s ≤ τ}`` for every ``τ``, from sorted scores."""
    if upper:
        return sorted_scores.size - np.searchsorted(sorted_scores, taus, side="left")
    return np.searchsorted(sorted_scores, taus, side="right")


def choose(scores_x, scores_y, alpha: float) -> Choice:
    """The event with the best bound on the selection half.

    Args:
      scores_x, scores_y: [S, N] score values of the selection halves of ``X`` and ``X'``
        (one row per score function).
      alpha: the level the test will use; the selection ranks the candidates by their
        bounds at level ``α`` divided by the number of candidate events (simultaneous
        bounds), which favours events frequent enough to be bounded well on the test half.

    Returns:
      the ``Choice`` (a score of ``-inf`` everywhere gives ``selection_bound = -inf``).
    """
    best = Choice(0, 0.0, True, True, -np.inf)
    nx, ny = scores_x.shape[1], scores_y.shape[1]
    thresholds = [_thresholds(x, y) for x, y in zip(np.asarray(scores_x), np.asarray(scores_y))]
    # simultaneous bounds over every candidate event (Bonferroni): the winner's curse of a
    # rare event that looks extreme on the selection half is priced in
    alpha = alpha / (4 * sum(t.size for t in thresholds))
    for i, (x, y) in enumerate(zip(np.asarray(scores_x), np.asarray(scores_y))):
        taus = thresholds[i]
        xs, ys = np.sort(x), np.sort(y)
        for upper in (True, False):
            kx, ky = _counts(xs, taus, upper), _counts(ys, taus, upper)
            for x_over_y in (True, False):
                if x_over_y:
                    bounds = log_ratio_lower(kx, nx, ky, ny, alpha)
                else:
                    bounds = log_ratio_lower(ky, ny, kx, nx, alpha)
                j = int(np.argmax(bounds))
                if bounds[j] > best.selection_bound:
                    best = Choice(i, float(taus[j]), upper, x_over_y, float(bounds[j]))
    return best


def evaluate(choice: Choice, scores_x, scores_y, alpha: float) -> Evaluation:
    """Count the chosen event on the test half and bound its privacy loss."""
    x, y = np.asarray(scores_x)[choice.score], np.asarray(scores_y)[choice.score]
    if choice.upper:
        kx, ky = int(np.sum(x >= choice.threshold)), int(np.sum(y >= choice.threshold))
    else:
        kx, ky = int(np.sum(x <= choice.threshold)), int(np.sum(y <= choice.threshold))
    num = (kx, x.size, ky, y.size) if choice.x_over_y else (ky, y.size, kx, x.size)
    return Evaluation(float(log_ratio_lower(*num, alpha)), *num)


class Discretizer:
    """Per-feature integer codes: distinct values, or quantile bins of the selection half."""

    def __init__(self, pooled, max_bins: int = MAX_BINS):
        pooled = np.asarray(pooled, np.float64)
        self.edges = []
        for column in pooled.T:
            values = np.unique(column)
            if values.size > max_bins:
                values = np.unique(np.quantile(column, np.linspace(0, 1, max_bins + 1)[1:-1]))
            self.edges.append(values)
        self.bins = max((e.size for e in self.edges), default=0) + 1

    def codes(self, features) -> np.ndarray:
        """Codes [N, F] in ``0..bins−1`` (code ``i``: ``edges[i−1] ≤ v < edges[i]``)."""
        features = np.asarray(features, np.float64)
        return np.stack([np.searchsorted(e, features[:, f], side="right")
                         for f, e in enumerate(self.edges)], axis=1)


def empirical_llr(codes_x, codes_y, bins: int) -> np.ndarray:
    """Log-ratio tables [F, bins]: ``ln p̂_X(v) − ln p̂_X'(v)`` per feature, add-½ smoothed."""
    F = codes_x.shape[1]
    table = np.zeros((F, bins))
    for f in range(F):
        hx = np.bincount(codes_x[:, f], minlength=bins) + 0.5
        hy = np.bincount(codes_y[:, f], minlength=bins) + 0.5
        table[f] = np.log(hx / hx.sum()) - np.log(hy / hy.sum())
    return table


def llr_score(table, codes) -> np.ndarray:
    """The summed log-ratio score [N] of codes [N, F]."""
    return np.sum(table[np.arange(codes.shape[1]), codes], axis=1)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The result of one two-half audit: the chosen event and its test."""

    choice: Choice
    evaluation: Evaluation
    description: str


def audit_features(features_x, features_y, alpha: float, names=(), model_scores=None,
                   model_names=(), split: float = 0.5) -> Outcome:
    """Choose an event on the first half of the releases, bound its loss on the second.

    Args:
      features_x, features_y: [N, F] features of independent releases of ``X`` and ``X'``.
      alpha: ``1 −`` confidence of the reported bound.
      names: optional feature names (for the event description).
      model_scores: optional ``fn(features [N, F]) -> [S, N]`` extra score functions.
      model_names: their names (for the event description).
      split: fraction of each sample used for the selection.

    Returns:
      ``Outcome``.
    """
    fx, fy = np.asarray(features_x, np.float64), np.asarray(features_y, np.float64)
    hx, hy = int(fx.shape[0] * split), int(fy.shape[0] * split)
    sel_x, test_x, sel_y, test_y = fx[:hx], fx[hx:], fy[:hy], fy[hy:]
    disc = Discretizer(np.concatenate([sel_x, sel_y]))
    table = empirical_llr(disc.codes(sel_x), disc.codes(sel_y), disc.bins)

    def scores(f):
        rows = [llr_score(table, disc.codes(f))] + list(f.T)
        if model_scores is not None:
            rows += list(np.asarray(model_scores(f)))
        return np.stack(rows)

    choice = choose(scores(sel_x), scores(sel_y), alpha)
    result = evaluate(choice, scores(test_x), scores(test_y), alpha)
    n_features = fx.shape[1]
    if choice.score == 0:
        label = "empirical log-likelihood ratio"
    elif choice.score <= n_features:
        f = choice.score - 1
        label = names[f] if f < len(names) else f"feature {f}"
    else:
        m = choice.score - n_features - 1
        label = model_names[m] if m < len(model_names) else f"model score {m}"
    sign = "≥" if choice.upper else "≤"
    ratio = "P[X]/P[X']" if choice.x_over_y else "P[X']/P[X]"
    return Outcome(choice, result, f"{label} {sign} {choice.threshold:.4g} ({ratio})")
