"""Tests of the sweep (jaxsynth/experiments/sweep.py, grid.py, rows.py and the evaluation,
jaxsynth/wasserstein/evaluate.py).

Truth: every row equals ``js.release(fold_in(key, seed), M, X, eps)`` measured with
``js.w1``; chunking, resuming and device count must not change a number.  Shapes are
kept few and small (XLA compilation dominates the runtime).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pandas as pd
import pytest

import jaxsynth as js
from jaxsynth.experiments.grid import data_sets
from jaxsynth.experiments.sweep import simulate
from jaxsynth.core.measure import canonical_atoms
from jaxsynth.mechanisms.registry import depth_sweep, mechanism
from jaxsynth.wasserstein import w1
from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn

MECHS = [js.PMM(depth=4), js.PrunedPMM(depth=4)]  # the shapes tests/test_cli.py uses
EPS = [1.0, 2.0]
TIMING = ["seconds", "release_seconds", "measure_seconds"]


@pytest.fixture(scope="module")
def X():
    return js.datasets.load("spiral", n=300, key=3)


METHODS = ["tree", "bracket"]


@pytest.fixture(scope="module")
def table(X):
    return simulate(MECHS, X, eps=EPS, seeds=4, methods=METHODS, key=7, progress=False)


def _numbers(df):
    return df.drop(columns=TIMING)


def test_rows_equal_release_and_w1_per_replicate(X, table):
    assert len(table) == 2 * len(EPS) * 4
    assert list(table[["mechanism", "eps", "seed"]].itertuples(index=False)) == sorted(
        (m.name, e, s) for m in MECHS for e in EPS for s in range(4))
    for mech in MECHS:
        for e in EPS:
            for s in (0, 3):
                row = table[(table.mechanism == mech.name) & (table.eps == e) & (table.seed == s)]
                out, diag = js.release(jax.random.fold_in(jax.random.key(7), s), mech, X, e,
                                       diagnostics=True)
                assert int(row.m.iloc[0]) == int(out.size)
                assert int(row.leaves.iloc[0]) == int(out.leaves)
                assert int(row.visited.iloc[0]) == int(out.visited)
                assert int(row.depth.iloc[0]) == int(out.depth) == 4
                assert row.epsilon.iloc[0] == pytest.approx(out.accounting["epsilon"], rel=1e-6)
                # the kernel's own tree W1: the same number in a chunk of one or of many
                assert row.w1_tree.iloc[0] == float(diag["tree_linf"])
                # and the general formula (atoms sorted again): float32 rounding apart
                assert row.w1_tree.iloc[0] == pytest.approx(float(w1(X, out, method="tree")),
                                                            rel=2e-6)
    assert (table.adjacency == "replacement").all()
    assert set(table.kind) == {"pmm", "pruned-pmm"}
    assert (table.n == 300).all() and (table.d == 2).all() and (table.data == "array").all()
    assert (table.intrinsic_dim == 2).all()  # arrays carry no geometry: d
    assert (table.seconds >= table.release_seconds).all() and (table.release_seconds > 0).all()
    # release and measurement apart, per replicate: seconds is their sum
    assert (table.measure_seconds > 0).all()
    np.testing.assert_allclose(table.seconds, table.release_seconds + table.measure_seconds)


def test_chunk_size_does_not_change_results(X, table):
    # 160 kB holds two replicates per chunk: chunks of two instead of one of eight
    small = simulate(MECHS, X, eps=[1.0], seeds=4, methods=METHODS, key=7, progress=False,
                     memory_bytes=160_000)
    pd.testing.assert_frame_equal(_numbers(small),
                                  _numbers(table[table.eps == 1.0]).reset_index(drop=True),
                                  check_exact=True)


def test_replicate_values_do_not_depend_on_the_rest_of_the_sweep(X, table):
    # A replicate's every number, the bracket's lower end included, must not depend on
    # the other replicates of its chunk or the eps list (the chunk size: the test below).
    # (Measured on the whole chunk at once, the lower end moved here by 4e-9 to 7e-9.)
    for eps, seeds in (([2.0], [1, 3]), ([1.0], [0, 1, 2]), ([1.0, 2.0], [2])):
        part = simulate(MECHS, X, eps=eps, seeds=seeds, methods=METHODS, key=7,
                        progress=False)
        mine = table.set_index(["mechanism", "eps", "seed"]).loc[
            list(zip(part.mechanism, part.eps, part.seed))].reset_index()
        pd.testing.assert_frame_equal(_numbers(part), _numbers(mine)[list(part.columns[
            ~part.columns.isin(TIMING)])], check_exact=True)
    assert (table.w1_lower > 0).all() and (table.w1_lower < table.w1_upper).all()


@pytest.mark.slow
def test_replicates_at_the_ambient_depth_do_not_depend_on_the_eps_list_or_seed_split(X):
    # Truth: replicate (mechanism, eps, seed) is js.release(fold_in(key, seed), M, X, eps)
    # alone, bit for bit.  At the ambient depth PrunedPMM(engine='auto') runs eps = 1
    # (depth 9, 2^9 <= 2n) on the dense engine and eps = 8 (depth 12) on the sparse one;
    # planned together, eps = 1 ran on the sparse engine and its fused tree W1 moved by
    # one float32 ulp (3e-8) at seeds 0 and 3 (sweep.py plans each engine group apart).
    mechs = [js.PrunedPMM(), js.PrivTree()]
    assert [g.tolist() for g in js.PrunedPMM().eps_groups(300, [1.0, 8.0])] == [[0], [1]]
    whole = simulate(mechs, X, eps=[1.0, 8.0], seeds=range(4), methods=METHODS, key=7,
                     progress=False)
    for eps, seeds in (([1.0], range(2, 4)), ([8.0], [3]), ([8.0, 1.0], [0])):
        part = simulate(mechs, X, eps=eps, seeds=seeds, methods=METHODS, key=7,
                        progress=False)
        mine = whole.set_index(["mechanism", "eps", "seed"]).loc[
            list(zip(part.mechanism, part.eps, part.seed))].reset_index()
        pd.testing.assert_frame_equal(_numbers(part), _numbers(mine)[list(part.columns[
            ~part.columns.isin(TIMING)])], check_exact=True)  # bitwise, not to rtol 1e-5
    for seed in (0, 3):  # and the kernel's tree W1 is that of the release of eps alone
        row = whole[(whole.mechanism == "pruned-pmm") & (whole.eps == 1.0) & (whole.seed == seed)]
        _, diag = js.release(jax.random.fold_in(jax.random.key(7), seed), js.PrunedPMM(), X,
                             1.0, diagnostics=True)
        assert row.w1_tree.iloc[0] == float(diag["tree_linf"])


def test_resume_skips_done_units_and_ends_identical(X, table, tmp_path):
    out = tmp_path / "sweep.csv"
    first = simulate(MECHS[:1], X, eps=EPS, seeds=4, key=7, out=out, progress=False,
                     methods=METHODS)
    assert len(pd.read_csv(out)) == 8
    full = simulate(MECHS, X, eps=EPS, seeds=4, key=7, out=out, progress=False, methods=METHODS)
    on_disk = pd.read_csv(out, dtype={"key": str})
    pd.testing.assert_frame_equal(_numbers(full), _numbers(on_disk), check_dtype=False)
    pd.testing.assert_frame_equal(_numbers(full), _numbers(table), check_dtype=False)
    # the PMM rows were not recomputed: their timings are those of the first run
    np.testing.assert_array_equal(full.seconds[:8], first.seconds)


def test_resume_refuses_rows_of_another_configuration(X, tmp_path):
    out = tmp_path / "sweep.csv"
    simulate(MECHS[:1], X, eps=EPS, seeds=4, key=7, out=out, progress=False)
    with pytest.raises(ValueError, match="made with"):
        simulate({"pmm": js.PMM(depth=4, schedule="uniform")}, X, eps=EPS, seeds=4, key=7,
                 out=out, progress=False)
    with pytest.raises(ValueError, match="different key"):
        simulate(MECHS[:1], X, eps=EPS, seeds=4, key=8, out=out, progress=False)


def test_named_data_sets(table):
    df = simulate({"pmm4": MECHS[0]}, [("spiral", {"noise": 0.0}), "uniform"], eps=EPS,
                  seeds=4, n=300, key=7, progress=False, data_key=3, methods=METHODS)
    assert list(dict.fromkeys(df.data)) == ["spiral(noise=0.0)", "uniform"]
    assert (df.mechanism == "pmm4").all() and (df.kind == "pmm").all() and (df.n == 300).all()
    assert dict(zip(df.data, df.intrinsic_dim)) == {"spiral(noise=0.0)": 1, "uniform": 2}
    # spiral n=300 with data_key=3 is the fixture's array: the same numbers
    mine = df[df.data == "spiral(noise=0.0)"].reset_index(drop=True)
    ref = table[table.mechanism == "pmm"].reset_index(drop=True)
    labels = ["mechanism", "data", "intrinsic_dim", "data_key"]
    pd.testing.assert_frame_equal(_numbers(mine).drop(columns=labels),
                                  _numbers(ref).drop(columns=labels))


def test_data_and_sizes_expand_in_order(X):
    with pytest.raises(ValueError, match="exceeds the 300 points"):
        data_sets(X, [200, 400], 0)
    sets = data_sets({"a": "spiral", "b": ("subspace", {"d": 3, "k": 2})}, [200, 500], 4)
    assert [(ds.label, ds.n, ds.data_key) for ds in sets] == [
        ("a", 200, 4), ("a", 500, 4), ("b", 200, 4), ("b", 500, 4)]
    X3, _, s = sets[3].load([js.PMM()], [1.0])
    assert X3.shape == (500, 3) and s == 2
    sets = data_sets([("subspace", {"d": 3, "k": 2}), X], None, 0)
    assert [(ds.label, ds.n) for ds in sets] == [("subspace(d=3,k=2)", 10_000), ("array", 300)]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mechanisms=[]), "mechanisms"),
        (dict(mechanisms=["nope"]), "unknown mechanism"),
        (dict(mechanisms=[js.PMM(), js.PMM(depth=3)]), "duplicate labels"),
        (dict(eps=[1.0, 1.0]), "eps has duplicate"),
        (dict(eps=[0.0]), "eps"),
        (dict(seeds=0), "seeds"),
        (dict(seeds=[1, 1]), "seeds has duplicate"),
        (dict(methods=["wasserstein"]), "unknown W1 method"),
        (dict(methods=["linf"]), "'linf' is a ground metric: metric="),
        (dict(metric="l1"), "metric must be one of"),
        (dict(metric="exact"), "W1 methods are chosen with methods="),
        (dict(metric=["exact", "bracket"]), "W1 methods are chosen with methods="),
        (dict(metrics=["tree"]), "metrics= is now methods="),
        (dict(ground="l2"), "ground= is now metric="),
        (dict(n=[1000]), "exceeds the 300 points"),
        (dict(out="table.json"), "out must end in .csv"),
        (dict(devices=99), "devices"),
        (dict(data=np.full((5, 2), 2.0)), "outside"),
        (dict(data=("spiral", {"key": 1})), "data_key"),
        (dict(data="no-such-shape"), "unknown data set"),
    ],
)
def test_bad_arguments_raise_value_error(X, kwargs, match):
    args = dict(mechanisms=MECHS[:1], data=X, eps=[1.0], seeds=2, progress=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        simulate(args.pop("mechanisms"), args.pop("data"), **args)


def test_mechanism_names_and_depth_sweep():
    assert mechanism("pmm", depth=6) == js.PMM(depth=6)
    assert mechanism("Pruned_PMM") == js.PrunedPMM()
    with pytest.raises(ValueError, match="depth does not apply"):
        mechanism("adaptive-pruned-pmm", depth=5)
    with pytest.raises(ValueError, match="bad options"):
        mechanism("pmm", colour="red")
    sweep = depth_sweep(js.PrunedPMM(), [3, 5])
    assert sweep == {"pruned-pmm r=3": js.PrunedPMM(depth=3),
                     "pruned-pmm r=5": js.PrunedPMM(depth=5)}


_DEVICES_SCRIPT = textwrap.dedent(
    """
    import json
    import jax
    import jaxsynth as js
    from jaxsynth import engine
    from jaxsynth.core.keys import replicate_keys
    from jaxsynth.experiments.sweep import simulate
    assert jax.local_device_count() == 2, jax.local_devices()
    X = js.datasets.load("spiral", n=300, key=3)
    mech = js.PrunedPMM(depth=4)
    two = simulate(mech, X, eps=[1.0, 2.0], seeds=4, key=7, progress=False,
                   methods=["tree", "bracket"])
    plan = mech.plan(js.prepare(X, 4), [1.0, 2.0])
    seen = []
    def spy(out):
        seen.append([list(s.data.shape) for s in out["weights"].addressable_shards])
        return out
    engine.run(plan, replicate_keys(7, 4), devices=jax.local_devices(), chunk=4, reduce=spy)
    print(json.dumps(dict(
        two=two.drop(columns=["seconds", "release_seconds", "measure_seconds"]).to_dict("list"),
        shards=seen,
    )))
    """
)


@pytest.mark.slow
def test_two_devices_shard_seeds_and_match_one_device(table):
    flags = os.environ.get("XLA_FLAGS", "")  # the same compiler options as this process
    env = dict(os.environ, XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _DEVICES_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    # the release really ran split over both devices: each chunk of 4 as 2 + 2
    assert [[s[0] for s in chunk] for chunk in res["shards"]] == [[2, 2], [2, 2]]
    # and the two-device sweep equals this process's single-device sweep, number for number
    mine = _numbers(table[table.kind == "pruned-pmm"]).to_dict("list")
    assert res["two"].keys() == mine.keys()
    for column, values in res["two"].items():
        assert values == [v.item() if hasattr(v, "item") else v for v in mine[column]], column


@pytest.mark.slow
def test_sinkhorn_subsample_keys_follow_the_seed_not_the_chunk(X, table):
    methods = [("sinkhorn", {"subsample": 100, "key": 5})]
    whole = simulate(MECHS[:1], X, eps=[1.0], seeds=2, key=7, methods=methods, progress=False)
    split = simulate(MECHS[:1], X, eps=[1.0], seeds=2, key=7, methods=methods, progress=False,
                     memory_bytes=40_000)
    np.testing.assert_array_equal(whole.w1_sinkhorn, split.w1_sinkhorn)
    for s in range(2):  # replicate s: release key fold_in(7, s), subsample key fold_in(5, s)
        out = js.release(jax.random.fold_in(jax.random.key(7), s), MECHS[0], X, 1.0)
        # measured on its own atoms in canonical order (padding and order are the chunk's)
        p, w = canonical_atoms(np.asarray(out.points), np.asarray(out.weights))
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(5), s), 0)  # as js.w1
        value = w1_sinkhorn(X, p, w, subsample=100, key=key).value
        assert whole.w1_sinkhorn[s] == value
