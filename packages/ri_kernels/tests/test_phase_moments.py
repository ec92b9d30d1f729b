"""Closed-form phase moments and Fresnel integrals against independent dense quadrature.

Every reference here is composite Gauss-Legendre in numpy float64, written from the defining
integrals; nothing is shared with the code under test.
"""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ri_kernels
from ri_kernels._curved_moments import stationary_ratio
from ri_kernels._fresnel import fresnel_aux, fresnel_cs
from ri_kernels._linear_moments import expansion_switch, log_tolerance
from ri_kernels._phase_moments import phase_moments

# float64 by design: every case is checked against a float64 reference to 1e-6 or closer; the
# two float32 tests turn the mode off around the float32 evaluation, as shipped.
pytestmark = pytest.mark.usefixtures("x64")

N_MOMENTS = 17  # the operator's largest: degree 2 (n_coef - 1) with n_coef = 9
BATCH = 16  # every float64 call uses this shape, so each option set compiles once
TOL = 1e-6
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(24)


def dense_moments(phi0, a, b, c, n_moments=N_MOMENTS):
    """(1/2) ∫_{-1}^{1} x^m exp(i(φ0 + a x + b x² + c x³)) dx, panels of at most ~2 rad."""
    out = []
    for p, aa, bb, cc in np.broadcast(phi0, a, b, c):
        panels = int(max(32, np.ceil((abs(aa) + 2 * abs(bb) + 3 * abs(cc)) / 2)))
        edges = np.linspace(-1.0, 1.0, panels + 1)
        half = (edges[1] - edges[0]) / 2
        x = (((edges[:-1] + edges[1:]) / 2)[:, None] + half * _NODES).ravel()
        f = 0.5 * np.tile(half * _WEIGHTS, panels) * np.exp(1j * (p + x * (aa + x * (bb + x * cc))))
        row = []
        for _ in range(n_moments):
            row.append(f.sum())
            f = f * x
        out.append(row)
    return np.array(out)


def relative_error(w, ref):
    """Per case: max over m of |W - W_ref|, relative to max over m of |W_ref|."""
    return np.abs(np.asarray(w) - ref).max(axis=-1) / np.abs(ref).max(axis=-1)


_compiled = {}


def moments(cases, **options):
    """phase_moments on rows (φ0, a, b, c), float64, in fixed-size batches."""
    key = tuple(sorted(options.items()))
    if key not in _compiled:
        _compiled[key] = jax.jit(lambda p, a, b, c: phase_moments(p, a, b, c, N_MOMENTS, **options))
    cases = np.asarray(cases, dtype=np.float64).reshape(-1, 4)
    pad = -len(cases) % BATCH
    padded = np.concatenate([cases, np.zeros((pad, 4))])
    out = [
        np.asarray(_compiled[key](*jnp.asarray(chunk.T))) for chunk in padded.reshape(-1, BATCH, 4)
    ]
    return np.concatenate(out)[: len(cases)]


def assert_matches_quadrature(cases, tol=TOL, **options):
    cases = np.asarray(cases, dtype=np.float64).reshape(-1, 4)
    err = relative_error(moments(cases, **options), dense_moments(*cases.T))
    worst = int(err.argmax())
    assert err[worst] < tol, f"case (φ0, a, b, c) = {cases[worst]}: relative error {err[worst]:.2e}"


def satellite_cubic(nu_mhz, half_time, d1, d2, d3):
    """(a, b, c) of a baseline from its delay derivatives (us/s^k): docs/kernels.md, "The analytic
    operator"."""
    return (
        2 * math.pi * nu_mhz * d1 * half_time,
        math.pi * nu_mhz * d2 * half_time**2,
        math.pi / 3 * nu_mhz * d3 * half_time**3,
    )


# Satellite passes over baselines of 1-10 km at 1-1.5 GHz, integrations of 2-4 s:
# |d1| <= 0.25 us/s, |d2| <= 2e-3 us/s^2, |d3| <= 5e-4 us/s^3, giving |a| <= 4.7e3,
# |b| <= 36 and |c| <= 0.75.
SATELLITES = [
    satellite_cubic(nu, half, *d)
    for nu in (1000.0, 1500.0)
    for half in (1.0, 2.0)
    for d in ((0.025, 1.9e-4, 1.4e-6), (0.25, 1.9e-3, 1.4e-5), (-0.03, 5e-4, -6e-5))
] + [satellite_cubic(1000.0, 1.0, 0.1, -1e-3, 5e-4), satellite_cubic(1400.0, 1.0, 0.2, 1e-3, 5e-4)]


def test_zero_winding_is_exact():
    w = moments([[0.3, 0.0, 0.0, 0.0]])[0]
    m = np.arange(N_MOMENTS)
    expected = np.exp(0.3j) * np.where(m % 2 == 0, 1.0 / (m + 1), 0.0)
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "options", [{}, {"segments": 4, "terms": 16, "cubic_terms": 3}], ids=["2-6-3", "4-16-3"]
)
def test_large_winding_matches_quadrature(options):
    cases = [
        [1.0, a, b, c]
        for a in (1e4, -1e4, 3.3e3, 157.0, 31.4)
        for b in (0.0, 0.6, 10.0, -95.0)
        for c in (0.0, 1.5e-3, 0.5)
    ]
    assert_matches_quadrature(cases, **options)


def test_both_sides_of_the_stationary_point_edges():
    # On the piece at x = +1/2 of two, α = (a + b)/2 and β = b/4 (c = 0): the design's
    # Fresnel edge |α| = 2.5|β| is a = 0.25b or a = -2.25b; this implementation's edge
    # |α| = κ|β| is a = (κ/2 - 1)b or a = -(κ/2 + 1)b.
    kappa = stationary_ratio(N_MOMENTS - 1 + 9, 6, np.float64)
    edges = (0.25, -2.25, kappa / 2 - 1, -kappa / 2 - 1)
    cases = []
    for b in (2.0, 8.0, -30.0, 120.0):
        cases += [[0.2, r * b, b, 0.0] for r in np.linspace(-4.5, 4.5, 19)]
        cases += [[0.2, r * b * (1 + e), b, 0.0] for r in edges for e in (-1e-9, 0, 1e-9)]
    assert_matches_quadrature(cases)


def test_both_sides_of_the_curvature_switches():
    # The design's Fresnel switch |β| = 1 (b = 4 on two pieces) and this implementation's
    # switch between the curvature expansion and the Fresnel seed (|β| = β_s, terms = 6).
    beta_s = expansion_switch(6, log_tolerance(np.float64))
    cases = [
        [-1.0, a, sign * 4 * beta * scale, c]
        for beta in (1.0, beta_s)
        for scale in (1 - 1e-7, 1.0, 1 + 1e-7)
        for sign in (1, -1)
        for a in (0.0, 1.0, 30.0)
        for c in (0.0, 0.01)
    ]
    assert_matches_quadrature(cases)


def test_satellite_cubics_match_quadrature():
    assert_matches_quadrature([[0.7, *abc] for abc in SATELLITES])


def test_conservative_options_reach_larger_cubics():
    # c = 6.3 (d3 = 5e-4 us/s^3 at 1.5 GHz over 4 s) needs more pieces than the default.
    cases = [
        [0.7, *satellite_cubic(1500.0, 2.0, 0.1, -1e-3, 5e-4)],
        *[[0.7, *s] for s in SATELLITES],
    ]
    assert_matches_quadrature(cases, segments=4, terms=16, cubic_terms=3)


def test_single_piece_without_cubic_matches_quadrature_when_c_is_zero():
    cases = [[0.4, a, b, 0.0] for a in (0.0, 3.0, 157.0, -1e4) for b in (0.0, 0.5, -4.0, 40.0)]
    assert_matches_quadrature(cases, segments=1, terms=6, cubic_terms=0)


def test_the_cubic_term_matters():
    # d3 = 5e-4 us/s^3 at 1 GHz over a 2 s integration: c = 0.52.
    a, b, c = satellite_cubic(1000.0, 1.0, 0.1, -1e-3, 5e-4)
    with_cubic = moments([[0.0, a, b, c]])[0]
    without = moments([[0.0, a, b, 0.0]])[0]
    assert np.abs(with_cubic - without).max() > 1e-4 * np.abs(with_cubic).max()
    # Dropping it with cubic_terms=0 is also visible at this c.
    truncated = moments([[0.0, a, b, c]], segments=1, terms=6, cubic_terms=0)[0]
    assert np.abs(with_cubic - truncated).max() > 1e-4 * np.abs(with_cubic).max()
    assert relative_error(with_cubic, dense_moments(0.0, a, b, c))[0] < TOL


# (φ0, a, b) of the cubic_terms=0 tests: no winding, a satellite's, large winding with
# curvature on both sides of the expansion's switch.
_WITHOUT_CUBIC_ROWS = [(0.4, 0.0, 0.0), (0.0, 628.3, -3.1), (1.0, 3.3e3, 10.0), (-0.5, 30.0, 0.6)]
_CUBICS = (0.01, 0.1, 0.5, 2.0)


def test_zero_cubic_terms_equals_the_phase_without_its_cubic_coefficient():
    cases = np.array([[*row, c] for row in _WITHOUT_CUBIC_ROWS for c in _CUBICS])
    without = moments(cases, segments=1, terms=6, cubic_terms=0)
    zeroed = cases.copy()
    zeroed[:, 3] = 0.0
    np.testing.assert_array_equal(without, moments(zeroed, segments=1, terms=6, cubic_terms=0))
    # Measured 2.0e-12 (at a = 3.3e3 rad) against quadrature of φ0 + a x + b x² alone.
    assert relative_error(without, dense_moments(*zeroed.T)).max() < 2e-10


def test_zero_cubic_terms_errs_by_more_as_the_cubic_grows():
    cases = np.array([[*row, c] for row in _WITHOUT_CUBIC_ROWS for c in _CUBICS])
    err = relative_error(
        moments(cases, segments=1, terms=6, cubic_terms=0), dense_moments(*cases.T)
    )
    err = err.reshape(len(_WITHOUT_CUBIC_ROWS), len(_CUBICS))
    # Each row's error against the full cubic grows with c, about as c itself: measured
    # 2.0e-3 to 1.0e-2 at c = 0.01, 0.39 to 2.2 at c = 2.
    assert np.all(np.diff(err, axis=1) > 0), err
    assert err[:, 0].min() > 2e-5, err


@pytest.mark.slow
def test_zero_cubic_terms_does_not_depend_on_c():
    phi0, a, b = (jnp.asarray(np.array(v)) for v in zip(*_WITHOUT_CUBIC_ROWS, strict=True))
    c = jnp.full_like(a, 0.5)

    def w(a, c):
        return phase_moments(phi0, a, b, c, 5, segments=1, terms=6, cubic_terms=0)

    _, dw_dc = jax.jvp(lambda c: w(a, c), (c,), (jnp.ones_like(c),))
    assert np.all(np.asarray(dw_dc) == 0)
    _, dw_da = jax.jvp(lambda a: w(a, c), (a,), (jnp.ones_like(a),))
    _, dw_da_zeroed = jax.jvp(lambda a: w(a, 0 * c), (a,), (jnp.ones_like(a),))
    np.testing.assert_array_equal(dw_da, dw_da_zeroed)


@settings(max_examples=12, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(-math.pi, math.pi),
            st.floats(-1e4, 1e4),
            st.floats(-100.0, 100.0),
            st.floats(-1.0, 1.0),
        ),
        min_size=BATCH,
        max_size=BATCH,
    )
)
def test_random_phases_match_quadrature(cases):
    assert_matches_quadrature(cases)


def test_blocks_and_gathered_chunks_equal_small_batches():
    # More elements than one CPU block of the expansion, and more pieces above the switch
    # than one gathered chunk of the curved method: the result must not depend on how the
    # elements are grouped.
    rng = np.random.default_rng(7)
    n = 4300
    small_b = rng.uniform(-1e-3, 1e-3, n)
    cases = np.stack(
        [
            rng.uniform(-3, 3, n),
            rng.uniform(-300, 300, n),
            np.where(rng.uniform(size=n) < 0.4, small_b, rng.uniform(-50, 50, n)),
            rng.uniform(-0.5, 0.5, n),
        ],
        axis=1,
    )
    whole = jax.jit(lambda p, a, b, c: phase_moments(p, a, b, c, N_MOMENTS))
    w = np.asarray(whole(*jnp.asarray(cases.T)))
    some = slice(None, None, 8)  # enough rows, in other groups of 16, to cover both methods
    np.testing.assert_allclose(w[some], moments(cases[some]), rtol=0, atol=1e-12)


def test_float32_inputs_match_float64_to_the_rounding_of_their_working_precision():
    rng = np.random.default_rng(5)
    # Broadcast shapes: φ0 scalar, a (4, 1), b (1, 4), c scalar; the 16 combinations are
    # checked against the float64 batch of the same (float32-representable) values.
    phi0 = np.float32(0.3)
    a = rng.uniform(-2e3, 2e3, (4, 1)).astype(np.float32)
    b = rng.uniform(-20, 20, (1, 4)).astype(np.float32)
    c = np.float32(0.4)
    cases = np.stack([np.broadcast_to(v, (4, 4)).astype(np.float64) for v in (phi0, a, b, c)])
    w64 = moments(cases.reshape(4, -1).T)
    assert w64.dtype == np.complex128
    run = jax.jit(phase_moments, static_argnums=4)
    # With the 64-bit mode on (this module's), float32 inputs are evaluated in float64, the
    # widest precision available, and only the result is rounded: measured 4.8e-8.
    widened = run(phi0, a, b, c, N_MOMENTS)
    assert widened.shape == (4, 4, N_MOMENTS) and widened.dtype == jnp.complex64
    assert relative_error(np.asarray(widened).reshape(-1, N_MOMENTS), w64).max() < 5e-6
    # Without it, as shipped, the work is float32, with φ0 and a carried as two floats in
    # turns: measured 1.2e-6, not growing with |a| (up to 1232 here). Formed in one float32,
    # the angles lost |a| 2^-24 rad, measured 1.17 |a| 2^-24 (8.6e-5 at |a| = 1232).
    with jax.enable_x64(False):
        w32 = run(phi0, a, b, c, N_MOMENTS)
    assert w32.shape == (4, 4, N_MOMENTS) and w32.dtype == jnp.complex64
    err = relative_error(np.asarray(w32).reshape(-1, N_MOMENTS), w64)
    assert err.max() < 2e-5, err


def test_float32_arithmetic_without_x64():
    # Without x64 the work is float32, checked at the operator's typical degree (three
    # coefficients, five moments): measured 1.1e-6 (6.9e-6 with the angles formed in one
    # float32, before φ0 and a were carried as two floats).
    rng = np.random.default_rng(6)
    cases = np.stack(
        [
            rng.uniform(-3, 3, 64),
            rng.uniform(-100, 100, 64),
            rng.uniform(-10, 10, 64),
            rng.uniform(-0.5, 0.5, 64),
        ]
    ).astype(np.float32)
    with jax.enable_x64(False):
        run = jax.jit(phase_moments, static_argnums=4)
        w32 = np.asarray(run(*(jnp.asarray(v) for v in cases), 5))
    assert w32.dtype == np.complex64
    err = relative_error(w32, dense_moments(*cases.astype(np.float64), n_moments=5))
    assert err.max() < 3e-5


SPECIAL_POINTS = [
    (0.0, 0.0, 0.0, 0.0),  # zero winding
    (0.1, 2.0, 0.0, 0.0),  # β = 0, α != 0
    (0.1, 0.0, 3.0, 0.0),  # α = 0 on both pieces
    (0.1, 1.0, 4.0, 0.0),  # piece β = 1 exactly (design switch)
    (0.1, 1.0, 8.0, 0.0),  # piece at x = -1/2: α = -2.5 β exactly (design edge)
    (0.1, 12.0, 4.0, 0.0),  # stationary point at the end of a piece: α = 2β, t = 0
    (0.1, 1e4, 20.0, 0.5),  # large winding
    (0.1, 0.0, 0.0, 0.3),  # cubic only
]


def test_gradients_are_finite_at_branch_points():
    beta_s = expansion_switch(6, log_tolerance(np.float64))
    points = [*SPECIAL_POINTS, (0.1, 0.5, 4 * beta_s, 0.0)]  # at the expansion switch
    generic = (0.3, 17.0, 5.0, 0.2)
    h = 1e-5
    # Rows: the special points, then a generic point and its two neighbours in b.
    rows = np.array([*points, generic, *((0.3, 17.0, 5.0 + s, 0.2) for s in (h, -h))])
    rows = np.concatenate([rows, np.zeros((BATCH - len(rows), 4))])

    def total_power(p, a, b, c):
        # Rows are independent, so the gradient of the sum holds each row's own gradient.
        return jnp.sum(jnp.abs(phase_moments(p, a, b, c, N_MOMENTS)) ** 2)

    grad = jax.jit(jax.grad(total_power, argnums=(0, 1, 2, 3)))
    g = np.stack([np.asarray(x) for x in grad(*jnp.asarray(rows.T))])
    assert np.isfinite(g).all(), rows[~np.isfinite(g).all(axis=0)]
    # And they are right: a central difference in b at the generic point.
    power = (np.abs(moments(rows)) ** 2).sum(axis=-1)
    k = len(points)
    fd = (power[k + 1] - power[k + 2]) / (2 * h)
    assert abs(g[2, k] - fd) < 1e-7 * max(1.0, abs(fd))


def test_options_are_validated():
    x = jnp.zeros(3)
    for kwargs, name in [
        ({"segments": 0}, "segments"),
        ({"segments": 1025}, "segments"),
        ({"terms": 0}, "terms"),
        ({"terms": 33}, "terms"),
        ({"cubic_terms": -1}, "cubic_terms"),
        ({"cubic_terms": 9}, "cubic_terms"),
        ({"segments": 2.0}, "segments"),
        ({"terms": True}, "terms"),
    ]:
        with pytest.raises(ValueError, match=name):
            phase_moments(x, x, x, x, 3, **kwargs)
    for n in (0, 18):
        with pytest.raises(ValueError, match="n_moments"):
            phase_moments(x, x, x, x, n)


def test_mixed_or_integer_dtypes_are_refused():
    x64 = jnp.zeros(3, jnp.float64)
    x32 = jnp.zeros(3, jnp.float32)
    with pytest.raises(ValueError, match="float32 or all float64"):
        phase_moments(x64, x32, x64, x64, 3)
    with pytest.raises(ValueError, match="float32 or all float64"):
        phase_moments(*(jnp.zeros(3, jnp.int32),) * 4, 3)


# Fresnel integrals


def fresnel(x):
    """fresnel_cs on a fixed-size float64 batch (one compilation for every test)."""
    padded = np.zeros(256)
    padded[: len(x)] = x
    c, s = _fresnel_cs(jnp.asarray(padded))
    return np.asarray(c)[: len(x)], np.asarray(s)[: len(x)]


_fresnel_cs = jax.jit(fresnel_cs)


def dense_fresnel(x):
    """∫_0^x exp(iπu²/2) du, panels of at most ~1 rad."""
    out = []
    for xx in np.atleast_1d(x):
        panels = int(max(8, np.ceil(abs(xx) * max(abs(xx), 1) * 2)))
        edges = np.linspace(0.0, xx, panels + 1)
        half = (edges[1] - edges[0]) / 2
        u = (((edges[:-1] + edges[1:]) / 2)[:, None] + half * _NODES).ravel()
        out.append(np.sum(np.tile(half * _WEIGHTS, panels) * np.exp(0.5j * np.pi * u * u)))
    return np.array(out)


def asymptotic_fresnel(x):
    """C + iS for x >= 50 from the auxiliary asymptotic series, with πx²/2 reduced exactly."""
    out = []
    for xx in x:
        quarter = Fraction(float(xx)) ** 2 / 4
        angle = 2 * math.pi * float(quarter - round(quarter))
        z = math.pi * xx * xx
        g_aux, term = 0j, 1j / (math.pi * xx)
        for n in range(12):
            g_aux += term
            term *= (2 * n + 1) / (1j * z)
        out.append((0.5 + 0.5j) - g_aux * complex(math.cos(angle), math.sin(angle)))
    return np.array(out)


def test_fresnel_integrals_match_quadrature():
    x = np.concatenate([np.linspace(-8.0, 8.0, 161), [1e-6, 1e-3, 0.999, 1.0, 1.001, -1e-3]])
    c, s = fresnel(x)
    ref = dense_fresnel(x)
    np.testing.assert_allclose(np.asarray(c), ref.real, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(np.asarray(s), ref.imag, rtol=1e-13, atol=1e-300)


def test_fresnel_integrals_at_large_argument():
    x = np.array([50.0, 123.456, 1e3 + 0.1, 3.3e4, 9.87654321e4])
    c, s = fresnel(x)
    ref = asymptotic_fresnel(x)
    np.testing.assert_allclose(np.asarray(c), ref.real, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(s), ref.imag, rtol=1e-14)


def test_fresnel_auxiliary_function_solves_its_equation():
    # G(0) = (1 + i)/2 and G'(t) = -1 - iπ t G(t), which fix G.
    t = jnp.asarray(np.concatenate([[0.0], np.logspace(-3, 4, 60)]))
    g, dg = jax.jit(lambda t: jax.jvp(fresnel_aux, (t,), (jnp.ones_like(t),)))(t)
    np.testing.assert_allclose(g[0], 0.5 + 0.5j, rtol=1e-15)
    residual = np.abs(dg + 1 + 1j * np.pi * t * g)
    assert residual.max() < 1e-12 * (1 + np.pi * np.asarray(t) * np.abs(g)).max()


# (|c| bound, error, cubic terms chosen on two pieces): a navigation satellite over a few km
# (1.5 GHz, 10 s integrations: |c| ~ 1e-7 rad); LEOs over a few km in 2 s integrations, held
# to 1e-9, 1e-7 and 1e-8 of the signal; one at the options' limit.
FEWEST_CASES = [(1e-7, 1e-6, 0), (1e-3, 1e-9, 1), (4e-3, 1e-7, 1), (0.1, 1e-8, 2), (0.75, 1e-7, 3)]


@pytest.mark.parametrize("cubic, error, chosen", FEWEST_CASES)
def test_fewest_cubic_terms_hold_the_error_they_are_given(cubic, error, chosen):
    from ri_kernels import cubic_series_error, fewest_cubic_terms

    k = fewest_cubic_terms(cubic, error, segments=2, dtype=np.float64)
    # The choice by hand: K terms on a piece's residual g = |c| / 8 err by
    # (g/4)**(K+1)/(K+1)! e^(g/4), K = 0 by |c|: 1e-7 <= 1e-6; 1e-3 > 1e-9 >= 4.9e-10;
    # 4e-3 > 1e-7 >= 7.8e-9; 4.9e-6 > 1e-8 >= 5.1e-9; 2.1e-6 > 1e-7 >= 1.3e-8.
    assert k == chosen
    assert cubic_series_error(cubic if k == 0 else cubic / 8, k) <= error
    cases = np.array(
        [
            [0.3, a, b, sc * cubic]
            for a in (0.0, 37.0, 1200.0, 9000.0)
            for b in (0.05, -20.0)
            for sc in (1.0, -1.0, 0.0)
        ]
    )
    reference = dense_moments(*cases.T)

    def worst(cubic_terms):
        w = moments(cases, segments=2, terms=6, cubic_terms=cubic_terms)
        return np.abs(w - reference).max()

    # The moments' error, relative to the signal (|W_m| <= 1), within what was asked and
    # within the series' bound plus the float64 moments' own 1e-11 or so.
    # Measured: 2.0e-8, 2.4e-10, 3.8e-9, 3.9e-10, 4.4e-9 against bounds of 1e-7, 4.9e-10,
    # 7.8e-9, 5.1e-9 and 1.3e-8.
    found = worst(k)
    assert found <= error, found
    assert found <= cubic_series_error(cubic if k == 0 else cubic / 8, k) + 1e-11
    if k > 0:  # and one term fewer errs by more than was asked: measured 2.0e-4 > 1e-9,
        # 8.0e-4 > 1e-7, 2.4e-6 > 1e-8, 1.6e-7 > 1e-7
        fewer = worst(k - 1)
        assert fewer > error, fewer


@pytest.mark.parametrize(("dtype", "eps"), [(np.float32, 2.0**-23), (np.float64, 2.0**-52)])
def test_curvature_switch_is_where_the_expansions_tail_reaches_the_precision(dtype, eps):
    # The tail of sum_{k<K} (i beta)^k / k! is at most beta^K e^beta / K!: at the switch it is
    # the working precision (the bisection's residue is far below 1e-9 of it).
    for terms in (3, 6, 12):
        beta = ri_kernels.curvature_switch(terms, dtype)
        tail = beta**terms * math.exp(beta) / math.factorial(terms)
        assert tail == pytest.approx(eps, rel=1e-9)
    assert round(ri_kernels.curvature_switch(6, np.float32), 3) == 0.203
    with pytest.raises(ValueError, match="terms=0 is out of range"):
        ri_kernels.curvature_switch(0)
