"""The *_eval_with_indices seams: any baseline list gives the rows of the whole list.

Index sets are traced arguments of one compiled function (seam_autodiff.value_jvp_vjp), as
inside ``shard_map``; the scene and the whole list are shared with test_gradients, and so is
that compiled function.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_reference, make_scene, quadrature_reference
from seam_autodiff import A1, A2, ARGS, N_ANT, POSITIONS, SCENE, SEAMS, leaves, value_jvp_vjp

from ri_kernels import make_index_sets, make_indices

# float64 by design: the shared scene is complex128, its rows compared to 1e-12.
pytestmark = pytest.mark.usefixtures("x64")


def _run(name, indices, cotangent, seed=0):
    args = tuple(leaves(name))
    rng = np.random.default_rng(seed)
    tangents = []
    for p in POSITIONS:  # small real tangents keep every phase and delay step well inside a turn
        t = rng.normal(size=args[p].shape)
        t = t + 1j * rng.normal(size=t.shape) if p == 0 else t * 1e-4
        tangents.append(t.astype(args[p].dtype))
    return value_jvp_vjp(name, indices, args, tuple(tangents), cotangent)


def _cotangent(n_bl, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n_bl, *SCENE.amp.shape[2:])
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def _assert_same(mine, expected, tol=1e-12):
    for x, y in zip(jax.tree.leaves(mine), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(x, y, rtol=0, atol=tol * max(np.abs(y).max(), 1e-300))


@pytest.mark.parametrize("name", ["quadrature", "analytic"])
def test_every_third_baseline_equals_the_whole_operators_rows_in_value_and_gradient(name):
    rows = np.arange(0, A1.size, 3)
    whole = make_indices(N_ANT, A1, A2)
    third = make_indices(N_ANT, A1[rows], A2[rows])
    cotangent = _cotangent(rows.size)
    padded = np.zeros((A1.size, *cotangent.shape[1:]), complex)
    padded[rows] = cotangent  # a loss on those rows only
    vis_whole, jvp_whole, vjp_whole = _run(name, whole, padded)
    vis_third, jvp_third, vjp_third = _run(name, third, cotangent)
    _assert_same(vis_third, np.asarray(vis_whole)[rows])
    _assert_same(jvp_third, np.asarray(jvp_whole)[rows])
    _assert_same(vjp_third, vjp_whole)
    autos = A1 == A2
    assert np.all(np.abs(np.asarray(vis_whole)[autos].imag) <= 1e-12 * np.abs(vis_whole).max())


@pytest.mark.parametrize("name", ["quadrature", "analytic"])
def test_sets_sized_to_their_lists_give_the_rows_of_the_whole_list(name):
    # Contiguous blocks of the list, as devices own them: make_index_sets sizes their Gram rows
    # and columns by the widest block, fewer than make_indices would.
    n_sets = 3
    size = A1.size // n_sets
    blocks = [np.arange(d * size, (d + 1) * size) for d in range(n_sets)]
    stacked = make_index_sets(N_ANT, [(A1[rows], A2[rows]) for rows in blocks])
    assert stacked.row.shape[1] < min(size, N_ANT)  # the sizing this test exists for
    vis_whole, jvp_whole, _ = _run(name, make_indices(N_ANT, A1, A2), _cotangent(A1.size))
    for d, rows in enumerate(blocks):
        local = jax.tree.map(lambda x, d=d: x[d], stacked)
        cotangent = _cotangent(rows.size, seed=d)
        padded = np.zeros((A1.size, *cotangent.shape[1:]), complex)
        padded[rows] = cotangent
        vis, jvp, vjp = _run(name, local, cotangent)
        _, _, vjp_whole = _run(name, make_indices(N_ANT, A1, A2), padded)
        _assert_same(vis, np.asarray(vis_whole)[rows])
        _assert_same(jvp, np.asarray(jvp_whole)[rows])
        _assert_same(vjp, vjp_whole)


@pytest.mark.parametrize("name", ["quadrature", "analytic"])
def test_shuffled_and_reversed_lists_give_the_same_rows(name):
    rows = np.r_[np.arange(1, A1.size, 3), 0]  # ten rows as every third: no recompile
    a1, a2 = A1[rows], A2[rows]
    cotangent = _cotangent(rows.size, seed=1)
    vis, _, vjp = _run(name, make_indices(N_ANT, a1, a2), cotangent)
    order = np.random.default_rng(2).permutation(rows.size)
    shuffled = make_indices(N_ANT, a1[order], a2[order])
    vis_shuffled, _, vjp_shuffled = _run(name, shuffled, cotangent[order])
    _assert_same(vis_shuffled, np.asarray(vis)[order])
    _assert_same(vjp_shuffled, vjp)
    # (q, p) is the conjugate of (p, q); conjugated cotangents give the same real loss.
    reversed_list = make_indices(N_ANT, a2, a1)
    vis_reversed, _, vjp_reversed = _run(name, reversed_list, cotangent.conj())
    _assert_same(vis_reversed, np.asarray(vis).conj())
    _assert_same(vjp_reversed, vjp)


@pytest.mark.parametrize("n_ant", [1, 33, 65])
@pytest.mark.parametrize("name", ["quadrature", "analytic"])
def test_sparse_lists_on_many_antennas_match_the_reference(name, n_ant):
    rng = np.random.default_rng(n_ant)
    pairs = rng.choice(n_ant * n_ant, size=min(9, n_ant * n_ant), replace=False)
    a1, a2 = np.divmod(pairs, n_ant)
    scene = make_scene(n_ant, n_ant=n_ant, n_freq=2, n_time=3, n_int_t=3, rate_us_s=0.02)
    args = ARGS[name](scene)
    vis = SEAMS[name](make_indices(n_ant, a1, a2), *args)
    # The analytic operator is exact in time, its reference a dense quadrature: 1e-6.
    reference, tol = {
        "quadrature": (quadrature_reference, 1e-12),
        "analytic": (analytic_reference, 1e-6),
    }[name]
    expected = reference(a1, a2, *args)
    np.testing.assert_allclose(vis, expected, rtol=0, atol=tol * np.abs(expected).max())


@pytest.mark.parametrize("name", ["quadrature", "analytic"])
def test_empty_list_gives_no_rows_and_zero_gradient(name):
    args = ARGS[name](SCENE)
    idx = make_indices(N_ANT, [], [])

    def loss(amp):
        vis = SEAMS[name](idx, amp, *args[1:])
        return jnp.sum(jnp.abs(vis) ** 2), vis

    (value, vis), grad = jax.value_and_grad(loss, has_aux=True)(args[0])
    assert vis.shape == (0, *SCENE.amp.shape[2:]) and vis.dtype == jnp.complex128
    assert value == 0 and grad.shape == SCENE.amp.shape and not np.any(grad)
