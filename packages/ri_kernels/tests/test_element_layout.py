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

from ri_kernels import (
    _analytic,
    analytic_eval_with_indices,
    analytic_moments_with_indices,
    make_indices,
)
from ri_kernels import _phase_moments as P


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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("in_view, channel_terms", [(False, 0), (True, 0), (True, 2)])
def test_tiled_analytic_operator_and_gradients_equal_the_flat_ones_float32(
    tile, in_view, channel_terms
):
    scene = make_scene(3, n_ant=5, n_path=4, rate_us_s=5e-3)
    args = analytic_args(scene, np.float32)
    a1, a2 = np.triu_indices(5, 1)
    indices = make_indices(5, a1, a2)
    weight = jnp.asarray(np.random.default_rng(1).normal(size=(a1.size, 3, 5)), jnp.float32)
    view = _view().astype(np.float32) if in_view else None

    def loss(amp, phase, delay):
        vis = analytic_eval_with_indices(
            indices, amp, phase, delay, *args[3:], view=view, channel_terms=channel_terms
        )
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
    # measured 4.1e-8, 1.4e-7, 4.0e-7, 9.0e-8 (with the view: 3.9e-8, 1.3e-7, 1.0e-6, 1.9e-7;
    # and two terms across each channel: 7.9e-8, 1.3e-7, 4.0e-6, 4.9e-7)
    assert max(errors) < 1e-5


def test_tiled_grid_fills_whole_tiles_with_the_least_padding():
    # 1128 baselines (48 antennas), 30 cells, blocks of about 564 positions: one cell per
    # block would take blocks of 1024 rows, two of them per cell: 2 * 1024 * 30 positions.
    grid = _analytic._tiled_grid(1128, 30, 564, 1024, 48)
    rows, cells = grid.rows_per_block, grid.cells_per_block
    assert rows * cells % 1024 == 0
    assert grid.n_row_blocks * rows >= 1128 > (grid.n_row_blocks - 1) * rows
    assert grid.n_cell_blocks * cells >= 30 > (grid.n_cell_blocks - 1) * cells
    work = grid.n_row_blocks * rows * grid.n_cell_blocks * cells
    assert (rows, cells, work) == (128, 8, 9 * 128 * 4 * 8) and work < 2 * 1024 * 30
    # at 512 antennas the one-hot's columns weigh against the padding: 2 cells per block
    # (1.36 times the positions, at 1024 columns 1.25 times the cost: 1.70) against 4
    # (1.21 times 1.5) and 8 (1.09 times 2.0)
    assert _analytic._tiled_grid(1128, 30, 564, 1024, 512)[2:] == (512, 2)
    # many baselines: one cell per block, the rows the nearest whole tiles to the budget's
    assert _analytic._tiled_grid(130816, 240, 4000, 1024, 512)[2:] == (4096, 1)


@pytest.mark.slow
def test_tiled_operator_in_blocks_with_a_factor_and_kept_moments_float32(tile):
    # 12 antennas, 66 baselines, 5 cells; a budget that cuts them into several blocks, so
    # that the tiled grid has blocks of several cells, padded rows and a padded cell block
    n_ant = 12
    scene = make_scene(3, n_ant=n_ant, n_path=4, rate_us_s=5e-3, n_freq=1, n_time=5)
    args = analytic_args(scene, np.float32)
    a1, a2 = np.triu_indices(n_ant, 1)
    indices = make_indices(n_ant, a1, a2)
    rng = np.random.default_rng(2)
    factor = jnp.asarray(rng.uniform(0.5, 1.5, size=args[0].shape), jnp.float32)
    shared = jnp.asarray(args[0][:1])
    weight = jnp.asarray(rng.normal(size=(a1.size, 1, 5)), jnp.float32)
    budget = 20_000

    def loss(amp, factor, phase, delay):
        vis = analytic_eval_with_indices(
            indices, amp, phase, delay, *args[3:], amp_factor=factor, memory_budget_bytes=budget
        )
        return jnp.sum(weight * vis.real) + jnp.sum(jnp.abs(vis) ** 2), vis

    def kept(amp):  # moments formed once, then read in the block layout in both
        moments = analytic_moments_with_indices(indices, *args[1:], memory_budget_bytes=budget)
        return analytic_eval_with_indices(indices, amp, *args[1:], moments=moments)

    program = jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)
    (_, flat_vis), flat_grads = jax.jit(program)(shared, factor, *args[1:3])
    flat_kept = jax.jit(kept)(args[0])
    layouts = tile()
    grids = []
    saved = _analytic._tiled_grid
    _analytic._tiled_grid = lambda *a: grids.append(saved(*a)) or grids[-1]
    try:
        (_, tiled_vis), tiled_grads = jax.jit(program)(shared, factor, *args[1:3])
    finally:
        _analytic._tiled_grid = saved
    tiled_kept = jax.jit(kept)(args[0])
    assert layouts and grids and grids[0].n_row_blocks * grids[0].n_cell_blocks > 1
    assert grids[0].cells_per_block > 1
    pairs = [(flat_vis, tiled_vis), *zip(flat_grads, tiled_grads, strict=True)]
    pairs.append((flat_kept, tiled_kept))
    errors = [
        float(np.max(np.abs(np.asarray(t) - np.asarray(f))) / np.max(np.abs(np.asarray(f))))
        for f, t in pairs
    ]
    print(f"largest differences (vis, amp, factor, phase, delay, kept): {errors}")
    assert max(errors) < 1e-5  # measured 6.2e-8, 9.2e-8, 3.1e-7, 7.7e-7, 1.4e-7, 3.5e-8
