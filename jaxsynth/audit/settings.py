"""The audit's defaults, shared by the auditor and the ``jaxsynth audit`` parser.

Plain values with no JAX behind them, so that the command line can describe its options
(``jaxsynth audit --help``) and refuse bad ones without loading JAX.
"""

DEFAULT_REPLICATES = 10**6
"""Releases per data set and run."""
DEFAULT_CONFIDENCE = 0.95
"""Confidence of each mechanism's verdict."""
MIN_REPLICATES = 200
"""Fewest releases per data set an audit accepts."""
MECHANISMS = ("pmm", "pruned-pmm", "adaptive-pruned-pmm", "privtree", "privtree-shift")
"""The real mechanisms of the audit table (command-line names)."""
