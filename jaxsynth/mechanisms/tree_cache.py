"""Arrays the mechanisms derive from a data tree, computed once per tree.

A plan reads device arrays derived from its data tree: the PMM family's padded planar
counts (``pmm``), PrivTree's fixed-point data (``privtree``).  The plans made on one tree
(PMM and Pruned-PMM, a sweep's groups of ε, ``js.release`` called again and again on a
prepared tree) share them: each is computed once per tree and key and dropped with the
tree.  The cache belongs to the mechanisms, keyed explicitly by the tree (its identity,
held weakly) and a tuple naming what is derived and its options; the ``DataTree`` holds
the data's own arrays only.
"""

from __future__ import annotations

import weakref

_ARRAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""tree -> {key: array}; an entry goes when its tree is collected."""


def tree_cached(tree, key: tuple, compute):
    """``compute()`` once per ``tree`` and ``key``; later calls return the same value."""
    arrays = _ARRAYS.setdefault(tree, {})
    if key not in arrays:
        arrays[key] = compute()
    return arrays[key]
