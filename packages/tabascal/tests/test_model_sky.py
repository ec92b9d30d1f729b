"""Sky Fourier Gaussian process against direct numpy constructions of the documented prior."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal.model import sky

# float64 by design: the constants' default dtype, against numpy references to 1e-12; the
# single-precision test turns the mode off around the float32 path, as shipped.
pytestmark = pytest.mark.usefixtures("x64")

CHAN_WIDTH = 1.0e6  # Hz
INT_TIME = 10.0  # s
CONFIG = sky.SkyConfig(bandwidth_hz=1.5e6, rolloff=0.25, cutoff=1e-3, wrap_tolerance=1e-3)
#: The default: each baseline's frequency knee from its largest sky delay.
DELAY_CONFIG = sky.SkyConfig(rolloff=0.25, cutoff=1e-3, wrap_tolerance=1e-3)


def _erf(x):
    return np.vectorize(math.erf)(x)


def _time_power(nu, knee, rolloff):
    """Documented edge spectrum: box of half-width knee smoothed by a Gaussian, S(0) = 1."""
    s = math.sqrt(2) * rolloff * knee
    return 0.5 * (_erf((knee - nu) / s) + _erf((knee + nu) / s)) / _erf(knee / s)


def _edge_reference(config, bounds, n, delta, n_padded, half):
    """Per-baseline unit-variance amplitudes of the documented edge spectrum, (n_bl, 2J + 1):
    knee = max(knee_factor bound, 1 / (4 n delta)), modes below the cutoff at zero."""
    x = np.abs(np.arange(-half, half + 1)) / (n_padded * delta)
    rows = []
    for bound in bounds:
        p = _time_power(x, max(config.knee_factor * bound, 0.25 / (n * delta)), config.rolloff)
        rows.append(np.where(p >= config.cutoff, p, 0))
    rows = np.array(rows)
    return np.sqrt(rows / rows.sum(axis=1, keepdims=True))


def _reference_weights(config, grid, rates):
    """Unit-variance mode amplitudes rebuilt from the module docstring, (n_kf,), (n_bl, n_kt)."""
    k = np.arange(-grid.half_freq, grid.half_freq + 1)
    p_f = np.exp(-2 * np.pi**2 * (config.bandwidth_hz * k / (grid.n_freq_padded * CHAN_WIDTH)) ** 2)
    w_t = _edge_reference(config, rates, grid.n_time, INT_TIME, grid.n_time_padded, grid.half_time)
    return np.sqrt(p_f / p_f.sum()), w_t


def _draw(constants, seed, dtype=np.float64):
    """Whitened parameters drawn with numpy (jax.random is tested once, in test_init_*)."""
    shape = jax.eval_shape(sky.init, constants).z.shape
    return sky.SkyParams(jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype))


def _setup(rates, n_freq=4, n_time=12, scale=1.0, mean=0.0, dtype=np.float64):
    grid = sky.make_grid(CONFIG, rates, n_freq, n_time, CHAN_WIDTH, INT_TIME)
    constants = sky.make_constants(CONFIG, grid, rates, scale=scale, mean=mean, dtype=dtype)
    return grid, constants


def test_grid_padding_and_box_follow_the_documented_rule():
    rates = np.array([0.02, 0.05])
    grid, _ = _setup(rates, n_freq=8, n_time=40)
    tol = math.sqrt(2 * math.log(1 / CONFIG.wrap_tolerance))
    pad_f = min(max(math.ceil(CONFIG.bandwidth_hz * tol / CHAN_WIDTH) - 1, 0), 8)
    time_length = 1 / (2 * math.pi * CONFIG.rolloff * 0.02)
    pad_t = min(max(math.ceil(time_length * tol / INT_TIME) - 1, 0), 40)
    assert (grid.n_freq_padded, grid.n_time_padded) == (8 + pad_f, 40 + pad_t)
    assert grid.n_time_padded < 80, "this case must not hit the doubling cap"
    half_f = max(
        k
        for k in range(grid.n_freq_padded // 2 + 1)
        if math.exp(
            -2 * (math.pi * CONFIG.bandwidth_hz * k / (grid.n_freq_padded * CHAN_WIDTH)) ** 2
        )
        >= CONFIG.cutoff
    )
    nu = np.arange(grid.n_time_padded // 2 + 1) / (grid.n_time_padded * INT_TIME)
    half_t = int(np.max(np.flatnonzero(_time_power(nu, 0.05, CONFIG.rolloff) >= CONFIG.cutoff)))
    assert grid.half_freq == min(half_f, (grid.n_freq_padded - 1) // 2)
    assert grid.half_time == min(half_t, (grid.n_time_padded - 1) // 2)


def test_forward_equals_direct_dft_sum_of_the_documented_spectrum():
    rates = np.array([0.0, 0.004, 0.02])
    scale = np.array([1.0, 2.0, 0.5])
    mean = np.array([0.3 - 0.1j, 0.0, 2.0j])
    grid, constants = _setup(rates, n_freq=5, n_time=16, scale=scale, mean=mean)
    params = _draw(constants, 1)
    vis = np.asarray(jax.jit(sky.forward)(params, constants))

    w_f, w_t = _reference_weights(CONFIG, grid, rates)
    p = np.asarray(params.z)
    z = (p[:, 0] + 1j * p[:, 1]) / math.sqrt(2)
    k = np.arange(-grid.half_freq, grid.half_freq + 1)
    j = np.arange(-grid.half_time, grid.half_time + 1)
    f = np.arange(5)[:, None, None, None]
    t = np.arange(16)[None, :, None, None]
    phase = np.exp(
        2j * np.pi * (k[:, None] * f / grid.n_freq_padded + j[None, :] * t / grid.n_time_padded)
    )
    for b in range(3):
        amp = scale[b] * w_f[:, None] * w_t[b][None, :] * z[b]
        expected = mean[b] + np.sum(amp * phase, axis=(2, 3))
        np.testing.assert_allclose(vis[b], expected, rtol=0, atol=1e-12)
    assert np.count_nonzero(w_t[0]) < np.count_nonzero(w_t[2]), "short baselines keep fewer modes"


def test_prior_draws_have_the_analytic_covariance():
    n_draws, n_freq, n_time = 8000, 4, 12
    rates = np.full(n_draws, 0.02)  # every baseline the same: one forward gives n_draws draws
    grid, constants = _setup(rates, n_freq, n_time, scale=1.7, mean=0.5)
    vis = np.asarray(jax.jit(sky.forward)(_draw(constants, 2), constants))
    x = (vis - 0.5).reshape(n_draws, -1)
    empirical = np.einsum("na,nb->ab", x, x.conj()) / n_draws
    pseudo = np.einsum("na,nb->ab", x, x) / n_draws

    w_f, w_t = _reference_weights(CONFIG, grid, rates[:1])
    k = np.arange(-grid.half_freq, grid.half_freq + 1)
    j = np.arange(-grid.half_time, grid.half_time + 1)
    df = np.arange(n_freq)[:, None] - np.arange(n_freq)[None, :]
    dt = np.arange(n_time)[:, None] - np.arange(n_time)[None, :]
    c_f = np.sum(w_f**2 * np.exp(2j * np.pi * k * df[..., None] / grid.n_freq_padded), axis=-1)
    c_t = np.sum(w_t[0] ** 2 * np.exp(2j * np.pi * j * dt[..., None] / grid.n_time_padded), -1)
    analytic = 1.7**2 * np.einsum("ab,cd->acbd", c_f, c_t).reshape(n_freq * n_time, -1)

    tolerance = 6 * 1.7**2 / math.sqrt(n_draws)
    np.testing.assert_allclose(np.diag(analytic).real, 1.7**2, rtol=1e-12)
    assert np.max(np.abs(empirical - analytic)) < tolerance
    assert np.max(np.abs(pseudo)) < tolerance, "the sky prior must be circular: E[V V] = 0"


def test_covariance_is_the_continuous_kernel_without_wraparound():
    n_freq, n_time, rate = 6, 60, 0.02
    grid, constants = _setup(np.array([rate]), n_freq, n_time)
    assert grid.n_time_padded < 2 * n_time and grid.n_freq_padded < 2 * n_freq
    lag_t = np.arange(n_time)
    w_t = np.asarray(constants.weight_time[0])
    j = np.arange(-grid.half_time, grid.half_time + 1)
    c_t = np.sum(w_t**2 * np.exp(2j * np.pi * np.outer(lag_t, j) / grid.n_time_padded), axis=1)
    tau = lag_t * INT_TIME
    width = CONFIG.rolloff * rate
    kernel_t = np.sinc(2 * rate * tau) * np.exp(-2 * np.pi**2 * width**2 * tau**2)
    np.testing.assert_allclose(c_t.real, kernel_t, atol=5e-3)
    np.testing.assert_allclose(c_t.imag, 0, atol=1e-12)

    lag_f = np.arange(n_freq)
    w_f = np.asarray(constants.weight_freq[0])
    k = np.arange(-grid.half_freq, grid.half_freq + 1)
    c_f = np.sum(w_f**2 * np.exp(2j * np.pi * np.outer(lag_f, k) / grid.n_freq_padded), axis=1)
    kernel_f = np.exp(-0.5 * (lag_f * CHAN_WIDTH / CONFIG.bandwidth_hz) ** 2)
    np.testing.assert_allclose(c_f.real, kernel_f, atol=5e-3)


def test_round_trip_through_latent_space_recovers_band_limited_sky():
    rates = np.array([0.0, 0.01, 0.03])
    scale = np.array([1.0, 3.0, 0.2])
    _, constants = _setup(rates, n_freq=6, n_time=32, scale=scale, mean=1 - 1j)
    truth = np.asarray(jax.jit(sky.forward)(_draw(constants, 3), constants))
    flags = np.random.default_rng(4).random(truth.shape) < 0.2
    observed = np.where(flags, np.nan, truth)
    noise = 1e-3 * scale
    encode = jax.jit(sky.init_from_data, static_argnames="n_iter")
    params = encode(constants, observed, noise, flags, n_iter=200)
    assert params.z.shape == (3, 2, constants.weight_freq.shape[1], constants.dft_time.shape[1])
    recovered = np.asarray(jax.jit(sky.forward)(params, constants))
    error = np.abs(recovered - truth) / scale[:, None, None]
    assert np.all(np.isfinite(recovered)), "NaN in flagged cells must not reach the fit"
    assert np.max(np.where(flags, 0, error)) < 1e-3

    # each baseline is solved on its own: a block of rows gives the rows of the whole (with a
    # well-conditioned ridge, so that rounding is not amplified along near-null directions)
    rows = slice(1, 3)
    grid = _setup(rates, n_freq=6, n_time=32)[0]
    block_constants = sky.make_constants(CONFIG, grid, rates[rows], scale=scale[rows], mean=1 - 1j)
    whole = encode(constants, observed, 100 * noise, flags, n_iter=200)
    block = encode(block_constants, observed[rows], 100 * noise[rows], flags[rows], n_iter=200)
    np.testing.assert_allclose(np.asarray(block.z), np.asarray(whole.z[rows]), rtol=0, atol=1e-10)


def test_forward_of_a_block_of_baselines_is_the_block_of_the_forward():
    rates = np.array([0.0, 0.004, 0.02, 0.03, 0.01])
    scale = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
    mean = np.arange(5) * (1 + 0.5j)
    grid, constants = _setup(rates, n_freq=4, n_time=20, scale=scale, mean=mean)
    params = _draw(constants, 5)
    whole = jax.jit(sky.forward)(params, constants)
    rows = slice(1, 4)
    block_constants = sky.make_constants(
        CONFIG, grid, rates[rows], scale=scale[rows], mean=mean[rows]
    )
    block = jax.jit(sky.forward)(sky.SkyParams(params.z[rows]), block_constants)
    np.testing.assert_array_equal(np.asarray(block), np.asarray(whole[rows]))


def test_single_precision_follows_the_inputs():
    rates = np.array([0.0, 0.02])
    _, c64 = _setup(rates, n_freq=4, n_time=16, scale=2.0, mean=1j)
    params = _draw(c64, 6)
    vis64 = np.asarray(jax.jit(sky.forward)(params, c64))
    with jax.enable_x64(False):
        _, c32 = _setup(rates, n_freq=4, n_time=16, scale=2.0, mean=1j, dtype=np.float32)
        vis32 = jax.jit(sky.forward)(sky.SkyParams(np.asarray(params.z, np.float32)), c32)
        assert jax.eval_shape(sky.init, c32).z.dtype == jnp.float32
    assert vis32.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(vis32), vis64, atol=2e-5)


def test_init_draws_standard_normal_whitened_parameters_or_zeros():
    _, constants = _setup(np.full(50, 0.02), n_time=8)
    params = sky.init(constants, jax.random.key(7))
    z = np.asarray(params.z)
    assert z.shape == (50, 2, constants.weight_freq.shape[1], constants.weight_time.shape[1])
    assert abs(z.mean()) < 0.1 and abs(z.std() - 1) < 0.1
    np.testing.assert_allclose(float(jax.jit(sky.prior)(params)), 0.5 * np.sum(z**2), rtol=1e-12)
    zeros = sky.init(constants)
    assert float(jax.jit(sky.prior)(zeros)) == 0.0
    np.testing.assert_array_equal(np.asarray(jax.jit(sky.forward)(zeros, constants)), 0)


def test_mean_from_data_skips_flagged_and_non_finite_cells():
    rng = np.random.default_rng(8)
    vis = rng.normal(size=(3, 4, 5)) + 1j * rng.normal(size=(3, 4, 5))
    flags = rng.random((3, 4, 5)) < 0.3
    flags[2] = True
    vis[flags] = np.nan
    mean = np.asarray(jax.jit(sky.mean_from_data)(vis, flags))
    for b in range(2):
        np.testing.assert_allclose(mean[b], np.mean(vis[b][~flags[b]]), rtol=1e-12)
    assert mean[2] == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("cutoff", 1.5, "cutoff"), ("bandwidth_hz", 0.0, "bandwidth_hz"), ("rolloff", -1, "rolloff")],
)
def test_invalid_config_names_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        sky.SkyConfig(**{field: value})


def test_negative_fringe_rate_is_refused_with_its_index():
    with pytest.raises(ValueError, match=r"fringe_rate_hz\[1\]"):
        sky.make_grid(CONFIG, np.array([0.1, -0.2]), 4, 8, CHAN_WIDTH, INT_TIME)


def test_delay_knee_spectrum_follows_the_documented_edge_per_baseline():
    # 16 channels of 1 MHz: the floor is 1 / (4 x 16 MHz) = 15.6 ns; the first baseline sits on
    # it, the others' delays (up to 0.2 us, 3.2 cycles across the band) set their own knees
    rates = np.array([0.0, 0.004, 0.02, 0.01])
    delays = np.array([0.0, 0.05e-6, 0.2e-6, 0.1e-6])
    n_freq, n_time = 16, 12
    grid = sky.make_grid(DELAY_CONFIG, rates, n_freq, n_time, CHAN_WIDTH, INT_TIME, delay_s=delays)
    constants = sky.make_constants(DELAY_CONFIG, grid, rates, delay_s=delays)
    # the box follows the largest knee: the documented edge at 0.2 us above the cutoff
    eta = np.arange(grid.n_freq_padded // 2 + 1) / (grid.n_freq_padded * CHAN_WIDTH)
    power = _time_power(eta, 0.2e-6, DELAY_CONFIG.rolloff)
    half = int(np.max(np.flatnonzero(power >= DELAY_CONFIG.cutoff)))
    assert grid.half_freq == min(half, (grid.n_freq_padded - 1) // 2)
    expected = _edge_reference(
        DELAY_CONFIG, delays, n_freq, CHAN_WIDTH, grid.n_freq_padded, grid.half_freq
    )
    np.testing.assert_allclose(np.asarray(constants.weight_freq), expected, rtol=0, atol=1e-12)
    kept = np.count_nonzero(expected, axis=1)
    assert kept[0] == 1, "a baseline at the floor keeps the constant only"
    assert kept[0] < kept[1] < kept[3] < kept[2], "longer delays keep more modes"

    vis = np.asarray(jax.jit(sky.forward)(_draw(constants, 9), constants))
    np.testing.assert_allclose(vis[0], np.broadcast_to(vis[0, :1], vis[0].shape), atol=1e-12)


def test_delay_knee_needs_the_delays_and_refuses_bad_ones():
    rates = np.array([0.01, 0.02])
    with pytest.raises(ValueError, match="delay_s"):
        sky.make_grid(DELAY_CONFIG, rates, 4, 8, CHAN_WIDTH, INT_TIME)
    with pytest.raises(ValueError, match=r"delay_s\[0\]"):
        sky.make_grid(DELAY_CONFIG, rates, 4, 8, CHAN_WIDTH, INT_TIME, delay_s=[np.nan, 1e-7])
    with pytest.raises(ValueError, match="same baselines"):
        sky.make_grid(DELAY_CONFIG, rates, 4, 8, CHAN_WIDTH, INT_TIME, delay_s=[1e-7])
