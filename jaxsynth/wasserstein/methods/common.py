"""What several W1 methods share: the tree W1 of a batch."""

from __future__ import annotations

from jaxsynth.wasserstein.bounds import check_valid
from jaxsynth.wasserstein.method import Batch
from jaxsynth.wasserstein.tree import levels_w1, tree_w1_atoms


def tree_values(data, batch: Batch, metric: str, batch_size: int | None):
    """``(tree W1, its upper bound)`` float64 [B] of a batch: from the kernel's level
    statistics when the batch has them, else from the atoms (``ValueError`` naming
    ``out`` when a replicate's leaves are not a tree)."""
    if batch.levels is not None:
        return levels_w1(batch.levels, batch.d, metric)
    result = tree_w1_atoms(data, batch.points, batch.weights, batch.leaf_depth, batch.shift,
                           metric, batch_size)
    check_valid(result.valid)
    return result.value, result.upper
