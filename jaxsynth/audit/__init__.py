"""Monte Carlo privacy auditing of the mechanisms (``jaxsynth audit``).

``audit_mechanism(mech, eps)`` releases many replicates of worst-case neighbouring data
sets (``neighbours``), chooses output events on half of them (``events``) and reports
Clopper–Pearson lower bounds on the privacy loss (``bounds``) beside the claimed ε, for the
released measure (black-box, ``features``) and for the transcript the privacy proof covers
(white-box, ``whitebox``).  ``audit_table`` renders the results.  The names of
``__all__`` load the auditor (and JAX) on first use: the command line's parser reads this
package without them.
"""

import importlib

__all__ = ["MECHANISMS", "AuditResult", "Finding", "audit_all", "audit_mechanism", "audit_table"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module 'jaxsynth.audit' has no attribute {name!r}")
    value = getattr(importlib.import_module("jaxsynth.audit.auditor"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
