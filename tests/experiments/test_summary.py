"""Refusals of ``js.summarize`` (jaxsynth/experiments/summary.py).

Truth: what a summary of a table can mean.  A replicate counts once, a W1 value lies
between 0 and the diameter of the cube, a control is a number on every replicate and of
the same metric as the table; each refusal is a ``ValueError`` naming the argument and
the column.  A control taken from the table itself (no second sweep) gives the plain mean
when every replicate measured both columns (the two-phase estimate with N = n).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import jaxsynth as js


def _table(seeds=8):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.1, 0.2, seeds)
    return pd.DataFrame({"mechanism": "m", "data": "x", "n": 100, "eps": 1.0,
                         "seed": np.arange(seeds), "d": 2, "metric": "linf",
                         "w1_exact_upper": x + rng.normal(0, 0.005, seeds),
                         "w1_tree_upper": 1.5 * x})


def _with(column, index, value):
    table = _table()
    table[column] = table[column].astype(object)
    table.loc[index, column] = value
    return table


@pytest.mark.parametrize("call, names", [
    (lambda t: js.summarize(pd.concat([t, t])), ["df", "repeated replicate", "seed 0"]),
    (lambda t: js.summarize(t, control="w1_tree_upper",
                            controls=pd.concat([t, t])), ["controls", "repeated"]),
    (lambda t: js.summarize(_with("w1_tree_upper", 3, np.nan), control="w1_tree_upper"),
     ["control", "'w1_tree_upper'", "missing or not finite"]),
    (lambda t: js.summarize(_with("w1_tree_upper", 3, np.inf), control="w1_tree_upper"),
     ["'w1_tree_upper'", "infinite"]),
    (lambda t: js.summarize(_with("w1_tree_upper", 3, 1e300), control="w1_tree_upper"),
     ["'w1_tree_upper'", "diameter"]),
    (lambda t: js.summarize(_with("w1_tree_upper", 3, "abc"), control="w1_tree_upper"),
     ["'w1_tree_upper'", "not numeric", "'abc'"]),
    (lambda t: js.summarize(t, controls=t), ["controls needs control="]),
    (lambda t: js.summarize(t.iloc[:0]), ["df has no rows"]),
    (lambda t: js.summarize(t.drop(columns="seed")), ["df lacks", "'seed'"]),
    (lambda t: js.summarize(t.drop(columns="eps")), ["df lacks", "'eps'"]),
    (lambda t: js.summarize(t, control="w1_tree_upper", controls=t.assign(metric="l2")),
     ["controls", "metric", "'l2'", "'linf'"]),
    (lambda t: js.summarize(t, control="w1_nope"), ["control", "'w1_nope'"]),
])
def test_summarize_refuses_naming_the_argument_and_column(call, names):
    with pytest.raises(ValueError) as info:
        call(_table())
    assert all(name in str(info.value) for name in names), str(info.value)


def test_a_control_from_the_table_itself_is_the_plain_mean_when_all_measured_both():
    table = _table(16)
    cells = js.summarize(table, control="w1_tree_upper")
    assert cells.cv_mean.iloc[0] == pytest.approx(table.w1_exact_upper.mean(), rel=1e-12)
    assert cells.control_seeds.iloc[0] == cells.seeds.iloc[0] == 16
    assert cells.replicates_saved.iloc[0] <= 0  # N = n: the control cannot save anything


def test_the_control_variate_has_no_overflow_at_large_values():
    from jaxsynth.experiments.summary import control_variate

    rng = np.random.default_rng(1)
    x = rng.gamma(4.0, 0.5, 64)
    y = 1 + 2 * x + rng.normal(0, 0.1, 64)
    small = control_variate(y[:16], x[:16], x)
    large = control_variate(y[:16] * 2.0**900, x[:16] * 2.0**900, x * 2.0**900)
    np.testing.assert_allclose(np.array(large[:3]) / 2.0**900, small[:3], rtol=1e-12)
