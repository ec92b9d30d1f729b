"""The elements' layout off the CPU: (rows, 128) tiles, rows a multiple of 8 (a TPU's vector
registers), zero-padded at the end, instead of the CPU's one flat axis. Switched on here on
the CPU (``_phase_moments._tiled``) and compared with the flat layout: the moments, with the
curved elements patched through the tiles, and the analytic operator's values and
derivatives in amp, phase and delay, with and without a view. The two layouts do the same
arithmetic on each element; what may differ is only how XLA fuses it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_args, make_scene
from test_in_view import _view
from test_phase_moment_blocks import _cubics

from ri_kernels import _phase_moments as P
from ri_kernels import analytic_eval_with_indices, make_indices


@pytest.fixture
def tile():
    """A switch to the tiled layout for the rest of the test; it records the layouts made."""
    saved = P._tiled, P.element_layout
    layouts = []

    def recorded(size):
        layouts.append(saved[1](size))
        return layouts[-1]

    def switch_on():
        jax.clear_caches()  # no program traced in the flat layout may be reused
        P._tiled, P.element_layout = (lambda: True), recorded
        return layouts

    yield switch_on
    P._tiled, P.element_layout = saved
    jax.clear_caches()


def test_tiled_layout_pads_to_whole_tiles_and_round_trips(tile):
    v = np.arange(3 * 5 * 7 * 11, dtype=np.float32).reshape(3, 5, 7, 11)
    assert P.to_elements(v, 1).shape == (3, 385)  # the CPU: one flat axis
    tile()
    assert P.element_layout(1) == P.element_layout(1024) == (8, 128)
    assert P.element_layout(1025) == (16, 128)
    laid = np.asarray(P.to_elements(v, 1))
    assert laid.shape == (3, 8, 128)
    assert np.all(laid.reshape(3, -1)[:, 385:] == 0)
    assert np.array_equal(np.asarray(P.from_elements(laid, 1, (5, 7, 11))), v)


def test_tiled_moments_equal_the_flat_ones_with_curved_elements_float64(x64, tile):
    size = 3 * P._CPU_BLOCK + 37  # not a whole number of tiles: padded
    cubics = _cubics(size)
    cubic = P.working_cubic(*cubics)
    flat = np.asarray(jax.lax.complex(*P.cubic_moments_by_order(cubic, 5)))
    by_rows = np.asarray(P.phase_moments(*(v.reshape(5, -1) for v in cubics), 5))
    layouts = tile()
    tiled = np.asarray(jax.lax.complex(*P.cubic_moments_by_order(cubic, 5)))
    tiled_by_rows = np.asarray(P.phase_moments(*(v.reshape(5, -1) for v in cubics), 5))
    assert tiled_by_rows.shape == (5, size // 5, 5)
    np.testing.assert_allclose(tiled_by_rows, by_rows, rtol=0, atol=1e-13)
    assert set(layouts) == {(104, 128)}  # one per array of the cubic
    # Some elements' pieces are at or above the expansion's switch (|beta| = |b| / 4 at two
    # pieces; beta_s = 0.007 in float64 at terms=6), so the patch ran through the tiles.
    assert np.any(np.abs(cubics[2]) / 4 >= 0.01)
    np.testing.assert_allclose(tiled, flat, rtol=0, atol=1e-13)


@pytest.mark.parametrize("in_view", [False, True])
def test_tiled_analytic_operator_and_gradients_equal_the_flat_ones_float32(tile, in_view):
    scene = make_scene(3, n_ant=5, n_path=4, rate_us_s=5e-3)
    args = analytic_args(scene, np.float32)
    a1, a2 = np.triu_indices(5, 1)
    indices = make_indices(5, a1, a2)
    weight = jnp.asarray(np.random.default_rng(1).normal(size=(a1.size, 3, 5)), jnp.float32)
    view = _view().astype(np.float32) if in_view else None

    def loss(amp, phase, delay):
        vis = analytic_eval_with_indices(indices, amp, phase, delay, *args[3:], view=view)
        return jnp.sum(weight * vis.real) + jnp.sum(jnp.abs(vis) ** 2), vis

    program = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)
    (_, flat_vis), flat_grads = jax.jit(program)(*args[:3])
    layouts = tile()
    (_, tiled_vis), tiled_grads = jax.jit(program)(*args[:3])
    assert layouts and all(len(layout) == 2 for layout in layouts)
    pairs = [(flat_vis, tiled_vis), *zip(flat_grads, tiled_grads, strict=True)]
    errors = [
        float(np.max(np.abs(np.asarray(t) - np.asarray(f))) / np.max(np.abs(np.asarray(f))))
        for f, t in pairs
    ]
    print(f"largest differences over the largest value (vis, amp, phase, delay): {errors}")
    assert max(errors) < 1e-5  # measured 0, 0, 1.5e-7, 2.3e-8 (with the view: 1.3e-7, 1.2e-8)
