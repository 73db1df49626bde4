"""The arrays mechanisms derive from a data tree: once per tree and key, gone with the tree."""

import gc
import weakref

import numpy as np

import jaxsynth as js
from jaxsynth.core.datatree import DataTree
from jaxsynth.mechanisms import tree_cache
from jaxsynth.mechanisms.tree_cache import tree_cached

X = np.random.default_rng(3).random((200, 2))


def test_computed_once_per_tree_and_key():
    tree, other = DataTree.build(X, 6), DataTree.build(X, 6)
    calls = []
    value = tree_cached(tree, ("k", 1), lambda: calls.append(1) or np.arange(3))
    assert tree_cached(tree, ("k", 1), lambda: calls.append(1)) is value and calls == [1]
    assert tree_cached(tree, ("k", 2), lambda: 5) == 5  # another key, another array
    assert tree_cached(other, ("k", 1), lambda: "other") == "other"  # another tree


def test_entries_go_with_their_tree():
    tree = DataTree.build(X, 6)
    tree_cached(tree, ("k",), lambda: np.zeros(4))
    alive = weakref.ref(tree)
    before = len(tree_cache._ARRAYS)
    del tree
    gc.collect()
    assert alive() is None and len(tree_cache._ARRAYS) == before - 1


def test_plans_on_one_tree_share_the_derived_arrays():
    """PMM and dense Pruned-PMM read the same planar counts, each equal to a fresh copy."""
    tree = js.prepare(X, 7)
    eps = np.array([1.0])
    pmm = js.PMM(depth=7).plan(tree, eps)
    pruned = js.PrunedPMM(depth=7, engine="dense").plan(tree, eps)
    assert pruned.shared["counts"] is pmm.shared["counts"]
    fresh = np.asarray(pmm.shared["counts"])[: 2**8 - 1]
    np.testing.assert_array_equal(fresh, DataTree.build(X, 7).planar_counts(7))
    shifted = js.PrivTree(shift=True)
    first = shifted.plan(tree, eps).shared["fixed"]
    assert shifted.plan(tree, eps).shared["fixed"] is first
    np.testing.assert_array_equal(np.asarray(first), np.floor(tree.points * 2.0**29))
