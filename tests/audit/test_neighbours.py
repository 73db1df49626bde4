"""Worst-case neighbouring data sets (``jaxsynth.audit.neighbours``)."""

import numpy as np
import pytest

from jaxsynth.audit import neighbours
from jaxsynth.core.datatree import DataTree


def test_replacement_moves_one_point_between_far_corners():
    pair = neighbours.replacement(3, d=2)
    assert pair.adjacency == "replacement"
    assert pair.X.shape == pair.Y.shape == (7, 2)
    # one point differs; the two whole paths change, in opposite directions, at every level
    cx = DataTree.build(pair.X, 4).planar_counts(4)
    cy = DataTree.build(pair.Y, 4).planar_counts(4)
    diff = cy - cx
    assert diff[0] == 0 and sorted(np.unique(diff).tolist()) == [-1, 0, 1]
    assert np.sum(diff == 1) == np.sum(diff == -1) == 4  # one node per level and path


def test_add_remove_adds_one_point():
    pair = neighbours.add_remove(2, 1, "x1", d=1)
    assert pair.adjacency == "add_remove"
    assert pair.X.shape == (3, 1) and pair.Y.shape == (4, 1)
    assert np.sum(pair.Y > 0.5) == 2 and np.sum(pair.X > 0.5) == 1
    assert np.all((pair.X >= 0) & (pair.X <= 1))


@pytest.mark.parametrize("call, name", [
    (lambda: neighbours.replacement(-1), "k"),
    (lambda: neighbours.replacement(1, d=0), "d"),
    (lambda: neighbours.add_remove(0, 0), "at0 \\+ at1"),
    (lambda: neighbours.add_remove(1, added="x2"), "added"),
    (lambda: neighbours.add_remove(1.5), "at0"),
])
def test_bad_arguments_are_refused(call, name):
    with pytest.raises(ValueError, match=name):
        call()
