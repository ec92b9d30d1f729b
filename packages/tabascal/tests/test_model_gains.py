"""Gains: reference antenna, unitary gains, Gaussian-process prior and their application.

The tests against numpy references run in float64 (the constants' default dtype) with jax's
64-bit mode scoped to each; the single-precision tests run with it off, as shipped.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal.model import gains

INT_TIME = 8.0  # s
CONFIG = gains.GainsConfig(corr_time_s=40.0, amp_sigma=0.1, phase_sigma=0.3, ref_ant=2)


def _draw(constants, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    zeros = jax.eval_shape(gains.init, constants)
    return gains.GainsParams(
        *(jnp.asarray(scale * rng.standard_normal(leaf.shape)) for leaf in zeros)
    )


@pytest.mark.usefixtures("x64")
def test_reference_antenna_phase_is_exactly_zero():
    phase_mean = np.full((5, 3), 0.7)
    phase_mean[CONFIG.ref_ant] = 0.0
    constants = gains.make_constants(CONFIG, 5, 3, 20, INT_TIME, phase_mean=phase_mean)
    params = _draw(constants, 0, scale=50.0)  # far from the prior: still exactly zero
    g = np.asarray(jax.jit(gains.forward)(params, constants))
    assert g.shape == (5, 3, 20) and g.dtype == np.complex128
    assert np.all(g[CONFIG.ref_ant].imag == 0.0)
    assert np.all(g[CONFIG.ref_ant].real > 0)
    others = np.delete(g, CONFIG.ref_ant, axis=0)
    assert np.all(np.abs(np.angle(others)) > 0), "the other antennas keep their phases"
    assert params.phase.shape == (4, 3, constants.weight_time.shape[0])


@pytest.mark.usefixtures("x64")
def test_forward_equals_the_documented_hartley_sum():
    n_ant, n_freq, n_time = 4, 2, 30
    log_amp_mean = np.linspace(-0.1, 0.1, n_ant * n_freq).reshape(n_ant, n_freq)
    phase_mean = np.linspace(-1, 1, n_ant * n_freq).reshape(n_ant, n_freq)
    phase_mean[CONFIG.ref_ant] = 0
    constants = gains.make_constants(
        CONFIG, n_ant, n_freq, n_time, INT_TIME, log_amp_mean=log_amp_mean, phase_mean=phase_mean
    )
    params = _draw(constants, 1)
    g = np.asarray(jax.jit(gains.forward)(params, constants))

    lag = CONFIG.corr_time_s * math.sqrt(2 * math.log(1 / CONFIG.wrap_tolerance))
    n_padded = n_time + max(math.ceil(lag / INT_TIME) - 1, 0)
    j_all = np.arange(-(n_padded // 2), n_padded // 2 + 1)
    power = np.exp(-2 * (np.pi * CONFIG.corr_time_s * j_all / (n_padded * INT_TIME)) ** 2)
    j = j_all[power >= CONFIG.cutoff]
    w = np.sqrt(power[power >= CONFIG.cutoff] / power[power >= CONFIG.cutoff].sum())
    assert params.log_amp.shape[-1] == j.size
    angle = 2 * np.pi * np.outer(np.arange(n_time), j) / n_padded
    cas = np.cos(angle) + np.sin(angle)
    phase_z = np.insert(np.asarray(params.phase), CONFIG.ref_ant, 0.0, axis=0)
    for a in range(n_ant):
        for f in range(n_freq):
            log_amp = log_amp_mean[a, f] + CONFIG.amp_sigma * cas @ (w * params.log_amp[a, f])
            phase = phase_mean[a, f] + CONFIG.phase_sigma * cas @ (w * phase_z[a, f])
            np.testing.assert_allclose(g[a, f], np.exp(log_amp + 1j * phase), rtol=1e-12)


@pytest.mark.usefixtures("x64")
def test_log_amplitude_and_phase_have_the_gaussian_kernel_covariance():
    n_ant, n_freq, n_time = 81, 100, 8  # 8000 independent (antenna, channel) draws
    config = gains.GainsConfig(corr_time_s=20.0, amp_sigma=0.1, phase_sigma=0.3)
    constants = gains.make_constants(config, n_ant, n_freq, n_time, INT_TIME)
    g = np.asarray(jax.jit(gains.forward)(_draw(constants, 2), constants))
    dt = (np.arange(n_time)[:, None] - np.arange(n_time)[None, :]) * INT_TIME
    kernel = np.exp(-0.5 * (dt / config.corr_time_s) ** 2)
    for x, sigma in ((np.log(np.abs(g)), config.amp_sigma), (np.angle(g[1:]), config.phase_sigma)):
        x = x.reshape(-1, n_time)
        empirical = np.einsum("na,nb->ab", x, x) / x.shape[0]
        tolerance = 6 * sigma**2 / math.sqrt(x.shape[0])
        assert np.max(np.abs(empirical - sigma**2 * kernel)) < tolerance
        assert abs(x.mean()) < 6 * sigma / math.sqrt(x.shape[0])


def test_unitary_gains_are_exactly_one_and_have_no_parameters():
    config = gains.GainsConfig(kind="unitary", ref_ant=0)
    constants = gains.make_constants(config, 4, 3, 10, INT_TIME, dtype=np.float32)
    params = gains.init(constants, jax.random.key(0))
    assert sum(leaf.size for leaf in jax.tree_util.tree_leaves(params)) == 0
    g = np.asarray(jax.jit(gains.forward)(params, constants))
    assert g.dtype == np.complex64 and g.shape == (4, 3, 10)
    np.testing.assert_array_equal(g, np.ones((4, 3, 10), np.complex64))
    assert float(jax.jit(gains.prior)(params)) == 0.0


@pytest.mark.usefixtures("x64")
def test_apply_matches_a_loop_over_baselines_and_blocks_of_rows():
    rng = np.random.default_rng(3)
    n_ant, n_freq, n_time = 5, 3, 7
    a1, a2 = np.triu_indices(n_ant)
    vis = rng.normal(size=(a1.size, n_freq, n_time)) + 1j * rng.normal(
        size=(a1.size, n_freq, n_time)
    )
    g = rng.normal(size=(n_ant, n_freq, n_time)) + 1j * rng.normal(size=(n_ant, n_freq, n_time))
    out = np.asarray(jax.jit(gains.apply)(vis, g, a1, a2))
    for b in range(a1.size):
        np.testing.assert_allclose(out[b], g[a1[b]] * vis[b] * np.conj(g[a2[b]]), rtol=1e-14)
    rows = slice(4, 11)
    block = np.asarray(jax.jit(gains.apply)(vis[rows], g, a1[rows], a2[rows]))
    np.testing.assert_array_equal(block, out[rows])


def test_single_precision_and_prior():
    with jax.enable_x64(True):  # the float64 reference, and the prior to 1e-12
        c64 = gains.make_constants(CONFIG, 4, 2, 12, INT_TIME)
        params = _draw(c64, 4)
        g64 = np.asarray(jax.jit(gains.forward)(params, c64))
        prior = float(jax.jit(gains.prior)(params))
    expected = 0.5 * sum(np.sum(np.asarray(x) ** 2) for x in params)
    np.testing.assert_allclose(prior, expected, rtol=1e-12)
    c32 = gains.make_constants(CONFIG, 4, 2, 12, INT_TIME, dtype=np.float32)
    p32 = gains.GainsParams(*(np.asarray(x, np.float32) for x in params))
    g32 = jax.jit(gains.forward)(p32, c32)
    assert g32.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(g32), g64, atol=1e-5)


@pytest.mark.usefixtures("x64")
def test_single_antenna_has_no_phase_parameters():
    constants = gains.make_constants(gains.GainsConfig(), 1, 2, 6, INT_TIME)
    params = gains.init(constants)
    assert params.phase.shape[0] == 0
    np.testing.assert_array_equal(np.asarray(jax.jit(gains.forward)(params, constants)), 1.0)


def test_reference_phase_mean_must_be_zero():
    phase_mean = np.zeros((3, 2))
    phase_mean[CONFIG.ref_ant, 1] = 0.1
    with pytest.raises(ValueError, match="reference antenna 2"):
        gains.make_constants(CONFIG, 3, 2, 6, INT_TIME, phase_mean=phase_mean)


def test_reference_antenna_out_of_range_is_refused():
    with pytest.raises(ValueError, match="ref_ant = 2; expected < n_ant = 2"):
        gains.make_constants(CONFIG, 2, 2, 6, INT_TIME)


def test_unknown_kind_lists_the_choices():
    with pytest.raises(ValueError, match="unitary"):
        gains.GainsConfig(kind="diagonal")


@pytest.mark.usefixtures("x64")
def test_init_from_gains_recovers_the_gains_of_any_modes_up_to_a_common_phase():
    """Gains drawn from modes far from the prior, turned by a phase common to every antenna
    (which no visibility can see) and given a reference antenna that is not the first: the
    fitted modes give back the gains referred to the reference, to rounding."""
    phase_mean = np.full((5, 3), 0.4)
    phase_mean[CONFIG.ref_ant] = 0.0
    constants = gains.make_constants(
        CONFIG, 5, 3, 20, INT_TIME, log_amp_mean=0.1, phase_mean=phase_mean
    )
    params = _draw(constants, 1, scale=4.0)  # phases of several radians: unwrapped in time
    g = np.asarray(gains.forward(params, constants))
    common = np.exp(1j * np.linspace(-3.0, 3.0, 20))[None, None, :] * np.exp(0.5j)
    fitted = gains.init_from_gains(constants, g * common, CONFIG.ref_ant)
    assert jax.tree.map(jnp.shape, fitted) == jax.tree.map(jnp.shape, params)
    back = np.asarray(gains.forward(fitted, constants))
    # Measured: 5.8e-15 apart at most, on gains of up to 2.8.
    np.testing.assert_allclose(back, g, rtol=0, atol=5e-13)
    with pytest.raises(ValueError, match=r"expected \(n_ant, n_freq, n_time\) = \(5, 3, 20\)"):
        gains.init_from_gains(constants, g[:, :, :10], CONFIG.ref_ant)
