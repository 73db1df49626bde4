"""The sweeps whose tables are pinned in ``tests/experiments/data/golden/``.

Each sweep's table, less its timing columns, was written by the sweep code as it stood
before the sweep was rebuilt as a plan, an executor and sinks; ``test_golden.py`` runs the
same sweeps and asserts every number and label of those columns, row for row.  Columns a
later version adds are not compared (the pinned ones must keep their values).

Regenerate only when a change of numbers is intended and explained:
``python -m tests.experiments.golden`` (under the test suite's XLA flags, which
``tests/conftest.py`` sets: run it as ``python -c "import tests.conftest; ..."``, which
``main`` here does).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

DATA = Path(__file__).parent / "data" / "golden"
TIMING = ("seconds", "release_seconds", "measure_seconds")
SWEEP = dict(mechanisms=["pmm", "privtree", "pruned-pmm"], data="spiral", n=[300, 600],
             eps=[1.0, 2.0], seeds=5, methods=["exact", "bracket", "tree", "tree_upper"],
             key=11, progress=False)
"""A fixed sweep: every mechanism kind with its own kernel, two sizes, two ε, every W1
method that a sweep records without subsampling."""
PRECISE = dict(mechanisms=["pmm", "privtree"], data="spiral", n=400, eps=[1.0, 4.0],
               seeds=4, max_seeds=32, precision=0.15, methods=["exact", "tree_upper"],
               precision_column="w1_exact_upper", key=5, progress=False)
"""A sweep to a precision whose cells stop at different counts."""
CLI_SWEEP = ["--mechanism", "pmm,privtree", "--data", "spiral", "--n", "300", "--eps", "1,2",
             "--seeds", "6", "--method", "exact,tree", "--key", "3", "--quiet"]
"""The command line's sweep, run by one process and by two (``launch --local 2``)."""


def numbers(table: pd.DataFrame) -> pd.DataFrame:
    """The table without its timing columns, in key order, with a fresh index."""
    keys = ["mechanism", "data", "n", "eps", "seed"]
    table = table.drop(columns=[c for c in TIMING if c in table])
    return table.sort_values(keys, kind="stable").reset_index(drop=True)


def pinned(name: str) -> pd.DataFrame:
    """The pinned table ``name``, read with the result store's rules."""
    from jaxsynth.experiments.store import read_table

    return read_table(DATA / f"{name}.csv")


def tables(tmp: Path) -> dict[str, pd.DataFrame]:
    """Every pinned sweep run now, less the two-process one: ``fixed`` (in memory),
    ``resumed`` (a store written in two runs: 2 seeds, then 5), ``precise``."""
    from jaxsynth.experiments.store import read_table
    from jaxsynth.experiments.sweep import simulate

    out = {"fixed": numbers(simulate(**SWEEP))}
    store = tmp / "resumed.csv"
    simulate(**{**SWEEP, "seeds": 2, "out": store})
    simulate(**{**SWEEP, "out": store})
    out["resumed"] = numbers(read_table(store))
    out["precise"] = numbers(simulate(**PRECISE))
    return out


def cli_table(tmp: Path, processes: int, env=None) -> pd.DataFrame:
    """``CLI_SWEEP`` run by ``processes`` processes, read from its store."""
    import subprocess
    import sys

    from jaxsynth.experiments.store import read_table

    path = tmp / f"cli{processes}.csv"
    launch = ["launch", "--local", str(processes)] if processes > 1 else []
    subprocess.run([sys.executable, "-m", "jaxsynth", *launch, "simulate", *CLI_SWEEP,
                    "--out", str(path)], env=env, check=True, capture_output=True,
                   timeout=900)
    return numbers(read_table(path))


def main() -> None:
    import os
    import tempfile

    import tests.conftest  # noqa: F401  (the suite's XLA flags)

    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, table in tables(Path(tmp)).items():
            table.to_csv(DATA / f"{name}.csv", index=False)
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        env.pop("JAXSYNTH_NO_CACHE", None)
        cli_table(Path(tmp), 1, env).to_csv(DATA / "cli.csv", index=False)


if __name__ == "__main__":
    main()
