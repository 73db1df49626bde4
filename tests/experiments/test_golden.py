"""The sweep's tables against the tables pinned before it was rebuilt (``golden.py``).

Truth: the tables the earlier sweep code wrote for the same sweeps (``data/golden/``).
A fixed sweep, a store written in two runs, a sweep to a precision and the command line's
sweep (one process, and two processes) must give every pinned column's values, row for
row: labels and integers equal, floats to 1e-12 relative (their last bits may differ
between CPUs).  Every sweep here is a
whole sweep of the golden grid (over a minute of compilation and releases together), so
the module is in the slow run, which CI runs.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.experiments import golden

pytestmark = pytest.mark.slow


def _same(now: pd.DataFrame, name: str) -> None:
    then = golden.pinned(name)
    missing = [c for c in then.columns if c not in now.columns]
    assert not missing, f"{name}: columns {missing} are gone"
    # labels and integers equal; floats to 1e-12 relative: NumPy's SIMD reductions sum
    # in an order that depends on the CPU (AVX-512 or not), so the last bits of a float64
    # sum (the exact W1's lower end) may differ from the machine that pinned the tables
    pd.testing.assert_frame_equal(now[list(then.columns)], then, check_exact=False,
                                  rtol=1e-12, atol=0.0, check_dtype=False)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return golden.tables(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("name", ["fixed", "resumed", "precise"])
def test_sweep_tables_are_the_pinned_ones(tables, name):
    _same(tables[name], name)


def test_the_command_lines_table_is_the_pinned_one(tmp_path, cli_env):
    _same(golden.cli_table(tmp_path, 1, cli_env), "cli")


def test_two_processes_write_the_pinned_table(tmp_path, cli_env):
    _same(golden.cli_table(tmp_path, 2, cli_env), "cli")
