"""Build the notebooks from their sources, and optionally execute them.

The sources are ``notebooks/src/NN_name.py`` in the "percent" format: a line ``# %%``
starts a code cell, ``# %% [markdown]`` a text cell (its lines without the leading
``# ``), and ``# %% tags=["parameters"]`` the parameter cell; in a code cell a commented
IPython magic (``# %matplotlib inline``) becomes the magic, so the sources stay Python.  The committed notebooks
``notebooks/NN_name.ipynb`` are built from them and carry the outputs of their last
full-size run; ``tests/test_notebooks.py`` checks that their cells match the sources and
runs every notebook top to bottom with the reduced sizes (``JAXSYNTH_NOTEBOOK_SIZE=ci``).

    python notebooks/build.py                       # rebuild every .ipynb, keeping the
                                                    # outputs where no code cell changed
    nice python notebooks/build.py --execute 02 03  # rebuild and run at full size, in place
                                                    # (--timeout: a cell's limit in s)
    python notebooks/build.py --execute --size ci   # a quick run with the reduced sizes,
                                                    # written to the temporary directory
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
SIZE_VARIABLE = "JAXSYNTH_NOTEBOOK_SIZE"
"""``full`` (default) or ``ci``: read by each notebook's parameter cell."""

_MAGIC = re.compile(r"^# (%[a-z]\w*.*)$")
_CELL = re.compile(r"^# %%(?P<kind> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def sources() -> list[Path]:
    """The notebook sources, in order."""
    return sorted(SOURCES.glob("[0-9][0-9]_*.py"))


def target(source: Path) -> Path:
    return HERE / (source.stem + ".ipynb")


def parse(source: Path) -> nbformat.NotebookNode:
    """The notebook (no outputs) of a percent-format source."""
    cells, kind, tags, lines = [], None, [], []

    def flush():
        text = "\n".join(lines).strip("\n")
        if kind is None:
            if text.strip():
                raise ValueError(f"{source}: text before the first '# %%' line")
            return
        if kind == "markdown":
            text = "\n".join(re.sub(r"^# ?", "", ln) for ln in text.splitlines())
            cell = nbformat.v4.new_markdown_cell(text)
        else:
            cell = nbformat.v4.new_code_cell(
                "\n".join(_MAGIC.sub(r"\1", ln) for ln in text.splitlines()))
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in source.read_text().splitlines():
        match = _CELL.match(line)
        if match:
            flush()
            kind = "markdown" if match["kind"] else "code"
            tags = json.loads(match["tags"]) if match["tags"] else []
            lines = []
        else:
            lines.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids, so rebuilding changes nothing
        cell["id"] = f"{source.stem[:2]}-{i:02d}"
    return nb


def cell_sources(nb) -> list[tuple[str, str]]:
    """(cell type, source) of every cell: what must agree between a source and its notebook."""
    return [(c.cell_type, c.source) for c in nb.cells]


def keep_outputs(nb, old) -> bool:
    """Copy ``old``'s outputs into ``nb`` when their code cells are the same; True if copied.

    Text cells may differ (a conclusion written after a run keeps the run's outputs).
    """
    code = [c for c in nb.cells if c.cell_type == "code"]
    old_code = [c for c in old.cells if c.cell_type == "code"]
    if [c.source for c in code] != [c.source for c in old_code]:
        return False
    for cell, previous in zip(code, old_code):
        cell.outputs = previous.outputs
        cell.execution_count = previous.execution_count
        if "execution" in previous.metadata:
            cell.metadata["execution"] = previous.metadata["execution"]
    if "jaxsynth" in old.metadata:
        nb.metadata["jaxsynth"] = old.metadata["jaxsynth"]
    return True


def execute(nb, size: str = "full", cwd: Path = HERE, timeout: int = 3600):
    """Run ``nb`` top to bottom in a fresh ``python3`` kernel; outputs are stored in ``nb``.

    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell.
    """
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}})
    start = time.perf_counter()
    client.execute(env={**os.environ, SIZE_VARIABLE: size})
    seconds = time.perf_counter() - start
    nb.metadata["jaxsynth"] = {"size": size, "seconds": round(seconds),
                               "finished": time.strftime("%Y-%m-%d %H:%M")}
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook numbers or names (default: all)")
    parser.add_argument("--execute", action="store_true", help="run and save the outputs")
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--timeout", type=int, default=3600, metavar="SECONDS",
                        help="limit on one cell's run (default 3600)")
    args = parser.parse_args(argv)
    chosen = [s for s in sources()
              if not args.names or any(s.stem.startswith(n) for n in args.names)]
    if not chosen:
        parser.error(f"no notebook matches {args.names}")
    for source in chosen:
        nb = parse(source)
        out = target(source)
        if args.execute:
            if args.size != "full":  # the committed notebooks keep their full-size outputs
                out = Path(tempfile.gettempdir()) / out.name
            try:
                seconds = execute(nb, args.size, timeout=args.timeout)
            except Exception:
                partial = Path(tempfile.gettempdir()) / f"{source.stem}.partial.ipynb"
                nbformat.write(nb, partial)
                print(f"{source.stem} failed; what ran is in {partial}", file=sys.stderr)
                raise
            print(f"{source.stem}: ran in {seconds:.0f} s ({args.size}) -> {out}", flush=True)
        elif out.exists() and keep_outputs(nb, nbformat.read(out, 4)):
            print(f"{source.stem}: rebuilt, outputs kept")
        else:
            print(f"{source.stem}: rebuilt without outputs (code changed)")
        nbformat.write(nb, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
