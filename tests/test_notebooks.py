"""The notebooks run top to bottom with their reduced sizes, and match their sources.

Each committed notebook (``notebooks/NN_*.ipynb``, with the outputs of its full-size run)
is copied, cleared and executed in a fresh ``python3`` kernel of this interpreter in a
temporary directory, with ``JAXSYNTH_NOTEBOOK_SIZE=ci`` (every notebook's parameter cell
then picks its reduced sizes); any error fails the test.  The committed files are never
written.  The kernels inherit ``XLA_FLAGS`` from ``conftest.py`` and share one fresh
compilation cache, so a kernel compiled by one notebook is reused by the next.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def _build_module():
    spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_module()
SOURCES = build.sources()


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory, monkeypatch_module):
    """A ``python3`` kernelspec running this interpreter, and a shared compilation cache."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test)", "language": "python",
    }))
    monkeypatch_module.setenv("JUPYTER_PATH", str(root))
    monkeypatch_module.setenv("JAXSYNTH_CACHE_DIR", str(root / "xla-cache"))
    monkeypatch_module.delenv("JAXSYNTH_NO_CACHE", raising=False)  # the kernels cache
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_there_are_six_notebooks():
    assert [s.stem[:2] for s in SOURCES] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_notebook_matches_its_source(source):
    """The committed notebook has the cells of its source (rebuild: python notebooks/build.py)."""
    committed = nbformat.read(build.target(source), as_version=4)
    assert build.cell_sources(committed) == build.cell_sources(build.parse(source))
    parameters = [c for c in committed.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and build.SIZE_VARIABLE in parameters[0].source


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.stem)
def test_notebook_runs_with_reduced_sizes(source, kernel_env, tmp_path):
    nb = nbformat.read(build.target(source), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    build.execute(nb, size="ci", cwd=tmp_path, timeout=600)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the notebooks write no files
