"""One evaluation for ``js.w1`` and ``simulate`` (jaxsynth/wasserstein/evaluate.py, method.py,
registry.py): every registered W1 method gives bitwise the same numbers through both,
for a measure alone and for it inside a batch of 64 in another order.

The truth here is the sweep's own row for the same replicate: a wrong router (another
chunking, atom order, key path or level sum) moves a float in its last bits, and the
comparison is exact.  Sizes are small (n = 120, PMM depth 5) so the file runs in seconds;
``exact1d`` needs d = 1 and gets its own data set.
"""

import jax
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.experiments import datasets
from jaxsynth.wasserstein.method import W1Method
from jaxsynth.wasserstein.registry import REGISTRY

KEY, SEEDS, EPS = 7, 64, 1.0
MECH = js.PMM(depth=5)
OPTIONS = {"sinkhorn": {"rtol": 0.05}, "exact": {"rtol": 0.01}}


def _data(method):
    if method == "exact1d":
        return np.random.default_rng(3).uniform(size=(120, 1))
    return datasets.load("spiral", n=120, key=3)


@pytest.fixture(scope="module")
def sweeps():
    """The sweep's rows and ``release_batch``'s measures and level statistics, per d."""
    out = {}
    for d_methods in (["exact1d"], [m for m in REGISTRY if m != "exact1d"]):
        X = _data(d_methods[0])
        methods = [(m, OPTIONS.get(m, {})) for m in d_methods]
        table = js.simulate(MECH, X, eps=[EPS], seeds=SEEDS, methods=methods, key=KEY,
                            progress=False).sort_values("seed")
        measure, diag = js.release_batch(KEY, MECH, X, eps=[EPS], seeds=SEEDS,
                                         diagnostics=True)
        for m in d_methods:
            out[m] = (X, table, measure, diag)
    return out


@pytest.mark.parametrize("method", list(REGISTRY))
def test_js_w1_equals_simulate_bitwise_alone_and_in_a_shuffled_batch(sweeps, method):
    X, table, measure, diag = sweeps[method]
    columns = list(REGISTRY[method].columns)
    options = OPTIONS.get(method, {})

    def values(out, levels):
        got = js.w1(X, out, method, levels=levels, **options)
        return got if isinstance(got, tuple) else (got,)

    order = np.random.default_rng(0).permutation(SEEDS)
    batch = measure[0][order]
    levels = {k: np.asarray(diag[k])[0][order] for k in LEVEL_FIELDS}
    for column, got in zip(columns, values(batch, levels)):
        np.testing.assert_array_equal(got, table[column].to_numpy()[order], err_msg=column)
    for s in (0, 37):  # alone: the measure js.release gives for the replicate's own key
        one, one_diag = js.release(jax.random.fold_in(jax.random.key(KEY), s), MECH, X, EPS,
                                   diagnostics=True)
        for column, got in zip(columns, values(one, one_diag)):
            assert float(got) == table[column].to_numpy()[s], (column, s)


def test_every_registered_method_states_its_columns_and_refuses_unknown_options():
    """Every registered class is a W1Method (a frozen dataclass of its options)."""
    X = _data("tree")
    out = js.release(0, MECH, X, EPS)
    for name, kind in REGISTRY.items():
        method = kind()  # a configured method, every option at its default
        assert isinstance(method, W1Method) and method.name == name
        assert method.columns and all(c.startswith("w1_") for c in method.columns)
        assert all(isinstance(text, str) and text for text in method.columns.values())
        with pytest.raises(ValueError, match=rf"unknown option\(s\) \['bogus'\].*accepted"):
            js.w1(X, out, name, bogus=1)


def test_tree_from_levels_is_the_tree_w1_of_the_atoms():
    """Reading the kernel's level statistics and measuring the atoms are two routes to
    the tree W1 (the brute-force tree reference checks the atom route in test_tree.py):
    they agree to float32 rounding."""
    X = _data("tree")
    out, diag = js.release_batch(1, js.PrivTree(), X, eps=[0.5, 2.0], seeds=4,
                                 diagnostics=True)
    for method in ("tree", "tree_upper"):
        np.testing.assert_allclose(js.w1(X, out, method, levels=diag), js.w1(X, out, method),
                                   rtol=2e-5, atol=1e-7)


def test_levels_of_the_wrong_shape_are_refused():
    X = _data("tree")
    out, diag = js.release_batch(1, MECH, X, eps=[1.0], seeds=3, diagnostics=True)
    with pytest.raises(ValueError, match="levels"):
        js.w1(X, out[0, :2], "tree", levels=diag)
    with pytest.raises(ValueError, match="levels must hold"):
        js.w1(X, out, "tree", levels={"tree_linf": 1})
