"""The ``jaxsynth audit`` subcommand: the audit table of the real mechanisms.

``jaxsynth audit`` with no options audits every mechanism of ``settings.MECHANISMS`` at
ε = 1 with 10^6 releases per data set and prints the markdown table; ``--mechanism``,
``--eps``, ``--replicates``, ``--confidence``, ``--seed`` and ``--depth`` change that.
Options are checked before any work; a bad value is a ``ValueError`` naming it, which
the command line prints as one line (exit status 2).
"""

from __future__ import annotations

import sys
import time


def add_parser(sub) -> None:
    """Add the ``audit`` subparser to the command line's subparsers ``sub`` (its values
    parsed by ``jaxsynth.arguments``, as every option of the command line)."""
    from jaxsynth.arguments import integer, names, real
    from jaxsynth.audit.settings import DEFAULT_CONFIDENCE, DEFAULT_REPLICATES, MECHANISMS

    audit = sub.add_parser(
        "audit", help="Monte Carlo privacy audit: lower bounds on the privacy loss beside the "
        "claimed eps (markdown table)")
    arg = audit.add_argument
    arg("--mechanism", type=names, default=list(MECHANISMS), metavar="NAME[,NAME]",
        help=f"mechanisms to audit (default all: {','.join(MECHANISMS)})")
    arg("--eps", type=real("a number"), default=1.0, metavar="E",
        help="claimed budget (default 1)")
    arg("--replicates", type=integer(), default=DEFAULT_REPLICATES, metavar="N",
        help=f"releases per data set and run (default {DEFAULT_REPLICATES})")
    arg("--confidence", type=real("a number"), default=DEFAULT_CONFIDENCE, metavar="C",
        help=f"confidence of each mechanism's verdict (default {DEFAULT_CONFIDENCE})")
    arg("--seed", type=integer(), default=0, metavar="S", help="audit key (default 0)")
    arg("--depth", type=integer(), metavar="R",
        help="tree depth of the PMM family (default 2) or depth cap of PrivTree's black-box "
        "runs (default 3)")
    arg("--details", action="store_true", help="also list the event each audit tested")
    arg("--quiet", action="store_true", help="no progress lines on stderr")


def run(args) -> None:
    """Check the options, run the audits, print the table (and the events)."""
    from jaxsynth.audit.auditor import audit_mechanism, audit_table
    from jaxsynth.audit.settings import MIN_REPLICATES
    from jaxsynth.core.validate import check_epsilon, check_fraction, check_positive_int
    from jaxsynth.mechanisms.registry import mechanism

    if not args.mechanism:
        raise ValueError("--mechanism is empty")
    repeated = sorted({m for m in args.mechanism if args.mechanism.count(m) > 1})
    if repeated:
        raise ValueError(f"--mechanism names {', '.join(repeated)} more than once")
    mechs = [mechanism(name) for name in args.mechanism]
    check_epsilon(args.eps, "--eps")
    check_positive_int(args.replicates, "--replicates", minimum=MIN_REPLICATES)
    check_fraction(args.confidence, "--confidence")
    check_positive_int(args.seed, "--seed", minimum=0)
    if args.depth is not None:
        check_positive_int(args.depth, "--depth")
        if any(m.name == "adaptive-pruned-pmm" for m in mechs):
            raise ValueError("--depth does not apply to adaptive-pruned-pmm, which selects its "
                             "own depth; audit it separately")
    results = []
    for i, m in enumerate(mechs):
        if not args.quiet:  # progress on stderr: each mechanism takes a while
            print(f"jaxsynth audit: [{i + 1}/{len(mechs)}] {m.name}: {args.replicates} "
                  "releases per data set ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        results.append(audit_mechanism(m, args.eps, replicates=args.replicates,
                                       confidence=args.confidence, key=args.seed,
                                       depth=args.depth))
        if not args.quiet:
            print(f"jaxsynth audit: [{i + 1}/{len(mechs)}] {m.name}: {results[-1].verdict} "
                  f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    print(audit_table(results))
    if args.details:
        for r in results:
            print(f"\n{r.mechanism} ({r.adjacency}): {r.neighbours}")
            for f in r.findings:
                print(f"  {f.audit}: {f.event}; counts {f.counts}")
