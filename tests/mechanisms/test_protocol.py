"""Every mechanism config implements ``protocol.Mechanism``; configs are keyword-only."""

import numpy as np
import pytest

import jaxsynth as js
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
