"""Analytic operator against dense float64 quadrature of the same polynomial amplitude.

The reference (ri_reference.analytic_reference) averages each antenna's own polynomial
amplitude times exp(i phase) over the integration with composite Gauss-Legendre rules of at
most 4 rad per 16-node panel (up to ~8e4 nodes per cell), keeping every delay derivative it is
given; the operator drops orders above 3. Errors are measured against the largest reference
visibility of a test, which the zero-winding cells set to the unsmeared amplitude scale.

All scenes share one shape (3 antennas, 5 baselines, 2 sources, 2 x 6 cells, 2 fine
channels) so that the compiled operator is reused between tests.
"""

import functools
import math

import numpy as np
import pytest
from ri_reference import analytic_args, analytic_reference, make_scene

from ri_kernels import analytic_eval_with_indices, make_indices

# float64 by design: complex128 scenes against the dense-quadrature reference, per cell.
pytestmark = pytest.mark.usefixtures("x64")

FREQ_MHZ, INT_TIME = 1000.0, 1.0
A1, A2 = np.array([0, 1, 0, 2, 2]), np.array([1, 0, 2, 2, 1])
IDX = make_indices(3, A1, A2)
# The cubic coefficient c = (pi/3) nu d3 (T/2)**3 of d3 = 5e-4 us/s^3 at 1 GHz over 1 s.
C_OF_D3 = math.pi / 3 * FREQ_MHZ * 5e-4 * (INT_TIME / 2) ** 3
SHAPE = dict(n_ant=3, n_rfi=2, n_freq=2, n_time=6, n_int_f=2, n_coef=3, int_time=INT_TIME)


def _relative_error(vis, ref):
    return np.max(np.abs(np.asarray(vis) - ref)) / np.max(np.abs(ref))


def _per_cell_error(vis, ref):
    """The largest error relative to each cell's own value, over the cells above 1e-3 of the
    largest (a high-winding pair's cells are small: a bound relative to the largest value
    alone would let them be wrong)."""
    vis, ref = np.asarray(vis), np.asarray(ref)
    big = np.abs(ref) > 1e-3 * np.abs(ref).max()
    return np.max(np.abs(vis - ref)[big] / np.abs(ref)[big])


def _regimes(segments, cubic):
    """Twelve (a, b, c) targets (rad) for the pair (0, 1), at the pieces' branch edges.

    On piece 0 (centre x0, half-width rho) the translated coefficients are
    alpha = (a + 2 b x0 + 3 c x0**2) rho and beta = (b + 3 c x0) rho**2 (docs/kernels.md, "Phase
    moments in closed form").
    The fine frequencies differ from FREQ_MHZ by < 3e-4 relative, well inside the 2% margins.
    """
    rho = 1 / segments
    x0 = -1 + rho

    def piece0(alpha, beta):
        b = beta / rho**2
        return (alpha / rho - 2 * b * x0, b, 0.0)

    on = 1.0 if cubic else 0.0
    return [
        (0.0, 0.0, 0.0),  # zero winding
        (30.0, 0.0, 0.0),
        (1e4, 0.0, 0.0),  # |a| up to 1e4
        (-2.5e3, 0.3, 0.0),
        piece0(2.5 * 1.5 * 0.98, 1.5),  # stationary-point branch, just inside |alpha| = 2.5|beta|
        piece0(2.5 * 1.5 * 1.02, 1.5),  # just outside
        piece0(0.0, 0.98),  # Fresnel seed switch |beta| = 1: curvature-expansion side
        piece0(0.0, 1.02),  # Fresnel side
        (10.0, 40.0, 0.0),  # strong curvature: stationary points inside several pieces
        (5.0, 1.0, C_OF_D3 * on),
        (-40.0, 3.0, -0.03 * on),
        (200.0, 8.0, 0.02 * on),
    ]


@functools.cache
def _regime_case(segments, cubic):
    """Scene arguments and reference; the pair (0, 1) has the targets at FREQ_MHZ."""
    scene = make_scene(21, n_path=4, rate_us_s=0.0, **SHAPE)
    half = INT_TIME / 2
    delay = scene.delay_us.copy()
    for i, (a, b, c) in enumerate(_regimes(segments, cubic)):
        r, t = divmod(i, SHAPE["n_time"])  # targets 0-5 on source 0, 6-11 on source 1
        delay[0, r, t, 1] = a / (2 * math.pi * FREQ_MHZ * half)
        delay[0, r, t, 2] = b / (math.pi * FREQ_MHZ * half**2)
        delay[0, r, t, 3] = c / (math.pi / 3 * FREQ_MHZ * half**3)
    delay[2, :, :, 1:] = 0.5 * delay[0, :, :, 1:]  # pairs with antenna 2 see half the winding
    args = analytic_args(scene._replace(delay_us=delay))
    return args, analytic_reference(A1, A2, *args)


@pytest.mark.parametrize(("segments", "terms", "cubic_terms"), [(2, 6, 3), (4, 16, 3), (1, 6, 0)])
def test_matches_dense_quadrature_across_regimes(segments, terms, cubic_terms):
    args, ref = _regime_case(segments, cubic_terms > 0)
    vis = analytic_eval_with_indices(
        IDX, *args, segments=segments, terms=terms, cubic_terms=cubic_terms
    )
    # Measured: 6.9e-15 of the largest value and 3.2e-13 per cell at most (over the three
    # option sets; was a bound of 1e-6 of the largest).
    assert _relative_error(vis, ref) < 1e-12
    assert _per_cell_error(vis, ref) < 3e-11


def test_dropping_the_cubic_term_changes_results_by_more_than_1e4():
    args, ref = _regime_case(2, True)
    assert np.isclose(args[2][0, 1, 3, 3], 5e-4, rtol=1e-6)  # d3 (us/s^3) of antenna 0, t = 3
    with_cubic = np.asarray(analytic_eval_with_indices(IDX, *args))
    without = np.asarray(analytic_eval_with_indices(IDX, *args, cubic_terms=0))
    # Baseline (0, 1) carries that d3 (antenna 1 has none): relative to its largest value.
    change = np.abs(without[0] - with_cubic[0]).max() / np.abs(with_cubic[0]).max()
    assert change > 1e-4
    # Measured 6.9e-15 of the largest value, 3.2e-13 per cell.
    assert _relative_error(with_cubic, ref) < 1e-12
    assert _per_cell_error(with_cubic, ref) < 3e-11


def _with_d3(args, scale):
    """Analytic arguments with every delay's third derivative scaled by ``scale``."""
    delay = args[2].copy()
    delay[..., 3] *= scale
    return (*args[:2], delay, *args[3:])


def test_zero_cubic_terms_equals_delays_without_a_third_derivative():
    args, _ = _regime_case(2, True)
    without = np.asarray(analytic_eval_with_indices(IDX, *args, cubic_terms=0))
    no_d3 = _with_d3(args, 0.0)
    np.testing.assert_array_equal(without, analytic_eval_with_indices(IDX, *no_d3, cubic_terms=0))
    # Against dense quadrature of the phase without its cubic term: measured 9.5e-16.
    assert _relative_error(without, analytic_reference(A1, A2, *no_d3)) < 1e-13


def test_zero_cubic_terms_errs_by_more_as_the_third_derivative_grows():
    args, _ = _regime_case(2, True)
    errors = []
    for scale in (1.0, 4.0, 16.0):
        scaled = _with_d3(args, scale)
        without = analytic_eval_with_indices(IDX, *scaled, cubic_terms=0)
        errors.append(_relative_error(without, analytic_reference(A1, A2, *scaled)))
    # Against the full dense quadrature, cubic included: measured 1.1e-3, 4.6e-3, 1.7e-2, about
    # as the largest c (C_OF_D3, from 0.065 to 1.05 rad).
    assert errors[0] > 1e-5
    assert errors[0] < errors[1] < errors[2], errors


# Measured (largest value, per cell): orders 1-3 1.5e-15, 2.8e-13 (arithmetic); order 6
# 4.7e-8, 1.2e-5 (the dropped fourth and higher orders).
@pytest.mark.parametrize(
    ("order", "bound", "cell_bound"),
    [(1, 2e-13, 3e-11), (2, 2e-13, 3e-11), (3, 2e-13, 3e-11), (6, 5e-6, 1e-3)],
)
def test_delay_orders_above_three_are_negligible_for_realistic_derivatives(
    order, bound, cell_bound
):
    # Derivatives fall by omega = 1e-2 /s per order (a fast low-orbit pass): d1 ~ 0.3 us/s gives
    # |a| ~ 1e3 rad, and the dropped fourth-order phase 2 pi nu d4 (T/2)**4 / 4! is ~5e-9 rad.
    scene = make_scene(31, n_path=order + 1, rate_us_s=0.3, omega_per_s=1e-2, **SHAPE)
    args = analytic_args(scene)
    vis = analytic_eval_with_indices(IDX, *args)
    ref = analytic_reference(A1, A2, *args)
    assert _relative_error(vis, ref) < bound
    assert _per_cell_error(vis, ref) < cell_bound


def test_memory_budget_blocks_give_the_whole_evaluation():
    """A budget far below one pass's working set splits the pairs and cells into many blocks
    (down to one cell at a time with a budget of 1 byte); the result is the same."""
    from ri_kernels._analytic import _block_plan

    args, ref = _regime_case(2, True)
    n_freq, n_time = args[0].shape[2:]
    # At 1 byte the plan takes one cell per block, whatever a pair-cell costs (>= 1 byte).
    assert _block_plan(IDX.n_bl, n_freq, n_time, 1, 1)[1].n_cell_blocks == n_freq * n_time > 1
    whole = np.asarray(analytic_eval_with_indices(IDX, *args))
    for budget in (1 << 12, 1):
        blocked = np.asarray(analytic_eval_with_indices(IDX, *args, memory_budget_bytes=budget))
        error = np.max(np.abs(blocked - whole)) / np.max(np.abs(whole))
        print(f"budget {budget} B: {error:.1e} from the whole evaluation")
        # Measured 0 (the same arithmetic per cell, only grouped differently).
        assert error < 1e-14
    assert _relative_error(whole, ref) < 1e-12
