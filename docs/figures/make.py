"""The guide's figures, drawn from small sweeps with fixed keys: ``python docs/figures/make.py``.

Each figure is a PNG beside this script, shown by one guide page (``FIGURES``); every key
is fixed, so a rerun on the same version draws the same numbers.  ``--out DIR`` writes
them elsewhere, ``--small`` at reduced sizes (how the slow test checks that the script
runs; the committed figures are drawn at full size).  Figures are built on
``matplotlib.figure.Figure``, never through ``pyplot``'s global state, as
``jaxsynth.experiments.plots`` builds them; matplotlib is imported only when a figure is
drawn (it is the ``plots`` extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent
DPI = 100


def _save(fig, path: Path) -> None:
    """Write ``fig`` without the software tag, so an unchanged figure is unchanged bytes."""
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})


def rates(path: Path, small: bool) -> None:
    """PMM and PrivTree on the spiral: mean certified W1 against εn, fits and theory."""
    import jaxsynth as js

    df = js.simulate([js.PMM(), js.PrivTree()], "spiral", eps=1.0,
                     n=[500, 1000] if small else [1000, 2000, 4000, 8000],
                     seeds=4 if small else 16, key=0, data_key=0, progress=False)
    _save(js.plots.rate_plot(df), path)


def precision_seeds(path: Path, small: bool) -> None:
    """A sweep to ±2 %: the seeds each cell took, and the relative half-width it reached."""
    import numpy as np
    from matplotlib.figure import Figure

    import jaxsynth as js

    target, most = (0.1, 32) if small else (0.02, 1024)
    df = js.simulate(["pmm", "privtree"], "spiral", eps=[0.5, 1, 2],
                     n=[500] if small else [1000, 2000], seeds=8, precision=target,
                     max_seeds=most, key=0, data_key=0, progress=False)
    cells = js.summarize(df).sort_values(["n", "eps", "mechanism"])
    half = (cells["ci_high"] - cells["mean"]).combine(cells["mean"] - cells["ci_low"], max)
    cells = cells.assign(relative=half / cells["mean"])
    mechanisms = sorted(cells["mechanism"].unique())
    slots = cells[["n", "eps"]].drop_duplicates().to_records(index=False).tolist()
    x = np.arange(len(slots))
    width = 0.8 / len(mechanisms)
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    seeds_ax, width_ax = fig.subplots(1, 2)
    for i, mechanism in enumerate(mechanisms):
        rows = cells[cells["mechanism"] == mechanism].set_index(["n", "eps"]).loc[slots]
        at = x + (i - (len(mechanisms) - 1) / 2) * width
        seeds_ax.bar(at, rows["seeds"], width, color=f"C{i}", label=mechanism)
        width_ax.bar(at, 100 * rows["relative"], width, color=f"C{i}", label=mechanism)
    labels = [f"n={n}\nε={eps:g}" for n, eps in slots]
    for ax in (seeds_ax, width_ax):
        ax.set_xticks(x, labels, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    seeds_ax.set_yscale("log", base=2)
    seeds_ax.axhline(most, color="0.4", ls=":", lw=1.2, label=f"max_seeds = {most}")
    seeds_ax.set_ylabel("seeds of the cell")
    seeds_ax.set_title(f"seeds each cell took to reach ±{target:.0%}", fontsize=10)
    seeds_ax.legend(fontsize=8)
    width_ax.axhline(100 * target, color="0.4", ls="--", lw=1.2, label="target")
    width_ax.set_ylabel("95 % interval's half-width, % of the mean")
    width_ax.set_title("the precision each cell reached", fontsize=10)
    width_ax.legend(fontsize=8)
    fig.suptitle("a sweep to a stated precision: certified ℓ∞ W1 on the spiral",
                 fontsize=11)
    _save(fig, path)


def measure(path: Path, small: bool) -> None:
    """One PMM and one PrivTree release of the spiral, drawn over the data."""
    import numpy as np
    from matplotlib.figure import Figure

    import jaxsynth as js

    X = js.datasets.load("spiral", n=500 if small else 2000, key=0)
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    for ax, mech in zip(fig.subplots(1, 2), (js.PMM(), js.PrivTree())):
        out = js.release(0, mech, X, eps=1.0)
        points, weights = np.asarray(out.points), np.asarray(out.weights)
        shown = weights > 0
        ax.scatter(X[:, 0], X[:, 1], s=2, color="0.7", lw=0, label="data")
        ax.scatter(points[shown, 0], points[shown, 1], s=12000 * weights[shown],
                   color="C3", alpha=0.5, lw=0, label="release (area ∝ weight)")
        ax.set_title(f"{out.mechanism}, ε = 1: {int(shown.sum())} atoms of positive "
                     f"weight", fontsize=10)
        ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", xticks=[0, 0.5, 1], yticks=[0, 0.5, 1])
        legend = ax.legend(loc="upper right", fontsize=8)
        for handle in legend.legend_handles:
            handle.set_sizes([30])
    fig.suptitle(f"a release against its data: the spiral, n = {len(X)}", fontsize=11)
    _save(fig, path)


FIGURES = {
    "rates.png": ("guide/rates.md", rates),
    "precision-seeds.png": ("guide/precision.md", precision_seeds),
    "measure.png": ("guide/releases.md", measure),
}
"""Each figure: the page (under ``docs/``) that shows it, and the function that draws it."""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="directory (default: here)")
    parser.add_argument("--small", action="store_true", help="reduced sizes (a quick check)")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"figures to draw (default all: {', '.join(FIGURES)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(FIGURES))
    if unknown:
        parser.error(f"no figure {unknown}; the figures are {list(FIGURES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names or FIGURES:
        FIGURES[name][1](args.out / name, args.small)
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
