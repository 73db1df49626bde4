"""The kernels' audit hooks: defaults change nothing, the transcript is the true one.

``DenseStatic.noise`` / ``rule`` / ``transcript`` (and ``TreeStatic.split``) exist for the
privacy auditor (the transcript through the plan's ``transcript`` option); with the real functions passed explicitly the release must be
identical, and the transcript must equal an independent per-node recomputation of the
noisy counts from the key schedule (``jaxsynth.core.keys``).  That the defaults leave
every release bit-identical is what ``tests/mechanisms`` checks.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth import engine
from jaxsynth.core import keys as K
from jaxsynth.core import noise
from jaxsynth.core.consistency import proportional_split
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.keys import replicate_keys

X = np.array([[0.05]] * 9 + [[0.3]] * 4 + [[0.95]] * 6)
KEYS = replicate_keys(3, 4)


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _proportional_reading_nothing(m, a, b, a_scaled, b_scaled, coin, c0, c1):
    return proportional_split(m, a, b, a_scaled, b_scaled, coin)


def _pmm_plan(R=3):
    return js.PMM(depth=R).plan(DataTree.build(X, R), np.array([0.5, 2.0]))


def test_dense_hooks_with_the_real_functions_change_nothing():
    plan = _pmm_plan()
    ref = engine.run(plan, KEYS, host=True)
    static = dataclasses.replace(plan.static, noise=noise.noisy_count,
                                 rule=_proportional_reading_nothing)
    _same(ref, engine.run(dataclasses.replace(plan, static=static), KEYS, host=True))


def test_transcript_is_the_noisy_counts_of_every_node():
    R = 3
    plan = _pmm_plan(R)
    ref = engine.run(plan, KEYS, host=True)
    with_transcript = js.PMM(depth=R).plan(DataTree.build(X, R), np.array([0.5, 2.0]),
                                           transcript=True)
    assert with_transcript.static.transcript
    out = engine.run(with_transcript, KEYS, host=True)
    transcript = out.pop("transcript")
    _same(ref, out)  # the release is unchanged
    counts = jnp.asarray(DataTree.build(X, R).planar_counts(R))

    @jax.jit
    def recompute(key, inv, inv0):  # node by node, from the key schedule
        nodes = [noise.noisy_count(K.draw(key, K.ROOT)[0], counts[0], inv0)[0][None]]
        for j in range(R):  # the children of level j start at planar offset 2^{j+1} - 1
            width = 2**j
            words = K.draw(key, K.EXPAND, j, K.bit_reverse(jnp.arange(width, dtype=jnp.uint32)))
            for bit in (0, 1):
                c = counts[2 * width - 1 + bit * width + jnp.arange(width)]
                nodes.append(noise.noisy_count(words[bit], c, inv[j])[0])
        return jnp.concatenate(nodes)

    assert transcript.shape == (2, len(KEYS), 2 ** (R + 1) - 1)
    for e in range(2):
        for s, key in enumerate(KEYS):
            expect = recompute(jnp.asarray(key), plan.params["inv_sigma"][e],
                               plan.params["inv_sigma0"][e])
            np.testing.assert_array_equal(transcript[e, s], np.asarray(expect))
    # the root entry is the noisy root count behind the synthetic size
    np.testing.assert_array_equal(np.maximum(transcript[..., 0], 1), out["size"])


@pytest.mark.parametrize("field", ["noise", "rule", "transcript"])
def test_hook_defaults(field):
    static = js.PMM(depth=2).plan(DataTree.build(X, 2), np.array([1.0])).static
    assert getattr(static, field) in (None, False, "proportional")


def test_only_the_dense_engine_records_a_transcript():
    tree = DataTree.build(X, 3)
    with pytest.raises(ValueError, match="transcript"):
        js.PrunedPMM(depth=3, engine="sparse").plan(tree, np.array([1.0]), transcript=True)
    with pytest.raises(ValueError, match="transcript"):
        js.PMM(depth=3).plan(tree, np.array([1.0]), transcript="yes")
