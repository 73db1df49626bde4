"""Every bad input gets a clear refusal, before any work.

Truth: through the API, a ``ValueError`` whose message names the argument; through the
command line, exit status 2 and one line ``jaxsynth: error: ...`` on stderr, no
traceback, no file written and every existing file byte-identical.  Each case of the
issue is a row of one of the two tables below.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pandas as pd
import pytest

import jaxsynth as js
from jaxsynth import engine
from jaxsynth.cli import main
from jaxsynth.core import batching, validate
from jaxsynth.experiments import datasets
from jaxsynth.experiments.plots import depth_plot, rate_plot
from jaxsynth.experiments.rates import estimate_rate

X = js.datasets.load("spiral", n=200, key=0)
D200 = ("uniform", {"d": 200})
KEYS = jax.random.split(jax.random.key(0), 4)  # a batch of typed keys, not one key


@functools.cache
def _out():
    """A small released measure for the js.w1 cases."""
    return js.release(0, js.PMM(depth=2), X, 1.0)


def _weights(scale=1.0, first=None):
    """``_out()`` with its weights scaled (a hand-made measure), the first set to ``first``."""
    w = np.asarray(_out().weights, np.float64) * scale
    if first is not None:
        w[0] = first
    return dataclasses.replace(_out(), weights=jax.numpy.asarray(w, jax.numpy.float32))


def _table(seeds=3, sizes=(1000, 2000), w1=None) -> pd.DataFrame:
    """A small result table (two eps·n cells of ``seeds`` replicates)."""
    rows = [dict(mechanism="pmm", kind="pmm", data="spiral", n=n, d=2, intrinsic_dim=1,
                 eps=1.0, seed=s, w1_exact_lower=0.01 * (1 + s) / n ** 0.5,
                 w1_exact_upper=(1 + 0.1 * s) / n ** 0.5, metric="linf")
            for n in sizes for s in range(seeds)]
    df = pd.DataFrame(rows)
    return df if w1 is None else df.assign(**w1)


API = [
    # the cases reported against the first version
    ("PrivTree(shift='False')", lambda: js.PrivTree(shift="False"), "shift must be True or False"),
    ("simulate methods ''", lambda: js.simulate("pmm", X, methods="", progress=False),
     "methods: unknown W1 method ''"),
    ("simulate methods []", lambda: js.simulate("pmm", X, methods=[], progress=False),
     "methods must be a non-empty list"),
    ("simulate seeds 1e8", lambda: js.simulate("pmm", X, seeds=10**8, progress=False),
     "seeds: the sweep asks for 100000000 replicates"),
    ("estimate_rate single cell", lambda: estimate_rate(_table(sizes=(1000,))),
     "single eps·n value"),
    ("estimate_rate one seed", lambda: estimate_rate(_table(seeds=1)), "single replicate"),
    ("estimate_rate n = 0", lambda: estimate_rate(_table().assign(n=0)), "n must hold"),
    ("estimate_rate negative W1",
     lambda: estimate_rate(_table(w1={"w1_exact_upper": -1.0})), "w1_exact_upper must hold"),
    ("estimate_rate bad column", lambda: estimate_rate(_table(), column="w1_nope"), "w1_nope"),
    ("estimate_rate column 3", lambda: estimate_rate(_table(), column=3), "column must be"),
    ("estimate_rate by 3", lambda: estimate_rate(_table(), by=3), "by must be"),
    ("release mech='pmm'", lambda: js.release(0, "pmm", X, 1.0), "mech must be a mechanism"),
    ("release mech=PMM (the class)", lambda: js.release(0, js.PMM, X, 1.0),
     "mech must be a mechanism config such as jaxsynth.PMM(), an instance"),
    ("release_batch mech=PrivTree (the class)",
     lambda: js.release_batch(0, js.PrivTree, X, 1.0), "mech must be a mechanism config"),
    ("estimate_rate column seed", lambda: estimate_rate(_table(), column="seed"),
     "column must be a W1 column"),
    ("estimate_rate column eps", lambda: estimate_rate(_table(), column="eps"),
     "column must be a W1 column"),
    ("estimate_rate by seed", lambda: estimate_rate(_table(), by="seed"),
     "by: .'seed'. cannot group a fit"),
    ("estimate_rate by n", lambda: estimate_rate(_table(), by=["mechanism", "n"]),
     "by: .'n'. cannot group a fit"),
    ("release key='abc'", lambda: js.release("abc", js.PMM(depth=3), X, 1.0), "key must be"),
    ("PMM(root_scale='x')", lambda: js.PMM(root_scale="x"), "root_scale must be"),
    ("release_batch memory_bytes=0",
     lambda: js.release_batch(0, js.PMM(depth=3), X, 1.0, memory_bytes=0), "memory_bytes"),
    ("simulate memory_bytes=0",
     lambda: js.simulate("pmm", X, memory_bytes=0, progress=False), "memory_bytes"),
    ("release_batch seeds 2^32", lambda: js.release_batch(0, js.PMM(depth=12), X, 1.0,
                                                          seeds=2**32), "seeds: 1 ε × 4294967296"),
    ("release_batch seeds across 2^32", lambda: js.release_batch(
        0, js.PMM(depth=3), X, 1.0, seeds=range(2**32 - 1, 2**32 + 1)), "seeds must lie"),
    ("release_batch seeds [2^32]", lambda: js.release_batch(
        0, js.PMM(depth=3), X, 1.0, seeds=[2**32]), "seeds must be below 2"),
    ("simulate seeds across 2^32", lambda: js.simulate(
        "pmm", X, seeds=range(2**32 - 1, 2**32 + 1), progress=False), "seeds must lie"),
    ("release key=2^63", lambda: js.release(2**63, js.PMM(depth=3), X, 1.0), "key must be"),
    ("release_batch seeds=1.5", lambda: js.release_batch(0, js.PMM(depth=3), X, 1.0, seeds=1.5),
     "seeds must be an integer"),
    ("simulate seeds=1.5", lambda: js.simulate("pmm", X, seeds=1.5, progress=False),
     "seeds must be an integer"),
    ("release eps=True", lambda: js.release(0, js.PMM(depth=3), X, True), "eps must be"),
    ("simulate eps=True", lambda: js.simulate("pmm", X, eps=True, progress=False),
     "eps must be"),
    ("release complex data", lambda: js.release(0, js.PMM(depth=3), X.astype(complex), 1.0),
     "X must hold real numbers"),
    ("simulate complex data", lambda: js.simulate("pmm", X.astype(complex), progress=False),
     "data must hold real numbers"),
    ("release PrunedPMM(depth=200)", lambda: js.release(0, js.PrunedPMM(depth=200), X, 1.0),
     "needs depth 200 in d = 2"),
    ("release_batch PrunedPMM(depth=200)",
     lambda: js.release_batch(0, js.PrunedPMM(depth=200), X, [1.0]), "needs depth 200"),
    # and the other boundaries: booleans are booleans, numbers are numbers
    ("PMM(depth=True)", lambda: js.PMM(depth=True), "depth must be an integer"),
    ("PMM(depth=2.0)", lambda: js.PMM(depth=2.0), "depth must be an integer"),
    ("PMM(depth=10**6)", lambda: js.PMM(depth=10**6), "depth must be"),
    ("PrivTree(depth_cap='3')", lambda: js.PrivTree(depth_cap="3"), "depth_cap must be"),
    ("PrivTree(capacity=True)", lambda: js.PrivTree(capacity=True), "capacity must be"),
    ("Adaptive(eps_sel=True)", lambda: js.AdaptivePrunedPMM(eps_sel=True), "eps_sel must be"),
    ("Adaptive(C='1')", lambda: js.AdaptivePrunedPMM(C="1"), "C must be"),
    ("PMM(schedule=1)", lambda: js.PMM(schedule=1), "schedule must be one of"),
    ("simulate progress='no'", lambda: js.simulate("pmm", X, progress="no"), "progress must be"),
    ("simulate warmup=1", lambda: js.simulate("pmm", X, warmup=1, progress=False),
     "warmup must be"),
    ("simulate devices='1'", lambda: js.simulate("pmm", X, devices="1", progress=False),
     "devices must be"),
    ("simulate devices=True", lambda: js.simulate("pmm", X, devices=True, progress=False),
     "devices must be"),
    ("simulate data_key=1.0", lambda: js.simulate("pmm", X, data_key=1.0, progress=False),
     "data_key must be"),
    ("simulate metric=1", lambda: js.simulate("pmm", X, metric=1, progress=False),
     "metric must be one of ('linf', 'l2')"),
    ("simulate seeds=range(-1, 3)", lambda: js.simulate("pmm", X, seeds=range(-1, 3),
                                                         progress=False), "seeds must lie"),
    ("simulate out=True", lambda: js.simulate("pmm", X, out=True, progress=False),
     "out must be a file path"),
    ("load noise=True", lambda: datasets.load("spiral", n=10, noise=True), "noise must be"),
    ("load noise='0.1'", lambda: datasets.load("spiral", n=10, noise="0.1"), "noise must be"),
    ("load n=True", lambda: datasets.load("spiral", n=True), "n must be"),
    ("describe(3)", lambda: datasets.describe(3), "name must be a string"),
    ("rescale complex", lambda: datasets.rescale_to_unit_cube(X.astype(complex)),
     "X must hold real numbers"),
    ("rescale margin=True", lambda: datasets.rescale_to_unit_cube(X, margin=True),
     "margin must be"),
    ("prepare depth=1.5", lambda: js.prepare(X, 1.5), "depth must be"),
    ("w1 method=1", lambda: js.w1(X, js.release(0, js.PMM(depth=2), X, 1.0), method=1),
     "method: unknown W1 method 1"),
    ("rate_plot df=[1]", lambda: rate_plot([1]), "df must be a pandas DataFrame"),
    ("rate_plot unwritable path",
     lambda: rate_plot(_table(), path="/nonexistent/dir/rate.png"), "does not exist"),
    ("rate_plot path suffix", lambda: rate_plot(_table(), path="rate.txt"), "path must end in"),
    ("depth_plot df=None", lambda: depth_plot(None), "df must be a pandas DataFrame"),
    # js.w1 options (n_directions counts random directions beyond the axes: 0 given
    # explicitly is refused, the default is named by omitting it)
    ("w1 bracket n_directions=-1", lambda: js.w1(X, _out(), "bracket", n_directions=-1),
     "n_directions must be >= 1"),
    ("w1 bracket n_directions=0", lambda: js.w1(X, _out(), "bracket", n_directions=0),
     "n_directions must be >= 1"),
    ("w1 sinkhorn unknown option", lambda: js.w1(X, _out(), "sinkhorn", tolerance=0.1),
     r"unknown option(s) \['tolerance'\] for method='sinkhorn'; accepted: \['batch_size', "),
    ("w1 bracket n_directions=1.5", lambda: js.w1(X, _out(), "bracket", n_directions=1.5),
     "n_directions must be an integer"),
    ("w1 bracket n_directions=True", lambda: js.w1(X, _out(), "bracket", n_directions=True),
     "n_directions must be an integer"),
    ("w1 bracket seed='x'", lambda: js.w1(X, _out(), "bracket", seed="x"),
     "seed must be an integer"),
    ("w1 bracket seed=-1", lambda: js.w1(X, _out(), "bracket", seed=-1), "seed must be >= 0"),
    ("w1 bracket seed=True", lambda: js.w1(X, _out(), "bracket", seed=True),
     "seed must be an integer"),
    ("w1 sinkhorn key='abc'", lambda: js.w1(X, _out(), "sinkhorn", key="abc"),
     "key must be an int seed or a jax PRNG key"),
    ("w1 sinkhorn key=True", lambda: js.w1(X, _out(), "sinkhorn", key=True),
     "key must be an int seed or a jax PRNG key"),
    ("w1 sinkhorn key=-1", lambda: js.w1(X, _out(), "sinkhorn", key=-1),
     "key must be a non-negative int"),
    ("w1 sinkhorn key batch", lambda: js.w1(X, _out(), "sinkhorn", key=KEYS),
     "key must be one jax PRNG key"),
    ("simulate bracket seed='x'", lambda: js.simulate(
        "pmm", X, methods=[("bracket", {"seed": "x"})], progress=False),
     "seed must be an integer"),
    ("simulate sinkhorn key='abc'", lambda: js.simulate(
        "pmm", X, methods=[("sinkhorn", {"key": "abc"})], progress=False), "key must be"),
    ("w1 weights summing to 2", lambda: js.w1(X, _weights(2.0)),
     "out.weights must sum to 1 in every replicate"),
    ("w1 exact weights summing to 2", lambda: js.w1(X, _weights(2.0), "exact"),
     "out.weights must sum to 1"),
    ("w1 sinkhorn weights summing to 0.5", lambda: js.w1(X, _weights(0.5), "sinkhorn"),
     "out.weights must sum to 1"),
    ("w1 negative weight", lambda: js.w1(X, _weights(first=-0.1)),
     "out.weights must be finite and non-negative"),
    ("w1 NaN weight", lambda: js.w1(X, _weights(first=np.nan), "bracket"),
     "out.weights must be finite and non-negative"),
    # a batch of typed keys is not a key
    ("release key batch", lambda: js.release(KEYS, js.PMM(depth=3), X, 1.0),
     "key must be one jax PRNG key; got a batch of shape (4,)"),
    ("release_batch key batch", lambda: js.release_batch(KEYS, js.PMM(depth=3), X, 1.0,
                                                         seeds=2), "key must be one jax PRNG key"),
    ("simulate key batch", lambda: js.simulate("pmm", X, key=KEYS, progress=False),
     "key must be one jax PRNG key"),
    # the theory's columns of a result table: text is refused, not averaged or skipped
    ("estimate_rate d text", lambda: estimate_rate(_table().astype({"d": object}).assign(
        d=lambda t: t.d.where(t.seed > 0, "abc"))), "d must hold positive integers"),
    ("estimate_rate intrinsic_dim 1.5", lambda: estimate_rate(_table().assign(
        intrinsic_dim=lambda t: t.intrinsic_dim.where(t.seed > 0, 1.5))),
     "intrinsic_dim must hold positive integers"),
    ("estimate_rate d True", lambda: estimate_rate(_table().assign(d=True)),
     "d must hold positive integers"),
    ("estimate_rate eps text", lambda: estimate_rate(_table().astype({"eps": object}).assign(
        eps=lambda t: t.eps.where(t.seed > 0, "abc"))), "eps must hold positive numbers"),
    # one word per thing: a W1 method (methods=), the ground metric (metric=), a result
    # column (column=); the former names are refused naming the new one, never accepted
    ("simulate metrics=", lambda: js.simulate("pmm", X, metrics=["exact"], progress=False),
     "metrics= is now methods= (the W1 methods); metric= is the ground metric"),
    ("simulate metrics= and metric=", lambda: js.simulate(
        "pmm", X, metrics="tree", metric="l2", progress=False), "metrics= is now methods="),
    ("simulate ground=", lambda: js.simulate("pmm", X, ground="l2", progress=False),
     "ground= is now metric= (the ground metric, one of ('linf', 'l2'))"),
    ("simulate metric='exact'", lambda: js.simulate("pmm", X, metric="exact", progress=False),
     "metric is the ground metric, one of ('linf', 'l2'); got 'exact': W1 methods are chosen "
     "with methods="),
    ("simulate metric=[methods]", lambda: js.simulate(
        "pmm", X, metric=["exact", "bracket"], progress=False),
     "W1 methods are chosen with methods="),
    ("simulate methods=['l2']", lambda: js.simulate("pmm", X, methods=["l2"], progress=False),
     "methods: unknown W1 method 'l2'; known: exact, tree, tree_upper, bracket, exact1d, "
     "sinkhorn ('l2' is a ground metric: metric=)"),
    ("estimate_rate metric=", lambda: estimate_rate(_table(), metric="w1_exact_upper"),
     "metric= is now column= (the W1 column to fit"),
    ("rate_plot metric=", lambda: rate_plot(_table(), metric="w1_exact_upper"),
     "metric= is now column="),
    ("depth_plot metric=", lambda: depth_plot(_table(), metric="w1_exact_upper"),
     "metric= is now column="),
    ("w1 metric='bracket'", lambda: js.w1(X, _out(), "tree", metric="bracket"),
     "metric is the ground metric, one of ('linf', 'l2'); got 'bracket': W1 methods are "
     "chosen with method="),
    # data shaped as if transposed, and a dimension whose kernels would compile unbounded
    ("release 3 x 1000 (transposed)", lambda: js.release(0, js.PMM(), np.full((3, 1000), 0.5), 1.0),
     "X has more coordinates than points (n = 3, d = 1000): data passed transposed?"),
    ("release 20 x 5000", lambda: js.release(0, js.PMM(), np.full((20, 5000), 0.5), 1.0),
     "X has d = 5000 coordinates; at most 1024 are supported"),
    ("simulate a 3 x 1000 array", lambda: js.simulate("pmm", np.full((3, 1000), 0.5),
                                                      progress=False),
     "data has more coordinates than points (n = 3, d = 1000)"),
]


@pytest.mark.parametrize("call, match", [c[1:] for c in API], ids=[c[0] for c in API])
def test_api_refuses_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_unknown_keywords_are_still_type_errors():
    # only the former names get a ValueError naming the new one; a typo is Python's TypeError
    for call, name in [(lambda: js.simulate("pmm", X, methd="tree"), "simulate"),
                       (lambda: estimate_rate(_table(), colum="w1_exact_upper"), "estimate_rate"),
                       (lambda: rate_plot(_table(), colour="red"), "rate_plot"),
                       (lambda: depth_plot(_table(), colour="red"), "depth_plot")]:
        with pytest.raises(TypeError, match=f"{name}\\(\\) got an unexpected keyword argument"):
            call()


MEMORY = 8 * 2**30
"""The machine the memory refusals are tested on (8 GiB: a quarter, 2 GiB, per input)."""
TOO_LARGE = [
    ("PMM(depth=30) dense", lambda: js.release(0, js.PMM(depth=30), X, 1.0),
     "depth: one replicate of the dense engine's complete tree of depth 30"),
    ("PrunedPMM(depth=30, engine='dense')", lambda: js.release_batch(
        0, js.PrunedPMM(depth=30, engine="dense"), X, [1.0], seeds=2),
     "depth: one replicate of the dense engine"),
    ("simulate PMM(depth=30)", lambda: js.simulate(js.PMM(depth=30), X, methods="tree",
                                                   progress=False),
     "mechanism pmm on array (n = 200): depth: one replicate of the dense engine"),
    ("load n=10^9", lambda: datasets.load("uniform", n=10**9),
     "n, d: the data set 'uniform' [n = 1000000000, d = 2] (float64) would take 14.9 GiB"),
    ("load n=10^6 d=10^6", lambda: datasets.load("uniform", n=10**6, d=10**6),
     "n, d: the data set 'uniform' [n = 1000000, d = 1000000] (float64) would take 7.3 TiB"),
    ("simulate n=10^9", lambda: js.simulate("pmm", "uniform", n=10**9, methods="tree",
                                            progress=False),
     "data set uniform (n = 1000000000): n, d: the data set 'uniform'"),
    ("w1 bracket n_directions=10^7",
     lambda: js.w1(X, _out(), "bracket", n_directions=10**7),
     "n_directions: the data projections on 10000002 directions ([10000002, n = 200])"),
    ("simulate bracket n_directions=10^7", lambda: js.simulate(
        "pmm", X, methods=[("bracket", {"n_directions": 10**7})], progress=False),
     "data set array (n = 200): n_directions: the data projections"),
]


@pytest.mark.parametrize("call, match", [c[1:] for c in TOO_LARGE],
                         ids=[c[0] for c in TOO_LARGE])
def test_requests_too_large_for_memory_are_refused_from_their_shapes(call, match, monkeypatch):
    # truth: the size follows from the shapes alone (2^31 nodes of d + 4 words, n·d
    # float64, (d + n_directions)·n projections), refused against a quarter of the
    # machine's memory before anything that size is allocated: at once, with the sizes
    monkeypatch.setattr(validate, "host_memory", lambda: MEMORY)
    monkeypatch.setattr(engine, "result_memory", lambda device=None: MEMORY)
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        call()
    assert match in str(info.value) and "more than the 2.0 GiB allowed" in str(info.value)
    assert time.perf_counter() - start < 20


def test_memory_limits_leave_normal_uses_alone(monkeypatch):
    # n = 10^7 points in d = 10, dense trees to depth 24 and the default bracket on them
    # fit a quarter of an 8 GiB machine: none of the checks refuses them
    from jaxsynth.mechanisms.pmm import _check_dense_fits
    from jaxsynth.wasserstein.bounds import check_directions

    monkeypatch.setattr(validate, "host_memory", lambda: MEMORY)
    monkeypatch.setattr(engine, "result_memory", lambda device=None: MEMORY)
    n, d, R = 10**7, 10, 24
    validate.check_fits(8.0 * n * d, "n, d", "the data")  # datasets.load's own check
    _check_dense_fits(R, d, 4 * 2 * (2**R + 2**11) + 4 * 2**R * d + 2**R * (d + 2) * 4)
    assert check_directions(None, "linf", d, n) == 0
    assert check_directions(None, "l2", d, n) == 2
    assert check_directions(0, "l2", d, 1000) == 0  # 0: the axes alone
    assert datasets.load("uniform", n=1000, d=d).shape == (1000, d)


def test_command_line_refuses_a_data_set_too_large_for_memory(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(validate, "host_memory", lambda: MEMORY)
    monkeypatch.chdir(tmp_path)
    args = ["simulate", "--mechanism", "pmm", "--data", "uniform", "--n", "1000000000",
            "--eps", "1", "--seeds", "2", "--method", "tree", "--quiet", "--out", "x.csv"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxsynth: error: data set uniform (n = 1000000000): n, d: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mech", [js.PrivTree(), js.AdaptivePrunedPMM()],
                         ids=["privtree", "adaptive"])
def test_a_mechanism_that_cannot_run_is_refused_before_other_rows_are_written(tmp_path, mech):
    # d = 200 with the bracket (its projections): Pruned-PMM fits in 13 MiB, PrivTree and
    # Adaptive do not; nothing is written
    out = tmp_path / "d200.csv"
    with pytest.raises(ValueError, match=f"mechanism {mech.name} on uniform\\(d=200\\).*"
                                         "one replicate needs"):
        js.simulate({"pruned-pmm": js.PrunedPMM(), mech.name: mech}, D200, n=2000,
                    eps=[1.0, 4.0], seeds=2, memory_bytes=13 * 2**20, out=out, progress=False,
                    methods=["bracket"])
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- command line

SIM = ["simulate", "--mechanism", "pmm", "--data", "spiral", "--n", "200", "--depth", "3",
       "--eps", "1", "--seeds", "2", "--quiet"]


def _setup(tmp_path):
    """The files the command-line cases refer to (all must stay byte-identical)."""
    (tmp_path / "foreign.csv").write_bytes(b"a,b\n1,2\n3,4")  # no final newline
    (tmp_path / "empty.csv").write_bytes(b"")
    np.savetxt(tmp_path / "data.csv", X, delimiter=",")
    (tmp_path / "a-directory.csv").mkdir()
    table = _table()
    table.to_csv(tmp_path / "sweep.csv", index=False)
    table[table.n == 1000].to_csv(tmp_path / "one-cell.csv", index=False)
    table[table.seed == 0].to_csv(tmp_path / "one-seed.csv", index=False)
    table.assign(n=table.n.where(table.seed > 0, 0)).to_csv(tmp_path / "n0.csv", index=False)
    table.assign(w1_exact_upper=table.w1_exact_upper.where(table.seed > 0, -0.5)).to_csv(
        tmp_path / "negative.csv", index=False)
    text = table.astype({"w1_exact_upper": object})
    text.loc[1, "w1_exact_upper"] = "abc"
    text.to_csv(tmp_path / "text.csv", index=False)
    table.to_csv(tmp_path / "tree-only.csv", index=False, columns=[
        c for c in table if c not in ("w1_exact_lower", "w1_exact_upper")] + ["w1_exact_lower"])
    table.iloc[:0].to_csv(tmp_path / "header-only.csv", index=False)  # the header, no rows
    for column in ("d", "n", "eps", "intrinsic_dim"):  # text where a number belongs
        text = table.astype({column: object})
        text.loc[1, column] = "abc"
        text.to_csv(tmp_path / f"{column}-text.csv", index=False)
    table.assign(d=True).to_csv(tmp_path / "d-bool.csv", index=False)
    np.save(tmp_path / "wide.npy", np.full((3, 1000), 0.5))
    np.save(tmp_path / "tall.npy", np.full((20, 5000), 0.5))
    np.savez(tmp_path / "two.npz", first=X, second=X[:100])
    with open(tmp_path / "big.npy", "wb") as f:  # a header of 10^11 rows above 64 bytes
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (10**11, 2)})
        f.write(bytes(64))


CLI = [
    # the store refuses, before any work
    ("out foreign csv", [*SIM, "--out", "foreign.csv"], "was not written by jaxsynth"),
    ("out is the data file", [*SIM[:4], "data.csv", *SIM[5:], "--out", "data.csv"],
     "was not written by jaxsynth"),
    ("out empty file", [*SIM, "--out", "empty.csv"], "was not written by jaxsynth"),
    ("out a directory", [*SIM, "--out", "a-directory.csv"], "is a directory"),
    ("out trailing slash", [*SIM, "--out", "new.csv/"], "is a directory"),
    ("out missing directory", [*SIM, "--out", "missing/x.csv"], "does not exist"),
    ("out not csv", [*SIM, "--out", "x.json"], "out must end in .csv"),
    # bad flags and values
    ("method ''", [*SIM, "--method", "", "--out", "x.csv"],
     "--method: expected comma-separated names; got ''"),
    ("n ''", [*SIM, "--n", "", "--out", "x.csv"], "--n: expected comma-separated integers"),
    ("n ','", [*SIM, "--n", " , ", "--out", "x.csv"], "--n: expected comma-separated integers"),
    ("eps ''", [*SIM, "--eps", "", "--out", "x.csv"], "--eps: expected comma-separated numbers"),
    ("mechanism ''", [*SIM[:2], "", *SIM[3:], "--out", "x.csv"], "--mechanism: expected"),
    ("data ''", [*SIM[:4], "", *SIM[5:], "--out", "x.csv"], "--data: expected"),
    ("rate by ''", ["rate", "sweep.csv", "--by", ""], "--by: expected comma-separated names"),
    ("audit mechanism ''", ["audit", "--mechanism", ""], "--mechanism: expected"),
    ("method unknown", [*SIM, "--method", "wasserstein", "--out", "x.csv"],
     "unknown W1 method"),
    ("seeds 100000000", [*SIM, "--seeds", "100000000", "--out", "x.csv"],
     "asks for 100000000 replicates"),
    ("d = 200 privtree", ["simulate", "--mechanism", "pruned-pmm,privtree", "--data", "uniform",
                          "--d", "200", "--n", "2000", "--eps", "1,4", "--seeds", "2",
                          "--memory-mb", "13", "--method", "bracket", "--out", "x.csv"],
     "mechanism privtree on"),
    ("rate empty", ["rate", "empty.csv"], "holds no rows"),
    ("rate foreign", ["rate", "foreign.csv"], "is not a jaxsynth result table"),
    ("rate bad column", ["rate", "sweep.csv", "--column", "nope"],
     "--column must be a W1 column"),
    ("rate absent column", ["rate", "sweep.csv", "--column", "w1_nope"], "has no column w1_nope"),
    ("rate default column absent", ["rate", "tree-only.csv"], "has no column w1_exact_upper"),
    ("rate n = 0", ["rate", "n0.csv"], "n value(s) that are not a positive integer"),
    ("rate negative W1", ["rate", "negative.csv"], "w1_exact_upper value(s) that are missing"),
    ("rate non-numeric W1", ["rate", "text.csv"], "first: 'abc'"),
    ("rate header only", ["rate", "header-only.csv"], "'header-only.csv' holds no rows"),
    ("rate header only and a good file", ["rate", "sweep.csv", "header-only.csv"],
     "'header-only.csv' holds no rows"),
    ("rate d text", ["rate", "d-text.csv"],
     "'d-text.csv' holds invalid rows: 1 d value(s) that are not a positive integer "
     "(first: 'abc')"),
    ("rate d True", ["rate", "d-bool.csv"], "'d-bool.csv' holds invalid rows: 6 d value(s)"),
    ("rate intrinsic_dim text", ["rate", "intrinsic_dim-text.csv"],
     "1 intrinsic_dim value(s) that are not a positive integer"),
    ("rate n text", ["rate", "n-text.csv"],
     "'n-text.csv' holds invalid rows: 1 n value(s) that are not a positive integer"),
    ("rate eps text", ["rate", "eps-text.csv"],
     "'eps-text.csv' holds invalid rows: 1 eps value(s) that are not a positive number"),
    ("rate unwritable plot", ["rate", "sweep.csv", "--plot", "/nonexistent/x.png"],
     "does not exist"),
    ("rate plot suffix", ["rate", "sweep.csv", "--plot", "x.txt"], "--plot must end in"),
    ("rate single cell", ["rate", "one-cell.csv"], "single eps·n value"),
    ("rate one seed", ["rate", "one-seed.csv"], "single replicate"),
    ("rate by unknown", ["rate", "sweep.csv", "--by", "colour"], "--by"),
    ("rate n-boot 0", ["rate", "sweep.csv", "--n-boot", "0"], "--n-boot"),
    ("rate level 2", ["rate", "sweep.csv", "--level", "2"], "level must be"),
    ("rate missing file", ["rate", "nowhere.csv"], "not found"),
    ("seeds 1.5", [*SIM, "--seeds", "1.5", "--out", "x.csv"], "--seeds"),
    ("seeds 0", [*SIM, "--seeds", "0", "--out", "x.csv"], "--seeds"),
    ("first-seed -1", [*SIM, "--first-seed", "-1", "--out", "x.csv"], "--first-seed"),
    ("eps true", [*SIM, "--eps", "true", "--out", "x.csv"], "--eps"),
    ("eps nan", [*SIM, "--eps", "nan", "--out", "x.csv"],
     "argument --eps: expected a number, finite; got 'nan'"),
    ("memory-mb 0", [*SIM, "--memory-mb", "0", "--out", "x.csv"], "--memory-mb"),
    ("memory-mb nan", [*SIM, "--memory-mb", "nan", "--out", "x.csv"], "--memory-mb"),
    ("key abc", [*SIM, "--key", "abc", "--out", "x.csv"], "--key"),
    ("key -1", [*SIM, "--key", "-1", "--out", "x.csv"],
     "--key: expected an integer in 0..2^63 - 1; got '-1'"),
    ("key 2^63", [*SIM, "--key", str(2**63), "--out", "x.csv"],
     "--key: expected an integer in 0..2^63 - 1"),
    ("data-key 10^30", [*SIM, "--data-key", "9" * 30, "--out", "x.csv"],
     "--data-key: expected an integer in 0..2^63 - 1"),
    ("data-key -1", [*SIM, "--data-key", "-1", "--out", "x.csv"], "--data-key: expected"),
    ("first-seed across 2^32", [*SIM, "--first-seed", str(2**32 - 1), "--out", "x.csv"],
     "--first-seed 4294967295 + --seeds 2 passes the last seed, 2^32 - 1"),
    ("first-seed 2^32", [*SIM, "--first-seed", str(2**32), "--out", "x.csv"],
     "--first-seed: expected an integer in 0..2^32 - 1"),
    ("seeds 10^30", [*SIM, "--seeds", "9" * 30, "--out", "x.csv"],
     "--seeds: expected an integer in 1..2^32"),
    ("seeds 2^32 + 1", [*SIM, "--seeds", str(2**32 + 1), "--out", "x.csv"],
     "--seeds: expected an integer in 1..2^32"),
    ("cluster-timeout 1e30", [*SIM, "--out", "x.csv", "--cluster-timeout", "1e30"],
     "--cluster-timeout: expected a number of seconds in (0, 86400]; got '1e30'"),
    ("cluster-timeout inf", [*SIM, "--out", "x.csv", "--cluster-timeout", "inf"],
     "--cluster-timeout: expected a number of seconds in (0, 86400]"),
    ("launch port 70000", ["launch", "--local", "2", "--port", "70000", *SIM, "--out", "x.csv"],
     "--port: expected an integer in 1..65535"),
    ("data file 3 x 1000 (transposed)", [*SIM[:4], "wide.npy", *SIM[5:], "--out", "x.csv"],
     "has more coordinates than points (n = 3, d = 1000)"),
    ("data file 20 x 5000, pmm and the bracket",
     [*SIM[:4], "tall.npy", *SIM[5:], "--method", "bracket", "--out", "x.csv"],
     "has d = 5000 coordinates; at most 1024 are supported"),
    ("out 250-character name", [*SIM, "--out", "o" * 246 + ".csv"],
     "--out: the file name is 250 bytes long"),
    ("depth 200", [*SIM, "--depth", "200", "--out", "x.csv"], "needs depth 200 in d = 2"),
    ("n 0", [*SIM, "--n", "0", "--out", "x.csv"], "n must be"),
    ("d for spiral", [*SIM, "--d", "3", "--out", "x.csv"], "d must be 2"),
    ("unknown mechanism", [*SIM[:2], "pmmm", *SIM[3:], "--out", "x.csv"], "unknown mechanism"),
    ("demo seeds 0", ["demo", "--seeds", "0"], "--seeds: expected an integer in 2..2^32"),
    ("demo seeds 1", ["demo", "--seeds", "1"], "--seeds: expected an integer in 2..2^32"),
    ("rate column seed", ["rate", "sweep.csv", "--column", "seed"], "column must be a W1"),
    ("rate column eps", ["rate", "sweep.csv", "--column", "eps"], "column must be a W1"),
    ("rate by seed", ["rate", "sweep.csv", "--by", "seed"], "by: ['seed'] cannot group"),
    ("audit mechanism pmm,pmm", ["audit", "--mechanism", "pmm,pmm"],
     "--mechanism names pmm more than once"),
    ("demo out-dir a file", ["demo", "--out-dir", "foreign.csv"], "is not a directory"),
    ("demo out-dir under a file", ["demo", "--out-dir", "foreign.csv/sub"],
     "--out-dir foreign.csv/sub cannot be created"),
    # the former flags: refused naming the new one (--method: W1 methods, --metric: the
    # ground metric, --column: the column rate fits)
    ("simulate --ground", [*SIM, "--ground", "l2", "--out", "x.csv"],
     "jaxsynth: error: --ground is now --metric (the ground metric: linf or l2)\n"),
    ("simulate --ground alone", ["simulate", "--ground", "l2"],
     "jaxsynth: error: --ground is now --metric"),
    ("simulate --metric exact", [*SIM, "--metric", "exact", "--out", "x.csv"],
     "--metric is the ground metric (linf or l2); got 'exact': W1 methods are chosen with "
     "--method (--method exact)"),
    ("simulate --metric exact,bracket", [*SIM, "--metric", "exact,bracket", "--out", "x.csv"],
     "W1 methods are chosen with --method (--method exact,bracket)"),
    ("simulate --metric l1", [*SIM, "--metric", "l1", "--out", "x.csv"],
     "--metric: expected a ground metric, linf or l2; got 'l1'"),
    ("simulate --method l2", [*SIM, "--method", "l2", "--out", "x.csv"],
     "--method: 'l2' is a ground metric, chosen with --metric l2"),
    ("rate --metric", ["rate", "sweep.csv", "--metric", "w1_exact_upper"],
     "jaxsynth: error: --metric is now --column (the W1 column to fit"),
    # one parser for every number, list and name: no empty item, ASCII digits, finite
    *[(f"eps {v}", [*SIM, "--eps", v, "--out", "x.csv"],
       f"argument --eps: expected comma-separated numbers; got '{v}' (empty items are not "
       "allowed)") for v in ("1,,2", "1,", ",1")],
    ("mechanism pmm,", [*SIM[:2], "pmm,", *SIM[3:], "--out", "x.csv"],
     "argument --mechanism: expected comma-separated names; got 'pmm,' (empty items"),
    ("data spiral,", [*SIM[:4], "spiral,", *SIM[5:], "--out", "x.csv"],
     "argument --data: expected comma-separated names; got 'spiral,' (empty items"),
    ("method ' ,tree'", [*SIM, "--method", " ,tree", "--out", "x.csv"],
     "argument --method: expected comma-separated names; got ' ,tree' (empty items"),
    ("n 200,,400", [*SIM, "--n", "200,,400", "--out", "x.csv"],
     "argument --n: expected comma-separated integers; got '200,,400' (empty items"),
    *[(f"{option} in Arabic-Indic digits", [*SIM, option, "٣", "--out", "x.csv"],
       f"argument {option}: expected {what} (digits in ASCII, 0-9); got '٣'")
      for option, what in [("--n", "an integer"), ("--seeds", "an integer in 1..2^32"),
                           ("--depth", "an integer"), ("--key", "an integer in 0..2^63 - 1"),
                           ("--data-key", "an integer in 0..2^63 - 1"),
                           ("--memory-mb", "a positive number of MiB"),
                           ("--first-seed", "an integer in 0..2^32 - 1"),
                           ("--d", "an integer"), ("--eps", "a number")]],
    ("n in fullwidth digits", [*SIM, "--n", "２００", "--out", "x.csv"],
     "argument --n: expected an integer (digits in ASCII, 0-9); got '２００'"),
    ("n 200,٣", [*SIM, "--n", "200,٣", "--out", "x.csv"],
     "argument --n: expected an integer (digits in ASCII, 0-9); got '٣' in '200,٣'"),
    ("eps 1e309", [*SIM, "--eps", "1e309", "--out", "x.csv"],
     "argument --eps: expected a number; got '1e309', beyond the largest float64"),
    ("eps 1e308 (eps n beyond the largest float)",
     ["simulate", "--mechanism", "pmm", "--data", "spiral", "--n", "200", "--eps", "1e308",
      "--seeds", "2", "--out", "x.csv"],
     "needs depth 1031 in d = 2 (516 digits per coordinate) but W1 is measured on trees of at "
     "most 100 digits per coordinate (depth <= 199); lower the depth (a default depth grows "
     "with log2(eps n): lower eps)"),
    ("memory-mb 1e30", [*SIM, "--memory-mb", "1e30", "--out", "x.csv"],
     "--memory-mb 1e+30: more than the whole memory of this cpu device"),
    ("precision 1.5", [*SIM, "--precision", "1.5", "--max-seeds", "8", "--out", "x.csv"],
     "argument --precision: expected a relative half-width in (0, 1), e.g. 0.02 for ±2%; got "
     "'1.5'"),
    ("precision without max-seeds", [*SIM, "--precision", "0.1", "--out", "x.csv"],
     "--max-seeds: --precision needs the most seeds a cell may get (e.g. --max-seeds 1024)"),
    ("platform ''", ["--platform", "", "rate", "sweep.csv"],
     "argument --platform: expected comma-separated JAX platform names (cpu, cuda, rocm, "
     "tpu); got '' (empty items are not allowed)"),
    ("platform 'cpu,'", ["--platform", "cpu,", "rate", "sweep.csv"],
     "argument --platform: expected comma-separated JAX platform names"),
    ("level nan", ["rate", "sweep.csv", "--level", "nan"],
     "argument --level: expected a number, finite; got 'nan'"),
    ("column ''", ["rate", "sweep.csv", "--column", " "], "argument --column: expected a name"),
    ("local-device-ids 0,", [*SIM, "--out", "x.csv", "--local-device-ids", "0,"],
     "argument --local-device-ids: expected comma-separated integers; got '0,'"),
    ("launch local in Arabic-Indic digits", ["launch", "--local", "٢", *SIM, "--out", "x.csv"],
     "argument --local: expected a positive integer (digits in ASCII, 0-9); got '٢'"),
    ("demo out-dir ''", ["demo", "--out-dir", ""], "argument --out-dir: expected a directory"),
    ("audit replicates in Arabic-Indic digits", ["audit", "--replicates", "١٠٠٠"],
     "argument --replicates: expected an integer (digits in ASCII, 0-9); got '١٠٠٠'"),
    ("audit eps 1e309", ["audit", "--eps", "1e309"],
     "argument --eps: expected a number; got '1e309', beyond the largest float64"),
    ("audit replicates 10^12", ["--no-cache", "audit", "--mechanism", "pmm", "--replicates",
                                str(10**12), "--quiet"],
     "replicates: the features of 1000000000000 releases per data set (13 per release, "
     "float64, two data sets) would take 203.7 TiB, more than the"),
    # files: the memory their header declares, one array per archive
    ("data file declaring 10^11 rows", [*SIM[:4], "big.npy", *SIM[5:], "--out", "x.csv"],
     "data file big.npy: its array of shape (100000000000, 2) (declared in its header), as "
     "float64, would take 1.5 TiB, more than the"),
    ("data file of two arrays", [*SIM[:4], "two.npz", *SIM[5:], "--out", "x.csv"],
     "data file two.npz holds 2 arrays (first, second); name the one to use: array='first' "
     "(on the command line, --data-array first)"),
    ("data-array not in the file", [*SIM[:4], "two.npz", *SIM[5:], "--data-array", "third",
                                    "--out", "x.csv"],
     "array 'third' not in the archive; it holds ['first', 'second']"),
    ("data-array without an archive", [*SIM, "--data-array", "first", "--out", "x.csv"],
     "--data-array first names an array of an .npz file; --data spiral has none"),
    ("data-array ''", [*SIM[:4], "two.npz", *SIM[5:], "--data-array", "", "--out", "x.csv"],
     "argument --data-array: expected a name; got ''"),
    # messages that say what was asked for
    ("bracket at depth 70", [*SIM, "--depth", "70", "--method", "bracket", "--out", "x.csv"],
     "depth=70: pmm releases on the complete tree of depth 70 (2^71 - 1 nodes; its dense "
     "engine goes to depth 30), whatever W1 method measures it; use a smaller depth, or "
     "PrunedPMM(engine='sparse') (the command line: --mechanism pruned-pmm)"),
]


@pytest.mark.parametrize("args, match", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_command_line_refuses_in_one_line_with_status_2(args, match, tmp_path, monkeypatch,
                                                        capsys):
    _setup(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("jaxsynth: error: ") and err.count("\n") == 1, err
    assert match in err and "Traceback" not in err
    assert captured.out == ""  # refused before any work: nothing computed, nothing printed
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before  # nothing written, nothing changed


def test_the_installed_command_prints_no_traceback(tmp_path):
    _setup(tmp_path)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for args, match in [([*SIM, "--out", "foreign.csv"], "was not written by jaxsynth"),
                        (["rate", "text.csv"], "first: 'abc'")]:
        proc = subprocess.run([sys.executable, "-m", "jaxsynth", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.startswith("jaxsynth: error: ") and match in proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert (tmp_path / "foreign.csv").read_bytes() == b"a,b\n1,2\n3,4"


def test_a_cache_directory_that_cannot_be_used_warns_and_the_run_goes_on(tmp_path,
                                                                        monkeypatch, capsys):
    from jaxsynth.compilation import enable_compilation_cache

    monkeypatch.delenv("JAXSYNTH_NO_CACHE", raising=False)  # conftest turns the cache off
    (tmp_path / "a-file").write_bytes(b"x")
    for where in (tmp_path / "a-file", tmp_path / "a-file" / "xla"):
        with pytest.warns(RuntimeWarning, match="running without the cache"):
            assert enable_compilation_cache(where) is None
        monkeypatch.setenv("JAXSYNTH_CACHE_DIR", str(where))
        with pytest.warns(RuntimeWarning, match="running without the cache"):
            assert main(["rate", str(tmp_path / "nowhere.csv")]) == 2  # ran on: refused later
        assert "nowhere.csv' not found" in capsys.readouterr().err
    assert (tmp_path / "a-file").read_bytes() == b"x"


def test_rates_of_huge_w1_values_are_the_rates_of_their_scaled_values():
    # truth: log E W1 shifts by a constant when W1 is scaled, so the slope is unchanged
    df = _table(seeds=4, sizes=(1000, 2000, 4000))
    small = estimate_rate(df, column="w1_exact_upper", n_boot=50)
    huge = estimate_rate(df.assign(w1_exact_upper=df.w1_exact_upper * 2.0**1020), column="w1_exact_upper",
                         n_boot=50)
    assert np.isfinite(huge.slope[0])
    np.testing.assert_allclose(huge[["slope", "ci_low", "ci_high"]],
                               small[["slope", "ci_low", "ci_high"]], rtol=1e-12)
    with_max = estimate_rate(df.assign(w1_exact_upper=np.where(df.n == 1000, 1e308, 1e300)),
                             column="w1_exact_upper", n_boot=50)
    assert with_max.slope[0] == pytest.approx(np.polyfit(
        np.log([1000, 2000, 4000]), np.log([1e308, 1e300, 1e300]), 1)[0], rel=1e-9)


def test_data_that_look_transposed_are_refused_with_advice_that_applies():
    """n = 3 points in d = 40: the advice is the transpose (no entry point takes them as
    they stand); at most ``WIDE_FROM`` coordinates, few points are data as they stand."""
    wide = np.random.default_rng(0).random((3, 40))
    for call in (lambda: validate.check_data(wide),
                 lambda: js.release(0, js.PMM(depth=3), wide, 1.0)):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == (
            "X has more coordinates than points (n = 3, d = 40): data passed transposed? "
            "Pass its transpose (n = 40 points in d = 3); beyond d = 16, at least d points "
            "are needed")
    small = np.random.default_rng(0).random((3, validate.WIDE_FROM))  # too few to mistake
    np.testing.assert_array_equal(validate.check_data(small), small)


@pytest.mark.parametrize("given", [False, True])
def test_a_chunk_too_small_for_one_replicate_names_its_memory_and_whether_it_was_given(given):
    # truth: the device's default chunk memory on a CPU is batching.DEFAULT_MEMORY_BYTES;
    # a replicate 5 bytes larger must read as larger (no rounding to the same figure)
    need = batching.DEFAULT_MEMORY_BYTES + 5
    memory = batching.DEFAULT_MEMORY_BYTES if given else None
    with pytest.raises(ValueError) as info:
        engine.chunk_size(need, 1, memory, "cpu")
    budget = "memory_bytes is 2.000000000 GiB" if given else (
        "a chunk may use 2.000000000 GiB, the device's memory for one chunk (the default, as "
        "memory_bytes was not given: 2 GiB on a CPU, 60% of an accelerator's free memory)")
    assert str(info.value) == (f"one replicate needs 2.000000005 GiB but {budget}; raise "
                               "memory_bytes (the command line: --memory-mb) or reduce the "
                               "depth or n")


@pytest.mark.parametrize("a, b", [(2**31 + 5, 2**31), (3 * 2**30, 2**31), (2**40 + 1, 2**40),
                                  (1000, 999), (5 * 2**20, 5 * 2**20)])
def test_sizes_in_words_tell_different_sizes_apart(a, b):
    # truth: the words read back (number × unit) within their last digit, and differ
    # exactly when the sizes do
    words = validate.sizes(a, b)
    assert (words[0] != words[1]) == (a != b)
    units = {"TiB": 2**40, "GiB": 2**30, "MiB": 2**20, "bytes": 1}
    for size, word in zip((a, b), words):
        number, unit = word.split()
        digits = len(number.partition(".")[2])
        assert abs(float(number) * units[unit] - size) <= 0.5 * 10**-digits * units[unit]


def test_privtree_default_depth_fits_the_deepest_data_tree():
    """``PrivTree()`` runs in every dimension up to 1024: its default cap, a multiple of d,
    is the largest that the data tree (4096 levels) holds; an explicit cap beyond it is
    refused naming ``depth_cap``."""
    from jaxsynth.core.datatree import MAX_DEPTH
    from jaxsynth.mechanisms.privtree import MAX_BISECTIONS, default_depth_cap

    for d in (2, 186, 187, 341, 342, 1000, 1024):
        k = min(MAX_BISECTIONS, 12)  # eps n = 2000: ceil(log2 2000) + 1 levels a coordinate
        assert default_depth_cap(2000, d, 1.0) == min(k, MAX_DEPTH // d) * d <= MAX_DEPTH
    assert default_depth_cap(2000, 2, 1e308) == MAX_BISECTIONS * 2  # eps n past the floats
    Y = np.random.default_rng(0).random((400, 400))
    depth = js.PrivTree().data_depth(400, 400, 1.0)  # the data tree a release builds
    assert depth == 4000 and js.prepare(Y, depth).depth == 4000
    with pytest.raises(ValueError, match=r"depth_cap=4200 exceeds the deepest data tree, 4096 "
                                         r"levels \(the default cap in d = 400 is at most 4000\)"):
        js.release(0, js.PrivTree(depth_cap=4200), Y, 1.0)


@pytest.mark.slow
def test_privtree_releases_with_its_default_depth_in_400_dimensions():
    from jaxsynth.core.datatree import MAX_DEPTH

    Y = np.random.default_rng(0).random((400, 400))
    out = js.release(0, js.PrivTree(), Y, 1.0)
    assert 0 < out.leaf_depth.max() <= MAX_DEPTH // 400 * 400
    assert float(out.weights.sum()) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("mech", ["pmm", "pruned-pmm", "adaptive-pruned-pmm", "privtree"])
def test_budgets_whose_product_with_n_overflows_are_refused_or_run(mech):
    # eps n = 2e310 is past the largest float: the depth rules take log2 eps + log2 n
    # (1030.8) instead of failing on log2(inf); PrivTree's cap is 22 bisections per
    # coordinate whatever eps n beyond 2^22
    from jaxsynth.mechanisms.registry import mechanism
    from jaxsynth.mechanisms.schedules import default_depth, log2_product

    assert log2_product(1e308, 200) == pytest.approx(np.log2(1e308) + np.log2(200), rel=1e-15)
    assert log2_product(0.5, 2048) == 10.0 and default_depth(1e308, 200) == 1031
    m = mechanism(mech)
    if mech == "privtree":
        assert m.data_depth(200, 2, 1e308) == 44
    else:
        with pytest.raises(ValueError, match="lower eps"):
            validate.check_measurable(m, 200, 2, np.array([1e308]))
