"""Gauss-Legendre fine samples: the rule, its error bound, and both operators averaging a
channel against the closed-form channel mean of a pair's phasor.

With the amplitude constant across a channel (a one-point frequency stencil) and the pair's
delay difference D(tau) = d0 + dtau_p(tau) - dtau_q(tau) at time tau, the channel mean of the
pair's phasor is exactly ``exp(i phi_c(tau)) sinc(chan_width D(tau))`` (numpy's normalised
sinc; MHz x us = cycles). The references below integrate that over time with dense
Gauss-Legendre nodes (analytic) or with the operator's own time samples (quadrature), so that
the frequency rule is the only thing under test. Pairs cover a zero delay difference (an
autocorrelation), both signs, and 1.35 and 2.7 cycles across a channel.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import quadrature_jnp

from ri_kernels import (
    AnalyticTables,
    QuadratureTables,
    analytic_eval_with_indices,
    gauss_legendre_offsets,
    lagrange_stencils,
    make_indices,
    monomial_stencils,
    quadrature_eval_with_indices,
)

CHAN_MHZ, INT_TIME = 0.25, 2.0
FREQ_MHZ = np.array([150.0, 150.25])
A1, A2 = np.array([0, 1, 0, 2, 2]), np.array([1, 0, 2, 2, 1])
N_ANT, N_RFI, N_FREQ, N_TIME = 3, 2, 2, 4
# d0: 10.8 us between antennas 0 and 1 is 2.7 cycles across a 0.25 MHz channel.
D0_US = np.array([5.4, -5.4, 0.0])


def _mean_error_bound(n: int, w: float) -> float:
    """A&S 25.4.30 for the mean of exp(i w y) over y in [-1, 1] by n-point Gauss-Legendre."""
    log_k = (
        2 * n * math.log(2)
        + 4 * math.lgamma(n + 1)
        - math.log(2 * n + 1)
        - 3 * math.lgamma(2 * n + 1)
    )
    return math.exp(log_k + 2 * n * math.log(w)) if w > 0 else 0.0


def test_the_rule_is_exact_for_polynomials_of_degree_2n_minus_1():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 9):
        offsets, scale = gauss_legendre_offsets(2.0, n)  # a cell of width 2: y in [-1, 1]
        assert np.all(np.diff(offsets) > 0) and np.all(np.abs(offsets) < 1) and np.all(scale > 0)
        poly = rng.normal(size=2 * n)
        rule = np.mean(scale**2 * np.polynomial.polynomial.polyval(offsets, poly))
        exact = sum(c / (k + 1) for k, c in enumerate(poly) if k % 2 == 0)  # mean of y^k
        assert abs(rule - exact) <= 1e-14 * np.abs(poly).sum()  # measured <= 2e-16


@pytest.mark.parametrize("cycles", [0.05, 0.4, 1.35, 2.7, 7.3])
def test_the_error_bound_holds_and_is_tight_at_a_few_cycles(cycles):
    w = math.pi * cycles  # phase across half a cell, for cycles across the whole cell
    exact = np.sinc(cycles)
    for n in range(1, 24):
        offsets, scale = gauss_legendre_offsets(2.0, n)
        error = abs(np.mean(scale**2 * np.exp(1j * w * offsets)) - exact)
        bound = _mean_error_bound(n, w)
        assert error <= bound * (1 + 1e-9) + 1e-14, (n, error, bound)  # 1e-14: rounding
        if cycles < 3 and 1e-12 < bound < 1e-2:
            # measured: the error is 0.36 to 1.0 of the bound up to 2.7 cycles; beyond, the
            # bound grows loose (0.02 to 0.08 at 7.3 cycles), which only oversamples
            assert error >= bound / 4, (n, error, bound)


def _scene(seed):
    rng = np.random.default_rng(seed)
    shape = (N_ANT, N_RFI, N_FREQ, N_TIME)
    amp = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    phase = rng.uniform(0, 2 * np.pi, shape)
    delay = np.zeros((N_ANT, N_RFI, N_TIME, 3))
    delay[..., 0] = D0_US[:, None, None]
    delay[..., 1] = 0.3 * rng.normal(size=delay.shape[:3])  # us/s: up to ~300 cycles per cell
    delay[..., 2] = 0.01 * rng.normal(size=delay.shape[:3])
    return amp, phase, delay


def _frequency_tables(n_f):
    dnu, scale = gauss_legendre_offsets(CHAN_MHZ, n_f)
    w_freq, start_freq = lagrange_stencils(N_FREQ, dnu / CHAN_MHZ, 1)
    return w_freq * scale, start_freq, dnu


def _pair_delay_difference(delay, p, q, t, tau):
    """D(tau) of pair (p, q) and its time part dtau_p - dtau_q, each (n_rfi, len(tau)) us."""
    d = delay[p, :, t] - delay[q, :, t]
    dtau = d[:, 1, None] * tau + d[:, 2, None] * tau**2 / 2
    return d[:, 0, None] + dtau, dtau


def test_quadrature_operator_with_gauss_samples_averages_the_channel_in_closed_form():
    amp, phase, delay = _scene(1)
    w_freq, start_freq, dnu = _frequency_tables(24)
    dt, time_scale = gauss_legendre_offsets(INT_TIME, 5)
    w_time0, start_time = lagrange_stencils(N_TIME, dt / INT_TIME, 3)
    w_time = w_time0 * time_scale
    with jax.enable_x64(True):
        tables = QuadratureTables(w_freq, start_freq, w_time, start_time, dnu, dt)
        vis = quadrature_eval_with_indices(
            make_indices(N_ANT, A1, A2), amp, phase, delay, tables, FREQ_MHZ
        )
    weights = time_scale**2 / dt.size
    ref = np.zeros(vis.shape, np.complex128)
    for b, (p, q) in enumerate(zip(A1, A2, strict=True)):
        for f in range(N_FREQ):
            for t in range(N_TIME):
                rows = start_time[t] + np.arange(3)
                a_p = np.einsum("rl,lv->rv", amp[p, :, f][:, rows], w_time0[t])
                a_q = np.einsum("rl,lv->rv", amp[q, :, f][:, rows], w_time0[t])
                big_d, dtau = _pair_delay_difference(delay, p, q, t, dt)
                phi = phase[p, :, f, t, None] - phase[q, :, f, t, None]
                phi = phi + 2 * np.pi * FREQ_MHZ[f] * dtau
                mean = a_p * np.conj(a_q) * np.exp(1j * phi) * np.sinc(CHAN_MHZ * big_d)
                ref[b, f, t] = np.sum(mean * weights)
    assert np.abs(ref[1]).max() < 0.3 * np.abs(ref[3]).max()  # the winding pairs are smeared
    error = np.abs(np.asarray(vis) - ref).max() / np.abs(ref).max()
    print(f"quadrature, 24 Gauss samples per channel, against the closed form: {error:.1e}")
    assert error < 3e-13, error  # measured 2.4e-15


def test_analytic_operator_with_gauss_samples_averages_the_channel_in_closed_form():
    amp, phase, delay = _scene(2)
    w_freq, start_freq, dnu = _frequency_tables(24)
    g_time, start_time = monomial_stencils(N_TIME, 3)
    with jax.enable_x64(True):
        tables = AnalyticTables(w_freq, start_freq, g_time, start_time, dnu, INT_TIME)
        vis = analytic_eval_with_indices(
            make_indices(N_ANT, A1, A2), amp, phase, delay, tables, FREQ_MHZ, segments=4,
            terms=16, cubic_terms=3,
        )  # fmt: skip
    x, w = np.polynomial.legendre.leggauss(2000)  # to 600 cycles per cell
    tau = INT_TIME / 2 * x
    ref = np.zeros(vis.shape, np.complex128)
    for b, (p, q) in enumerate(zip(A1, A2, strict=True)):
        for f in range(N_FREQ):
            for t in range(N_TIME):
                rows = start_time[t] + np.arange(3)
                powers = x[None, :] ** np.arange(3)[:, None]
                a_p = np.einsum("rl,lm,mx->rx", amp[p, :, f][:, rows], g_time[t], powers)
                a_q = np.einsum("rl,lm,mx->rx", amp[q, :, f][:, rows], g_time[t], powers)
                big_d, dtau = _pair_delay_difference(delay, p, q, t, tau)
                phi = phase[p, :, f, t, None] - phase[q, :, f, t, None]
                phi = phi + 2 * np.pi * FREQ_MHZ[f] * dtau
                mean = a_p * np.conj(a_q) * np.exp(1j * phi) * np.sinc(CHAN_MHZ * big_d)
                ref[b, f, t] = np.sum(mean * w / 2)
    error = np.abs(np.asarray(vis) - ref).max() / np.abs(ref).max()
    print(f"analytic, 24 Gauss samples per channel, against the closed form: {error:.1e}")
    assert error < 1e-11, error  # measured 1.3e-13 (the analytic operator's own moments)


def test_gradients_with_gauss_samples_equal_the_dense_reference():
    """The quadrature operator's gradient with respect to amp and delay_us, with Gauss
    weights folded into both tables, against autodiff of the dense jnp reference."""
    amp, phase, delay = _scene(3)
    w_freq, start_freq, dnu = _frequency_tables(6)
    dt, time_scale = gauss_legendre_offsets(INT_TIME, 3)
    w_time, start_time = lagrange_stencils(N_TIME, dt / INT_TIME, 3)
    w_time = w_time * time_scale
    weights = np.random.default_rng(4).normal(size=(A1.size, N_FREQ, N_TIME))
    tables = QuadratureTables(w_freq, start_freq, w_time, start_time, dnu, dt)
    idx = make_indices(N_ANT, A1, A2)

    def ours(amp, delay):
        vis = quadrature_eval_with_indices(idx, amp, phase, delay, tables, FREQ_MHZ)
        return jnp.sum(weights * jnp.abs(vis) ** 2)

    def dense(amp, delay):
        vis = quadrature_jnp(A1, A2, amp, phase, delay, tables, FREQ_MHZ)
        return jnp.sum(weights * jnp.abs(vis) ** 2)

    with jax.enable_x64(True):
        got = jax.grad(ours, argnums=(0, 1))(amp, delay)
        want = jax.grad(dense, argnums=(0, 1))(amp, delay)
    # measured 3.2e-15 (amp) and 2.4e-13 (delay_us, whose cotangents sum larger terms)
    for name, g, r, bound in zip(("amp", "delay_us"), got, want, (3e-13, 3e-11), strict=True):
        error = np.abs(np.asarray(g) - np.asarray(r)).max() / np.abs(np.asarray(r)).max()
        print(f"gradient with respect to {name} against the dense reference: {error:.1e}")
        assert error < bound, (name, error)


def test_gauss_legendre_offsets_refuses_bad_arguments():
    with pytest.raises(ValueError, match="n_int must be >= 1; got 0"):
        gauss_legendre_offsets(1.0, 0)
    with pytest.raises(ValueError, match=r"width must be positive and finite; got -1\.0"):
        gauss_legendre_offsets(-1.0, 3)
