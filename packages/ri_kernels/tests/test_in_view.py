"""Sources in view for only part of some integrations (a satellite rising or setting within
one): the analytic operator's ``view`` and the quadrature operator's per-source tables
(``in_view_stencils``), against a dense Gauss-Legendre average over each source's in-view part
alone (``ri_reference.analytic_reference`` with ``view``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_args, analytic_reference, make_scene

from ri_kernels import (
    QuadratureTables,
    analytic_eval_with_indices,
    analytic_moments_with_indices,
    gauss_legendre_offsets,
    in_view_stencils,
    lagrange_stencils,
    make_indices,
    quadrature_eval_with_indices,
)

N_ANT, N_RFI, N_TIME = 4, 2, 5


def _view():
    """(n_rfi, n_time, 2) in x: source 0 rises during integration 1 and is up after it;
    source 1 is up, sets during integration 3 and is down after it; every other kind too."""
    view = np.tile(np.array([-1.0, 1.0]), (N_RFI, N_TIME, 1))
    view[0, 0] = [0.0, 0.0]  # down throughout
    view[0, 1] = [0.35, 1.0]  # rises
    view[1, 3] = [-1.0, -0.6]  # sets
    view[1, 4] = [0.2, 0.2]  # down throughout
    return view


def _scene(n_path=3, rate_us_s=5e-3):
    """make_scene's observation; its default rate winds the fringe by 10 cycles a cell."""
    scene = make_scene(7, n_ant=N_ANT, n_rfi=N_RFI, n_time=N_TIME, n_path=n_path,
                       rate_us_s=rate_us_s)  # fmt: skip
    a1, a2 = np.triu_indices(N_ANT, 1)
    return scene, a1, a2, make_indices(N_ANT, a1, a2)


def _reference(scene, a1, a2, view):
    return analytic_reference(a1, a2, *analytic_args(scene), view=view)


def _relative(got, want):
    return float(np.max(np.abs(np.asarray(got) - want)) / np.max(np.abs(want)))


def test_analytic_over_the_in_view_part_matches_the_reference_float64(x64):
    scene, a1, a2, indices = _scene(n_path=4)  # the cubic phase: all the operator keeps
    view = _view()
    got = analytic_eval_with_indices(indices, *analytic_args(scene), segments=4, terms=16,
                                     view=view)  # fmt: skip
    want = _reference(scene, a1, a2, view)
    error = _relative(got, want)
    print(f"largest error over the largest visibility: {error:.1e}")
    assert error < 2e-13  # measured 1.7e-15
    # out of view for a whole cell: exactly nothing from that source there
    alone = analytic_eval_with_indices(
        indices, *analytic_args(scene._replace(amp=scene.amp * np.array([1, 0])[:, None, None])),
        view=view,
    )  # fmt: skip
    assert np.all(np.asarray(alone)[:, :, 0] == 0)


def test_analytic_in_view_throughout_is_the_operator_without_view(x64):
    scene, _, _, indices = _scene()
    whole = np.tile(np.array([-1.0, 1.0]), (N_RFI, N_TIME, 1))
    with_view = analytic_eval_with_indices(indices, *analytic_args(scene), view=whole)
    without = analytic_eval_with_indices(indices, *analytic_args(scene))
    np.testing.assert_array_equal(np.asarray(with_view), np.asarray(without))


def test_analytic_in_view_float32_matches_the_float64_reference():
    scene, a1, a2, indices = _scene()
    view = _view()
    got = analytic_eval_with_indices(
        indices, *analytic_args(scene, np.float32), view=view.astype(np.float32)
    )
    error = _relative(got, _reference(scene, a1, a2, view))
    print(f"float32: largest error over the largest visibility: {error:.1e}")
    assert error < 5e-5  # measured 5.5e-7


def test_kept_moments_with_view_give_the_operator_with_view(x64):
    scene, _, _, indices = _scene()
    view = _view()
    args = analytic_args(scene)
    moments = analytic_moments_with_indices(indices, *args[1:], view=view)
    kept = analytic_eval_with_indices(indices, *args, moments=moments)
    formed = analytic_eval_with_indices(indices, *args, view=view)
    np.testing.assert_allclose(np.asarray(kept), np.asarray(formed), rtol=0, atol=1e-13)


def test_analytic_gradients_with_view_match_the_reference_by_finite_differences(x64):
    """The amp, phase and delay derivatives (the operator's custom rule, with the moments in
    view) against central differences of the operator's own value."""
    scene, _, _, indices = _scene(n_path=4)
    view = _view()
    args = analytic_args(scene)
    rng = np.random.default_rng(2)
    weights = rng.normal(size=(len(indices.a1), *scene.amp.shape[2:]))

    def objective(amp, phase, delay):
        vis = analytic_eval_with_indices(indices, amp, phase, delay, *args[3:], view=view)
        return jnp.sum(weights * jnp.real(vis * jnp.conj(vis)))

    grads = jax.grad(objective, argnums=(0, 1, 2))(*args[:3])
    for k, (x, g) in enumerate(zip(args[:3], grads, strict=True)):
        direction = rng.normal(size=x.shape) * (1 + (1j if k == 0 else 0))
        step = 1e-8 if k == 2 else 1e-6  # a delay step of 1e-8 us turns 6e-5 rad at 1 GHz
        moved = [list(args[:3]), list(args[:3])]
        moved[0][k], moved[1][k] = x + step * direction, x - step * direction
        numeric = (objective(*moved[0]) - objective(*moved[1])) / (2 * step)
        # jax's gradient of a real function of complex z is g with df = Re(g dz)
        analytic = np.sum(np.real(np.asarray(g) * direction))
        print(f"argument {k}: {analytic:.9e} against {float(numeric):.9e}, relative "
              f"{abs(analytic - numeric) / abs(numeric):.1e}")  # fmt: skip
        # measured 5e-10 to 4e-9 relative: the central differences' own error
        assert abs(analytic - numeric) <= 5e-7 * abs(numeric)


def test_in_view_stencils_in_view_throughout_are_the_lagrange_tables():
    offsets, scale = gauss_legendre_offsets(1.0, 4)
    whole = np.tile(np.array([-0.5, 0.5]), (N_RFI, N_TIME, 1))
    weights, positions, start = in_view_stencils(N_TIME, offsets, scale, 3, whole)
    want, want_start = lagrange_stencils(N_TIME, offsets, 3)
    np.testing.assert_allclose(weights, np.broadcast_to(want * scale, weights.shape), atol=1e-15)
    np.testing.assert_allclose(positions, np.broadcast_to(offsets, positions.shape), atol=1e-16)
    np.testing.assert_array_equal(start, want_start)


@pytest.mark.parametrize("n_int_t", [4, 8])
def test_quadrature_with_in_view_stencils_matches_the_reference(x64, n_int_t):
    """Gauss-Legendre nodes moved into each source's in-view part; the reference integrates the
    same interpolated amplitudes (the monomial tables are the Lagrange interpolant) over it."""
    scene, a1, a2, indices = _scene(rate_us_s=5e-5)  # pairs' fringes: tenths of a cycle a cell
    view = _view()
    int_time = scene.int_time
    offsets, scale = gauss_legendre_offsets(1.0, n_int_t)
    w_time, positions, start_time = in_view_stencils(N_TIME, offsets, scale, 3, view / 2)
    amp, phase, delay, analytic, freq_mhz = analytic_args(scene)
    tables = QuadratureTables(
        analytic.w_freq, analytic.start_freq, w_time, start_time, analytic.dnu_mhz,
        positions * int_time,
    )  # fmt: skip
    got = quadrature_eval_with_indices(indices, amp, phase, delay, tables, freq_mhz)
    error = _relative(got, _reference(scene, a1, a2, view))
    print(f"{n_int_t} nodes: largest error over the largest visibility: {error:.1e}")
    # measured 4.0e-6 with 4 nodes and 1.3e-15 with 8: the Gauss rule on the in-view part
    assert error < {4: 4e-4, 8: 1e-13}[n_int_t]


def test_a_bad_view_is_refused_with_where_and_what():
    scene, _, _, indices = _scene()
    view = _view()
    view[1, 2] = [0.5, 0.25]
    with pytest.raises(ValueError, match=r"view\[1, 2\] = \[0.5, 0.25\].*lo <= hi"):
        analytic_eval_with_indices(indices, *analytic_args(scene, np.float32),
                                   view=view.astype(np.float32))  # fmt: skip
    with pytest.raises(ValueError, match="in_view_stencils: view must hold"):
        in_view_stencils(N_TIME, [0.0], [1.0], 3, view)
