"""Mechanisms: frozen configs whose ``plan(tree, eps)`` the engine runs.

``pmm`` (PMM, Pruned-PMM) and ``pmm_kernels``; ``adaptive`` (Adaptive Pruned-PMM);
``privtree`` and ``privtree_kernel`` (PrivTree, shifted PrivTree); ``oracle`` (non-private
threshold partitions and oracle measures); ``schedules`` (noise schedules, accounting);
``registry`` (command-line names); ``protocol`` (the ``Mechanism`` interface they share);
``tree_cache`` (the arrays they derive from a data tree, once per tree).
"""
