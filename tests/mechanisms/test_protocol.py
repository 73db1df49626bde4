"""Every mechanism config implements ``protocol.Mechanism``; configs are keyword-only;
the ``piece`` option of ``plan`` changes no released measure: node randomness depends on the
node alone, never on the piece it is processed in.  The atoms may be listed in another
order, and float32 values may move in their last bit: sums (the NOT PRIVATE level
statistics, PrivTree's normalisation) run in another order, and XLA may round a
logarithm differently in a vector of another length."""

import numpy as np
import pytest

import jaxsynth as js
from jaxsynth import engine
from jaxsynth.core.keys import replicate_keys
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.mechanisms.protocol import Mechanism

CONFIGS = [js.PMM(), js.PrunedPMM(), js.AdaptivePrunedPMM(), js.PrivTree(),
           js.PrivTree(shift=True), js.PMM(schedule="profile")]


@pytest.mark.parametrize("mech", CONFIGS, ids=lambda m: f"{m.name}-{m.is_oracle}")
def test_configs_are_mechanisms(mech):
    assert isinstance(mech, Mechanism)
    assert mech.is_oracle == (getattr(mech, "schedule", None) == "profile")
    groups = mech.eps_groups(1000, [0.5, 1.0, 2.0])
    assert sorted(np.concatenate(groups).tolist()) == [0, 1, 2]  # a partition of the ε list


@pytest.mark.parametrize("cls", [js.PMM, js.PrunedPMM, js.AdaptivePrunedPMM, js.PrivTree])
def test_configs_are_keyword_only(cls):
    with pytest.raises(TypeError, match="positional"):
        cls(3)


def test_objects_that_are_not_mechanisms_are_refused():
    X = np.full((10, 2), 0.5)
    with pytest.raises(ValueError, match="mech must be a mechanism config"):
        js.release(0, object(), X, 1.0)
    with pytest.raises(ValueError, match="the class PMM"):
        js.release(0, js.PMM, X, 1.0)


@pytest.mark.parametrize("mech", [
    js.PMM(depth=5),
    pytest.param(js.PrunedPMM(depth=12, engine="sparse"), marks=pytest.mark.slow),
    pytest.param(js.AdaptivePrunedPMM(), marks=pytest.mark.slow),
    pytest.param(js.PrivTree(shift=True), marks=pytest.mark.slow),
], ids=lambda m: m.name)
def test_piece_changes_no_release(mech):
    X = js.datasets.load("spiral", n=300, key=1)
    tree = js.prepare(X, mech.data_depth(300, 2, [1.0]))
    default = mech.plan(tree, np.array([1.0]))
    small = mech.plan(tree, np.array([1.0]), piece=4)
    assert small.static.piece == 4 != default.static.piece
    keys = replicate_keys(5, 3)
    a, b = (engine.run(p, keys, host=True) for p in (default, small))
    assert a.keys() == b.keys()
    atoms = [k for k in a if k in engine.ATOMS + default.atom_fields]
    for k in a:
        if k in LEVEL_FIELDS:  # 2 float32 ulps
            np.testing.assert_allclose(a[k], b[k], rtol=2.5e-7, atol=0, err_msg=k)
        elif k not in atoms:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # the same atoms (the points, exact, order them): 2 float32 ulps
    np.testing.assert_allclose(_atom_rows(a, atoms), _atom_rows(b, atoms), rtol=2.5e-7, atol=0)


def _atom_rows(out, fields):
    """Every replicate's atoms as rows (point, weight, level, ...), sorted: the measure."""
    columns = [np.asarray(out[k], np.float64).reshape(out[k].shape[:3] + (-1,)) for k in fields]
    rows = np.concatenate(columns, axis=-1)  # [E, S, M, F]
    order = np.lexsort(np.moveaxis(rows, -1, 0)[::-1], axis=-1)
    return np.take_along_axis(rows, order[..., None], axis=2)


def test_bad_piece_is_refused():
    tree = js.prepare(np.full((10, 2), 0.5), 4)
    for mech in (js.PMM(depth=4), js.PrivTree(depth_cap=4)):
        with pytest.raises(ValueError, match="piece"):
            mech.plan(tree, np.array([1.0]), piece=0)
