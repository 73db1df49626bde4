"""The optional dependencies: without matplotlib (``jaxsynth[plots]``) everything but the
figures works, and a figure asked for says which extra installs it."""

import subprocess
import sys

import pandas as pd
import pytest

from jaxsynth.cli import main
from jaxsynth.experiments import plots

INSTALL = 'pip install "jaxsynth[plots]"'


@pytest.fixture
def no_matplotlib(monkeypatch):
    """This process as if matplotlib were not installed."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def _table():
    rows = [{"mechanism": "pmm", "data": "spiral", "n": n, "eps": 1.0, "seed": s,
             "metric": "linf", "w1_exact_upper": 1.0 / n + 0.001 * s}
            for n in (100, 200, 400) for s in range(3)]
    return pd.DataFrame(rows)


def test_figures_name_the_extra(no_matplotlib, tmp_path):
    df = _table()
    assert "W1" in plots.quantity("w1_exact_upper", df)  # words need no matplotlib
    with pytest.raises(ImportError, match=r'jaxsynth\[plots\]'):
        plots.rate_plot(df)
    with pytest.raises(ImportError, match=r'jaxsynth\[plots\]'):
        plots.check_figure_path(tmp_path / "figure.png")


def test_the_demo_says_which_extra_before_any_work(no_matplotlib, tmp_path, capsys):
    assert main(["--no-cache", "demo", "--out-dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"jaxsynth: error: figures need matplotlib, an optional dependency of "
                   f"jaxsynth: {INSTALL}"]
    assert list(tmp_path.iterdir()) == []  # nothing computed, nothing written


def test_importing_the_figures_module_loads_no_matplotlib():
    code = ("import sys, jaxsynth.experiments.plots, jaxsynth.cli\n"
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"

