"""The fringe-stopped first estimate of the RFI signal (init "fringe")."""

import numpy as np

from tabascal.fitting import run_config
from tabascal.model import joint, rfi_estimate
from tabascal.store import read_observation

N_ANT, N_FREQ, N_TIME = 7, 2, 5
FREQS_HZ = np.array([150e6, 150.1e6])


def _pairs():
    a1, a2 = np.triu_indices(N_ANT, 1)
    return a1, a2


def _scene(n_src, seed):
    """Smooth random amplitudes and random centre phases; no delay derivatives (no winding)."""
    rng = np.random.default_rng(seed)
    shape = (N_ANT, n_src, N_FREQ, N_TIME)
    amp = (1 + 0.3 * rng.normal(size=shape)) * np.exp(0.5j * rng.normal(size=shape))
    amp *= 10.0 ** np.arange(n_src)[None, :, None, None]  # each satellite 10x the previous
    phase = rng.uniform(-np.pi, np.pi, shape)
    delay = np.zeros((N_ANT, n_src, N_TIME, 2))
    return amp, phase, delay


def _vis(amp, phase, a1, a2):
    signal = amp * np.exp(1j * phase)
    return np.einsum("bsft,bsft->bft", signal[a1], signal[a2].conj())


def _product_error(estimate, amp, a1, a2, r):
    got = estimate[a1, r] * estimate[a2, r].conj()
    want = amp[a1, r] * amp[a2, r].conj()
    return np.max(np.abs(got - want)) / np.max(np.abs(want))


def test_one_satellite_is_recovered_to_rounding_up_to_its_common_phase():
    a1, a2 = _pairs()
    amp, phase, delay = _scene(1, 0)
    vis = _vis(amp, phase, a1, a2)
    flags = np.zeros(vis.shape, bool)
    flags[3, 1, 2] = True  # a flagged cell is left out, not fitted as zero
    vis[3, 1, 2] = 1e6
    est = rfi_estimate.estimate_rfi_signal(
        vis, flags, phase, delay, a1, a2, FREQS_HZ, 2.0, 100e3, n_iter=60
    )
    error = _product_error(est, amp, a1, a2, 0)
    assert error < 1e-8, error  # measured 4e-15
    assert np.all(np.abs(np.angle(est[0, 0])) < 1e-12)  # the reference antenna's is real


def test_the_brighter_of_two_satellites_is_recovered_to_the_fainter_ones_share():
    a1, a2 = _pairs()
    amp, phase, delay = _scene(2, 1)  # satellite 1 ten times satellite 0 in amplitude
    vis = _vis(amp, phase, a1, a2)
    est = rfi_estimate.estimate_rfi_signal(
        vis, np.zeros(vis.shape, bool), phase, delay, a1, a2, FREQS_HZ, 2.0, 100e3, n_iter=60
    )
    bright = _product_error(est, amp, a1, a2, 1)
    print(f"product error of the bright satellite: {bright:.1e}")
    # measured 6.5e-3: the faint satellite's random-phase share (1/100 of the power) left in
    # the bright one's rank-one fit; taken the other way round it would be of order 1
    assert bright < 3e-2


def test_fringe_init_starts_nearer_the_data_than_the_data_init(small_store):
    obs = read_observation(small_store)
    chi2 = {}
    # the per-antenna signal: the shared one reduces the estimate to one signal per satellite
    # through the beam model, which starts further from the data (measured 472 -> 71)
    per_antenna = {"rfi": {"signal": "per_antenna", "time_stencil": 3}}
    for init in ("data", "fringe"):
        config = run_config.model_config(run_config.load(per_antenna))
        model = joint.build(obs, config, init=init)
        chi2[init] = float(
            joint.loss(model.params, (model.constants, model.data), model.spec)[1]["chi2"]
        )
    print(f"initial reduced chi-squared: {chi2}")
    # measured 489 -> 1.50 (5.5 before each estimate was weighed, 7.5 before the window)
    assert chi2["fringe"] < 0.01 * chi2["data"]


def test_smearing_is_the_cell_average_of_the_stopped_fringe():
    """Against a brute-force mean over a 400 x 400 grid of the cell (time and channel) of the
    fringe stopped at the cell centre, exp(2 pi i ((f + dnu) (d0 + d1 tau) - f d0))."""
    int_time, chan_width = 2.0, 100e3
    freqs_hz = np.array([1.5e9])
    # baseline delays d0 (us) and rates d1 (us/s): windings of 0 to 0.9 cycles per cell
    d0 = np.array([0.0, 2.0, 5.0, -3.0, 9.0])
    d1 = np.array([0.0, 1e-4, -2e-4, 3e-4, 1e-4])
    delay = np.zeros((d0.size + 1, 1, 1, 2))
    delay[1:, 0, 0, 0], delay[1:, 0, 0, 1] = d0, d1  # antenna 0 at zero: a1 = 1.., a2 = 0
    a1, a2 = np.arange(1, d0.size + 1), np.zeros(d0.size, int)
    got = rfi_estimate.smearing(delay, a1, a2, freqs_hz, int_time, chan_width, 0)[:, 0, 0]
    n = 400
    tau = ((np.arange(n) + 0.5) / n - 0.5) * int_time
    dnu = ((np.arange(n) + 0.5) / n - 0.5) * chan_width * 1e-6
    f = freqs_hz[0] * 1e-6
    cycles = (f + dnu[:, None, None]) * (d0 + d1 * tau[None, :, None]) - f * d0
    want = np.mean(np.exp(2j * np.pi * cycles), axis=(0, 1))
    print(f"smearing {got}, brute force {want}")
    # measured 1.1e-5 at most: the cross term dnu d1 tau the first-order factor leaves out,
    # and the grid's own error
    assert np.max(np.abs(got - want)) < 1e-3


def test_the_window_averages_turning_terms_out_of_a_steady_satellite():
    """A satellite steady in time beside a brighter term whose phase on each baseline turns by
    a third of a cycle or more per integration (as the sky's and other satellites' do once
    one satellite's fringe is stopped): per cell the rank-one fit takes up part of the turning
    term; averaged over 15 integrations it mostly cancels."""
    n_time = 40
    a1, a2 = _pairs()
    rng = np.random.default_rng(3)
    amp = (1 + 0.3 * rng.normal(size=(N_ANT, 1, N_FREQ, 1))) * np.exp(
        0.5j * rng.normal(size=(N_ANT, 1, N_FREQ, 1))
    )
    amp = np.broadcast_to(amp, (N_ANT, 1, N_FREQ, n_time))
    phase = np.zeros(amp.shape)
    delay = np.zeros((N_ANT, 1, n_time, 2))
    rate = rng.uniform(0.33, 0.5, a1.size) * rng.choice([-1, 1], a1.size)  # cycles / cell
    turning = 3.0 * np.exp(2j * np.pi * (rate[:, None, None] * np.arange(n_time) + rng.uniform(
        size=(a1.size, 1, 1))))  # fmt: skip
    vis = _vis(amp, phase, a1, a2) + turning
    flags = np.zeros(vis.shape, bool)
    errors = {
        window: _product_error(
            rfi_estimate.estimate_rfi_signal(
                vis, flags, phase, delay, a1, a2, FREQS_HZ, 2.0, 100e3, window_cells=[window]
            ),
            amp,
            a1,
            a2,
            0,
        )
        for window in (1, 15)
    }
    print(f"largest product error over the largest product, by window: {errors}")
    # measured 2.6 without the window, 0.21 with it
    assert errors[15] < 0.4 < 1.0 < errors[1]


def _lsq_weights(vis, flags, per_source, span):
    """Reference: scipy's bounded least squares on the stacked real and imaginary parts of
    the unflagged cells of ``span``, (n_src,)."""
    from scipy.optimize import lsq_linear

    keep = ~flags[..., span]
    columns = [m[..., span][keep] for m in per_source]
    matrix = np.concatenate([np.stack(columns, 1).real, np.stack(columns, 1).imag])
    target = np.concatenate([vis[..., span][keep].real, vis[..., span][keep].imag])
    return lsq_linear(matrix, target, bounds=(0, np.inf), tol=1e-12).x


def test_source_weights_are_the_bounded_least_squares_of_the_data_on_each_estimate():
    rng = np.random.default_rng(3)
    n_src, n_bl, n_time = 3, 21, 9
    shape = (n_src, n_bl, N_FREQ, n_time)
    per_source = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    per_source[1] *= 100.0  # a bright satellite beside faint ones
    per_source[2, ..., 6:] = 0.0  # satellite 2 sets after integration 5
    truth = np.array([0.8, 1.0, 1.2])[:, None, None, None]
    # satellite 0's estimate is wrong in the second half: the data hold an unrelated signal
    wrong = rng.normal(size=shape[1:]) + 1j * rng.normal(size=shape[1:])
    vis = np.sum(truth * per_source, 0) + 0.01 * rng.normal(size=shape[1:])
    vis[..., 5:] += (wrong - 0.8 * per_source[0])[..., 5:]
    flags = rng.random(shape[1:]) < 0.1
    weights = rfi_estimate.source_weights(vis, flags, per_source, window_cells=3)
    for t in range(n_time):
        span = slice(max(t - 1, 0), min(t + 2, n_time))
        seen = [r for r in range(n_src) if np.any(per_source[r][..., span] != 0)]
        want = np.zeros(n_src)
        want[seen] = _lsq_weights(vis, flags, per_source[seen], span)
        # measured 1.9e-9 at most against lsq_linear
        np.testing.assert_allclose(weights[:, t], want, atol=2e-7)
    # the estimates the data bear out keep their weight, the wrong one loses it, and a
    # satellite out of view for the whole window gets none
    np.testing.assert_allclose(weights[1], 1.0, atol=1e-3)
    np.testing.assert_allclose(weights[0, :3], 0.8, atol=2e-3)  # measured 8e-4 off
    assert np.all(weights[0, 6:] < 0.2)  # measured 0.08, 0, 0
    assert np.all(weights[2, 8:] == 0.0)


def test_init_auto_is_the_fringe_start_unless_the_rows_are_split_or_too_large(small_store):
    from types import SimpleNamespace

    obs = read_observation(small_store)
    assert joint.resolve_init("auto", obs) == "fringe"
    assert joint.resolve_init("auto", obs, n_processes=2) == "data"
    assert joint.resolve_init("auto", obs, by_block=True) == "data"  # the baseline axis
    assert joint.resolve_init("prior", obs, n_processes=2) == "prior"
    # bench-512's shape: 130816 baselines x 32 satellites x 8 channels x 150 integrations
    large = SimpleNamespace(n_bl=130816, n_sat=32, n_freq=8, n_time=150)
    assert joint.resolve_init("auto", large) == "data"
    # and the model "auto" builds is the fringe start's, to the last bit
    config = run_config.model_config(run_config.load({}))
    auto = joint.build(obs, config, init="auto").params.rfi
    fringe = joint.build(obs, config, init="fringe").params.rfi
    for got, want in zip(auto, fringe, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
