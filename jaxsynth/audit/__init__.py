"""Monte Carlo privacy auditing of the mechanisms (SPEC §10 ``js.audit``).

``audit(mech, eps)`` releases many replicates of worst-case neighbouring data sets
(``neighbours``), chooses output events on half of them (``events``) and reports
Clopper–Pearson lower bounds on the privacy loss (``bounds``) beside the claimed ε, for the
released measure (black-box, ``features``) and for the transcript the privacy proof covers
(white-box, ``whitebox``).  ``audit_table`` renders the results (``jaxsynth audit``).
"""

from jaxsynth.audit.auditor import (
    MECHANISMS,
    AuditResult,
    Finding,
    audit,
    audit_all,
    audit_table,
)

__all__ = ["MECHANISMS", "AuditResult", "Finding", "audit", "audit_all", "audit_table"]
