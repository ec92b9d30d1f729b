"""Sky Fourier Gaussian process against direct numpy constructions of the documented prior."""

import dataclasses
import itertools
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
#: One box of modes for every baseline (groups=1): the tests of one box's mathematics.
CONFIG = sky.SkyConfig(bandwidth_hz=1.5e6, rolloff=0.25, cutoff=1e-3, wrap_tolerance=1e-3, groups=1)
#: Each baseline's frequency knee from its largest sky delay (the default), one box.
DELAY_CONFIG = sky.SkyConfig(rolloff=0.25, cutoff=1e-3, wrap_tolerance=1e-3, groups=1)
#: The same with the default number of groups.
GROUPED_CONFIG = dataclasses.replace(DELAY_CONFIG, groups=sky.SkyConfig().groups)
#: Twelve baselines with fringe rates from 0 to 0.045 Hz (the time axis's Nyquist rate is
#: 1 / (2 INT_TIME) = 0.05 Hz) and delays from 0 to 0.45 us (Nyquist 1 / (2 CHAN_WIDTH) = 0.5 us),
#: in an unrelated order: on 8 channels x 16 times the default config forms four groups.
SPREAD_RATES = np.linspace(0.0, 0.045, 12)
SPREAD_DELAYS = np.linspace(0.0, 0.45e-6, 12)[[3, 0, 7, 11, 1, 9, 5, 2, 10, 6, 4, 8]]
SPREAD_SCALE = np.linspace(0.5, 2.0, 12)
SPREAD_MEAN = np.arange(12) * (0.5 - 0.25j)


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
    """Whitened parameters drawn with numpy, one array per group (jax.random is tested once, in
    test_init_*)."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(sky.init, constants).z
    return sky.SkyParams(tuple(jnp.asarray(rng.standard_normal(s.shape), dtype) for s in shapes))


def _one_group(grid, constants, n_bl):
    """The single group of a one-box model, checked to hold the whole box and rows 0..n_bl-1."""
    assert grid.boxes == ((grid.half_freq, grid.half_time),)
    (group,) = constants.groups
    np.testing.assert_array_equal(np.asarray(group.rows), np.arange(n_bl))
    return group


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
    _one_group(grid, constants, 3)
    params = _draw(constants, 1)
    vis = np.asarray(jax.jit(sky.forward)(params, constants))

    w_f, w_t = _reference_weights(CONFIG, grid, rates)
    p = np.asarray(params.z[0])
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
    _one_group(grid, constants, n_draws)
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
    group = _one_group(grid, constants, 1)
    lag_t = np.arange(n_time)
    w_t = np.asarray(group.weight_time[0])
    j = np.arange(-grid.half_time, grid.half_time + 1)
    c_t = np.sum(w_t**2 * np.exp(2j * np.pi * np.outer(lag_t, j) / grid.n_time_padded), axis=1)
    tau = lag_t * INT_TIME
    width = CONFIG.rolloff * rate
    kernel_t = np.sinc(2 * rate * tau) * np.exp(-2 * np.pi**2 * width**2 * tau**2)
    np.testing.assert_allclose(c_t.real, kernel_t, atol=5e-3)
    np.testing.assert_allclose(c_t.imag, 0, atol=1e-12)

    lag_f = np.arange(n_freq)
    w_f = np.asarray(group.weight_freq[0])
    k = np.arange(-grid.half_freq, grid.half_freq + 1)
    c_f = np.sum(w_f**2 * np.exp(2j * np.pi * np.outer(lag_f, k) / grid.n_freq_padded), axis=1)
    kernel_f = np.exp(-0.5 * (lag_f * CHAN_WIDTH / CONFIG.bandwidth_hz) ** 2)
    np.testing.assert_allclose(c_f.real, kernel_f, atol=5e-3)


def test_round_trip_through_latent_space_recovers_band_limited_sky():
    rates = np.array([0.0, 0.01, 0.03])
    scale = np.array([1.0, 3.0, 0.2])
    grid, constants = _setup(rates, n_freq=6, n_time=32, scale=scale, mean=1 - 1j)
    group = _one_group(grid, constants, 3)
    truth = np.asarray(jax.jit(sky.forward)(_draw(constants, 3), constants))
    flags = np.random.default_rng(4).random(truth.shape) < 0.2
    observed = np.where(flags, np.nan, truth)
    noise = 1e-3 * scale
    encode = jax.jit(sky.init_from_data, static_argnames="n_iter")
    params = encode(constants, observed, noise, flags, n_iter=200)
    assert len(params.z) == 1
    assert params.z[0].shape == (3, 2, group.weight_freq.shape[1], group.dft_time.shape[1])
    recovered = np.asarray(jax.jit(sky.forward)(params, constants))
    error = np.abs(recovered - truth) / scale[:, None, None]
    assert np.all(np.isfinite(recovered)), "NaN in flagged cells must not reach the fit"
    assert np.max(np.where(flags, 0, error)) < 1e-3

    # each baseline is solved on its own: a block of rows gives the rows of the whole (with a
    # well-conditioned ridge, so that rounding is not amplified along near-null directions)
    rows = slice(1, 3)
    block_constants = sky.make_constants(CONFIG, grid, rates[rows], scale=scale[rows], mean=1 - 1j)
    _one_group(grid, block_constants, 2)
    whole = encode(constants, observed, 100 * noise, flags, n_iter=200)
    block = encode(block_constants, observed[rows], 100 * noise[rows], flags[rows], n_iter=200)
    np.testing.assert_allclose(
        np.asarray(block.z[0]), np.asarray(whole.z[0][rows]), rtol=0, atol=1e-10
    )


def test_forward_of_a_block_of_baselines_is_the_block_of_the_forward():
    rates = np.array([0.0, 0.004, 0.02, 0.03, 0.01])
    scale = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
    mean = np.arange(5) * (1 + 0.5j)
    grid, constants = _setup(rates, n_freq=4, n_time=20, scale=scale, mean=mean)
    _one_group(grid, constants, 5)
    params = _draw(constants, 5)
    whole = jax.jit(sky.forward)(params, constants)
    rows = slice(1, 4)
    block_constants = sky.make_constants(
        CONFIG, grid, rates[rows], scale=scale[rows], mean=mean[rows]
    )
    _one_group(grid, block_constants, 3)
    block = jax.jit(sky.forward)(sky.SkyParams((params.z[0][rows],)), block_constants)
    np.testing.assert_array_equal(np.asarray(block), np.asarray(whole[rows]))


def test_single_precision_follows_the_inputs():
    rates = np.array([0.0, 0.02])
    _, c64 = _setup(rates, n_freq=4, n_time=16, scale=2.0, mean=1j)
    params = _draw(c64, 6)
    vis64 = np.asarray(jax.jit(sky.forward)(params, c64))
    with jax.enable_x64(False):
        _, c32 = _setup(rates, n_freq=4, n_time=16, scale=2.0, mean=1j, dtype=np.float32)
        params32 = sky.SkyParams(tuple(np.asarray(z, np.float32) for z in params.z))
        vis32 = jax.jit(sky.forward)(params32, c32)
        assert [z.dtype for z in jax.eval_shape(sky.init, c32).z] == [jnp.float32]
    assert vis32.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(vis32), vis64, atol=2e-5)


def test_init_draws_standard_normal_whitened_parameters_or_zeros():
    grid, constants = _setup(np.full(50, 0.02), n_time=8)
    group = _one_group(grid, constants, 50)
    params = sky.init(constants, jax.random.key(7))
    assert len(params.z) == 1
    z = np.asarray(params.z[0])
    assert z.shape == (50, 2, group.weight_freq.shape[1], group.weight_time.shape[1])
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
    [
        ("cutoff", 1.5, "cutoff"),
        ("bandwidth_hz", 0.0, "bandwidth_hz"),
        ("rolloff", -1, "rolloff"),
        ("groups", 0, "groups"),
    ],
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
    group = _one_group(grid, constants, 4)
    # the box follows the largest knee: the documented edge at 0.2 us above the cutoff
    eta = np.arange(grid.n_freq_padded // 2 + 1) / (grid.n_freq_padded * CHAN_WIDTH)
    power = _time_power(eta, 0.2e-6, DELAY_CONFIG.rolloff)
    half = int(np.max(np.flatnonzero(power >= DELAY_CONFIG.cutoff)))
    assert grid.half_freq == min(half, (grid.n_freq_padded - 1) // 2)
    expected = _edge_reference(
        DELAY_CONFIG, delays, n_freq, CHAN_WIDTH, grid.n_freq_padded, grid.half_freq
    )
    np.testing.assert_allclose(np.asarray(group.weight_freq), expected, rtol=0, atol=1e-12)
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


# Groups of baselines, each with its own box of modes (module docstring, "Mode boxes").


def _spread_setup(config, n_freq=8, n_time=16):
    """Grid and constants of the twelve SPREAD_* baselines."""
    grid = sky.make_grid(
        config, SPREAD_RATES, n_freq, n_time, CHAN_WIDTH, INT_TIME, delay_s=SPREAD_DELAYS
    )
    return grid, _spread_block(grid, np.arange(SPREAD_RATES.size), config)


def _spread_block(grid, index, config=None):
    """Constants of the SPREAD_* baselines ``index`` (in that order) on ``grid``."""
    return sky.make_constants(
        GROUPED_CONFIG if config is None else config,
        grid,
        SPREAD_RATES[index],
        delay_s=SPREAD_DELAYS[index],
        scale=SPREAD_SCALE[index],
        mean=SPREAD_MEAN[index],
    )


def _spread_reference_weights(grid, half_freq, half_time, rows=slice(None)):
    """The documented edge amplitudes of SPREAD_* baselines in a box (half_freq, half_time),
    (n, 2 half_freq + 1) and (n, 2 half_time + 1)."""
    w_f = _edge_reference(
        GROUPED_CONFIG, SPREAD_DELAYS[rows], grid.n_freq, CHAN_WIDTH, grid.n_freq_padded, half_freq
    )
    w_t = _edge_reference(
        GROUPED_CONFIG, SPREAD_RATES[rows], grid.n_time, INT_TIME, grid.n_time_padded, half_time
    )
    return w_f, w_t


def _centred(half, sub):
    """Index of the modes -sub..sub within the modes -half..half."""
    return slice(half - sub, half + sub + 1)


def _members(constants):
    """{baseline row: (group, member)} of a constants' groups (padding slots left out)."""
    n_rows = constants.scale.shape[0]
    out = {}
    for g, group in enumerate(constants.groups):
        for m, row in enumerate(np.asarray(group.rows).tolist()):
            if row < n_rows:
                assert row not in out, f"row {row} is in two groups"
                out[row] = (g, m)
    assert sorted(out) == list(range(n_rows)), "every row belongs to one group"
    return out


def test_grouping_changes_no_visibility():
    grid1, constants1 = _spread_setup(DELAY_CONFIG)
    grid, constants = _spread_setup(GROUPED_CONFIG)
    assert len(grid.boxes) > 1, "these baselines must form several groups"
    assert grid[:8] == grid1[:8], "the lattice and the largest box do not depend on the groups"
    assert grid.boxes[-1] == (grid.half_freq, grid.half_time)
    group1 = _one_group(grid1, constants1, 12)
    half_f, half_t = grid.half_freq, grid.half_time
    # the one-box weights are the documented spectrum (so the zeros below are the reference's)
    w_f, w_t = _spread_reference_weights(grid, half_f, half_t)
    np.testing.assert_allclose(np.asarray(group1.weight_freq), w_f, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(group1.weight_time), w_t, rtol=0, atol=1e-12)

    p1 = np.random.default_rng(12).standard_normal((12, 2, 2 * half_f + 1, 2 * half_t + 1))
    z = []
    for (box_f, box_t), group in zip(grid.boxes, constants.groups, strict=True):
        rows = np.asarray(group.rows)
        kf, kt = _centred(half_f, box_f), _centred(half_t, box_t)
        z.append(jnp.asarray(p1[rows][:, :, kf, kt]))
        # every mode the group's box drops had zero weight in the one box
        dropped = np.ones((2 * half_f + 1, 2 * half_t + 1), bool)
        dropped[kf, kt] = False
        power = w_f[rows][:, :, None] * w_t[rows][:, None, :]
        assert np.all(power[:, dropped] == 0)
        assert np.all(power[:, ~dropped].reshape(rows.size, -1).max(axis=1) > 0)
    assert sorted(_members(constants)) == list(range(12))
    forward = jax.jit(sky.forward)
    vis1 = np.asarray(forward(sky.SkyParams((jnp.asarray(p1),)), constants1))
    vis = np.asarray(forward(sky.SkyParams(tuple(z)), constants))
    # measured max |difference| 9.9e-16, on visibilities up to 9.9 in magnitude
    np.testing.assert_allclose(vis, vis1, rtol=0, atol=1e-13)


def test_groups_take_the_first_box_holding_each_baseline_and_a_block_labels_as_the_whole():
    grid, constants = _spread_setup(GROUPED_CONFIG)
    members = _members(constants)
    # each baseline's own box from the documented spectrum: its outermost mode above the cutoff
    w_f, w_t = _spread_reference_weights(grid, grid.half_freq, grid.half_time)
    own_f = np.max(np.abs(np.where(w_f > 0, np.arange(-grid.half_freq, grid.half_freq + 1), 0)), 1)
    own_t = np.max(np.abs(np.where(w_t > 0, np.arange(-grid.half_time, grid.half_time + 1), 0)), 1)
    for b in range(12):
        first = next(
            g for g, box in enumerate(grid.boxes) if own_f[b] <= box[0] and own_t[b] <= box[1]
        )
        assert members[b][0] == first, f"baseline {b}"
    # the group's weights are the documented spectrum on the group's box
    for (box_f, box_t), group in zip(grid.boxes, constants.groups, strict=True):
        rows = np.asarray(group.rows)
        ref_f, ref_t = _spread_reference_weights(grid, box_f, box_t, rows)
        np.testing.assert_allclose(np.asarray(group.weight_freq), ref_f, rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(group.weight_time), ref_t, rtol=0, atol=1e-12)

    # a block of rows (every third baseline, shuffled): each in the same group, same weights
    rng = np.random.default_rng(13)
    for offset in range(3):
        index = rng.permutation(np.arange(offset, 12, 3))
        block = _spread_block(grid, index)
        assert len(block.groups) == len(grid.boxes)
        for row, (g, m) in _members(block).items():
            whole_g, whole_m = members[int(index[row])]
            assert g == whole_g, f"baseline {index[row]} changed group in the block"
            for field in ("weight_freq", "weight_time"):
                np.testing.assert_array_equal(
                    np.asarray(getattr(block.groups[g], field)[m]),
                    np.asarray(getattr(constants.groups[g], field)[whole_m]),
                )


def test_forward_of_a_block_with_groups_is_the_block_of_the_forward():
    grid, constants = _spread_setup(GROUPED_CONFIG)
    params = _draw(constants, 14)
    whole = np.asarray(jax.jit(sky.forward)(params, constants))
    members = _members(constants)
    index = np.random.default_rng(15).permutation(12)[:5]
    block_constants = _spread_block(grid, index)
    # each block member's modes are its modes in the whole
    block_z = [
        np.asarray(params.z[g])[[members[int(index[row])][1] for row in np.asarray(group.rows)]]
        for g, group in enumerate(block_constants.groups)
    ]
    assert block_constants.groups[1].rows.shape == (0,), "this block leaves a group empty"
    block = jax.jit(sky.forward)(sky.SkyParams(tuple(map(jnp.asarray, block_z))), block_constants)
    # measured 0; a group's number of members can move the last bit (4.4e-16 seen with a
    # padding slot, test_forward_drops_a_padding_slot)
    np.testing.assert_allclose(np.asarray(block), whole[index], rtol=0, atol=5e-14)


def _spread_observed():
    """The twelve SPREAD_* baselines' grouped constants and a band-limited sky drawn from them,
    20% of its cells flagged (NaN)."""
    grid, constants = _spread_setup(GROUPED_CONFIG)
    truth = np.asarray(jax.jit(sky.forward)(_draw(constants, 16), constants))
    flags = np.random.default_rng(17).random(truth.shape) < 0.2
    return grid, constants, truth, flags, np.where(flags, np.nan, truth)


def test_round_trip_with_groups_recovers_band_limited_sky():
    grid, constants, truth, flags, observed = _spread_observed()
    assert len(grid.boxes) > 1
    noise = 1e-3 * SPREAD_SCALE
    encode = jax.jit(sky.init_from_data, static_argnames="n_iter")
    # 400 iterations: the largest group holds 7 x 465 modes against 8 x 16 cells a baseline
    # (max error 8.3e-4 after 200, 6.7e-4 after 400 and 800: the prior's pull at this noise)
    params = encode(constants, observed, noise, flags, n_iter=400)
    assert [z.shape for z in params.z] == [
        (g.rows.shape[0], 2, g.weight_freq.shape[1], g.weight_time.shape[1])
        for g in constants.groups
    ]
    recovered = np.asarray(jax.jit(sky.forward)(params, constants))
    error = np.abs(recovered - truth) / SPREAD_SCALE[:, None, None]
    assert np.all(np.isfinite(recovered)), "NaN in flagged cells must not reach the fit"
    # measured max error 6.7e-4 (the one-box test's 7.7e-4)
    assert np.max(np.where(flags, 0, error)) < 1e-3


def test_init_from_data_of_a_block_with_groups_gives_the_rows_of_the_whole():
    # each baseline is solved on its own: a block of rows (shuffled) gives each baseline's
    # modes in the whole (well-conditioned ridge, as in the one-box round trip)
    grid, constants, _, flags, observed = _spread_observed()
    noise = 0.1 * SPREAD_SCALE
    index = np.random.default_rng(18).permutation(12)[:7]
    block_constants = _spread_block(grid, index)
    encode = jax.jit(sky.init_from_data, static_argnames="n_iter")
    whole = encode(constants, observed, noise, flags, n_iter=400)
    block = encode(block_constants, observed[index], noise[index], flags[index], n_iter=400)
    members = _members(constants)
    for row, (g, m) in _members(block_constants).items():
        whole_g, whole_m = members[int(index[row])]
        assert g == whole_g
        # measured 0 (the one-box test's block: 3.1e-13)
        np.testing.assert_allclose(
            np.asarray(block.z[g][m]), np.asarray(whole.z[g][whole_m]), rtol=0, atol=1e-10
        )


def _with_padding_slots(constants, params, groups, weights=0.0):
    """Constants and parameters with a padding slot (row n_rows) appended to each of
    ``groups``: its weights ``weights`` (zero for a padding slot as documented), its parameters
    random."""
    n_rows = constants.scale.shape[0]
    rng = np.random.default_rng(19)

    def append(x, value):
        return jnp.concatenate([x, jnp.full((1, *x.shape[1:]), value, x.dtype)])

    new_groups, z = list(constants.groups), list(params.z)
    for g in groups:
        group = constants.groups[g]
        new_groups[g] = group._replace(
            rows=append(group.rows, n_rows),
            weight_freq=append(group.weight_freq, weights),
            weight_time=append(group.weight_time, weights),
        )
        slot = rng.standard_normal((1, *z[g].shape[1:]))
        z[g] = jnp.concatenate([z[g], jnp.asarray(slot, z[g].dtype)])
    return constants._replace(groups=tuple(new_groups)), sky.SkyParams(tuple(z))


def test_forward_drops_a_padding_slot():
    grid, constants = _spread_setup(GROUPED_CONFIG)
    params = _draw(constants, 20)
    forward = jax.jit(sky.forward)
    expected = np.asarray(forward(params, constants))
    every = range(len(grid.boxes))
    # measured max |difference| 4.4e-16 (an extra member can move the einsum's last bit), on
    # visibilities up to 10.9 in magnitude
    padded_constants, padded_params = _with_padding_slots(constants, params, every)
    vis = np.asarray(forward(padded_params, padded_constants))
    np.testing.assert_allclose(vis, expected, rtol=0, atol=5e-14)
    # a slot's visibilities go to the spare row, which is dropped, whatever its weights
    padded_constants, padded_params = _with_padding_slots(constants, params, every, weights=1.0)
    vis = np.asarray(forward(padded_params, padded_constants))
    np.testing.assert_allclose(vis, expected, rtol=0, atol=5e-14)


def test_init_from_data_leaves_a_padding_slot_at_zero():
    grid, constants, _, flags, observed = _spread_observed()
    # the block of group 0's members (the other groups empty there), to keep the compile short
    index = np.asarray(constants.groups[0].rows)
    block = _spread_block(grid, index)
    assert [g.rows.shape[0] for g in block.groups] == [index.size] + [0] * (len(grid.boxes) - 1)
    padded, _ = _with_padding_slots(block, _draw(block, 22), [0])
    encode = jax.jit(sky.init_from_data, static_argnames="n_iter")
    noise = 1e-2 * SPREAD_SCALE[index]
    fitted = encode(block, observed[index], noise, flags[index], n_iter=50)
    with_slot = encode(padded, observed[index], noise, flags[index], n_iter=50)
    assert with_slot.z[0].shape[0] == index.size + 1
    np.testing.assert_array_equal(np.asarray(with_slot.z[0][-1]), 0)
    assert np.max(np.abs(np.asarray(fitted.z[0]))) > 0.1
    # measured 0: each member's fit is its own
    np.testing.assert_allclose(
        np.asarray(with_slot.z[0][:-1]), np.asarray(fitted.z[0]), rtol=0, atol=1e-13
    )


def _brute_force_minima(counts, max_runs):
    """{k: (least total modes, the sorted boxes of every split reaching it)} over all splits of
    the distinct own boxes, ordered by (modes, box), into k <= max_runs contiguous runs, each
    held in the elementwise maximum of its boxes; counts: {(half_freq, half_time): baselines}."""

    def modes(box):
        return (2 * box[0] + 1) * (2 * box[1] + 1)

    items = sorted(counts.items(), key=lambda item: (modes(item[0]), item[0]))
    out = {}
    for cuts in itertools.product((False, True), repeat=len(items) - 1):
        ends = [i + 1 for i, cut in enumerate(cuts) if cut] + [len(items)]
        if len(ends) > max_runs:
            continue
        total, boxes, start = 0, [], 0
        for end in ends:
            run = items[start:end]
            box = (max(b[0] for b, _ in run), max(b[1] for b, _ in run))
            total += sum(n for _, n in run) * modes(box)
            boxes.append(box)
            start = end
        k, boxes = len(ends), tuple(sorted(boxes))
        if k not in out or total < out[k][0]:
            out[k] = (total, {boxes})
        elif total == out[k][0]:
            out[k][1].add(boxes)
    return out


def test_group_boxes_reach_the_brute_force_minimum_under_the_saving_rule():
    rng = np.random.default_rng(21)
    saving_bites = several = 0
    for _ in range(60):
        n_distinct = int(rng.integers(6, 10))
        grid_pairs = list(itertools.product(range(7), range(11)))
        pairs = [grid_pairs[i] for i in rng.choice(len(grid_pairs), n_distinct, replace=False)]
        sizes = rng.integers(1, 40, n_distinct).tolist()
        counts = dict(zip(pairs, sizes, strict=True))
        max_groups = int(rng.integers(1, 6))
        own = rng.permutation(np.repeat(np.array(pairs), list(counts.values()), axis=0))
        boxes = sky.group_boxes(own[:, 0], own[:, 1], max_groups)

        minima = _brute_force_minima(counts, max_groups)
        chosen = 1
        for k in range(2, max(minima) + 1):
            if minima[k][0] <= (1 - sky.GROUP_SAVING) * minima[chosen][0]:
                chosen = k
        assert len(boxes) == chosen, (counts, max_groups, boxes)
        assert tuple(sorted(boxes)) in minima[chosen][1], (counts, max_groups, boxes)
        box_modes = [(2 * f + 1) * (2 * t + 1) for f, t in boxes]
        assert box_modes == sorted(box_modes), "fewest modes first"
        # every baseline is held by one box, the first that holds it; that costs at most the runs
        labels = sky.group_labels(boxes, own[:, 0], own[:, 1])
        total = 0
        for (f, t), label in zip(own.tolist(), labels.tolist(), strict=True):
            held = [g for g, box in enumerate(boxes) if f <= box[0] and t <= box[1]]
            assert held and label == held[0]
            total += box_modes[label]
        assert total <= minima[chosen][0]
        saving_bites += chosen < min(max_groups, n_distinct)
        several += chosen > 1
    assert saving_bites > 0 and several > 0, "the cases must exercise both sides of the rule"
