"""Monte Carlo privacy auditing of the mechanisms (``jaxsynth audit``).

``audit_mechanism(mech, eps)`` releases many replicates of worst-case neighbouring data
sets (``neighbours``), chooses output events on half of them (``events``) and reports
Clopper–Pearson lower bounds on the privacy loss (``bounds``) beside the claimed ε, for the
released measure (black-box, ``features``) and for the transcript the privacy proof covers
(white-box, ``whitebox``).  ``audit_table`` renders the results.

The auditor was once called as ``jaxsynth.audit(...)``, which hid this package; calling
the package now says to use ``audit_mechanism``.
"""

import importlib
import sys
import types

__all__ = ["MECHANISMS", "AuditResult", "Finding", "audit_all", "audit_mechanism", "audit_table"]


def __getattr__(name):  # the auditor (and JAX) load on first use, not for the command line
    if name not in __all__:
        raise AttributeError(f"module 'jaxsynth.audit' has no attribute {name!r}")
    value = getattr(importlib.import_module("jaxsynth.audit.auditor"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _AuditPackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        raise TypeError("jaxsynth.audit is the auditing package; call "
                        "jaxsynth.audit_mechanism(mech, eps, ...) to audit a mechanism")


sys.modules[__name__].__class__ = _AuditPackage
