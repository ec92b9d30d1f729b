"""The joint model: gradients, sampling rule, bad input, and a fit from blind initialisation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal import fitting, parallel
from tabascal.cli.fit import DEMO_CONFIG
from tabascal.fitting import optimiser, run_config
from tabascal.model import gains, joint, rfi_signal, rfi_vis, satellites
from tabascal.observation import geometry
from tabascal.observation.geometry import CircularOrbits
from tabascal.store import read_observation


@pytest.fixture(scope="module")
def obs(small_store):
    return read_observation(small_store)


def test_required_samples_bound_the_midpoint_error_of_a_fringe():
    # Direct evaluation: the n-point midpoint rule against the exact mean of exp(2 pi i w x)
    # over x in [-1/2, 1/2], at the sample count the rule chose and at half of it.
    snr, tol = 200.0, 0.1
    cycles = np.array([0.0, 0.05, 0.3, 1.5, 2.7, 9.5])  # away from whole cycles, where the
    # error vanishes by symmetry and no bound can be tight
    n = rfi_vis.required_samples(cycles, snr, tol, max_samples=1024, sampling="midpoint")
    for w, k in zip(cycles, n, strict=True):
        x = (np.arange(k) + 0.5) / k - 0.5
        error = abs(np.mean(np.exp(2j * np.pi * w * x)) - np.sinc(w))
        assert error * snr <= tol, (w, k, error)
        if k > 1:
            x = (np.arange(k // 2) + 0.5) / (k // 2) - 0.5
            coarser = abs(np.mean(np.exp(2j * np.pi * w * x)) - np.sinc(w))
            # The bound is not loose by more than the factor of 2 in n (4 in error) plus slack.
            assert coarser * snr > tol / 16, (w, k, coarser)


def test_required_gauss_samples_bound_the_error_of_a_fringe():
    # Direct evaluation: the n-node Gauss-Legendre rule against the exact mean of
    # exp(2 pi i w x) over x in [-1/2, 1/2], at the node count chosen and at one fewer.
    snr, tol = 1e5, 0.1
    cycles = np.array([0.0, 0.05, 0.3, 1.5, 2.7, 9.5])
    n = rfi_vis.required_samples(cycles, snr, tol, max_samples=1024, sampling="gauss")
    np.testing.assert_array_equal(n, [1, 3, 4, 8, 11, 26])
    midpoint = rfi_vis.required_samples(cycles, snr, tol, max_samples=1024, sampling="midpoint")
    np.testing.assert_array_equal(midpoint, [1, 128, 512, 1024, 1024, 1024])
    for w, k in zip(cycles, n, strict=True):
        nodes, weights = np.polynomial.legendre.leggauss(k)
        error = abs(np.sum(weights / 2 * np.exp(1j * np.pi * w * nodes)) - np.sinc(w))
        assert error * snr <= tol, (w, k, error)
        if k > 1 and w < 3:
            nodes, weights = np.polynomial.legendre.leggauss(k - 1)
            fewer = abs(np.sum(weights / 2 * np.exp(1j * np.pi * w * nodes)) - np.sinc(w))
            # The bound is tight to a factor of 3 up to 2.7 cycles (ri_kernels' tests), so one
            # node fewer would not have done, or nearly so.
            assert fewer * snr > tol / 10, (w, k, fewer)


def test_small_groups_merge_upwards_to_the_group_limit():
    time_cycles = np.array([0.0] * 10 + [0.4] * 2 + [1.5] * 10 + [6.0] * 10 + [40.0] * 3)
    config = rfi_vis.RfiVisConfig(quadrature_limit=16, max_groups=3, tolerance=0.1)
    labels, specs = rfi_vis.plan_groups(time_cycles, np.zeros_like(time_cycles), 100.0, config)
    assert len(specs) == 3
    assert specs[-1].operator == "analytic"
    needed = rfi_vis.required_samples(time_cycles, 100.0, 0.1, 256, config.sampling)
    for label, need in zip(labels, needed, strict=True):
        spec = specs[label]
        # Every baseline gets at least the sampling it needs (analytic integrates time exactly).
        assert spec.operator == "analytic" or spec.n_time_samples >= need


@pytest.mark.slow
@pytest.mark.usefixtures("x64")  # precision "double"
def test_loss_gradient_matches_finite_differences(obs):
    config = run_config.model_config(run_config.load({"precision": "double"}))
    model = joint.build(obs, config, init="prior", seed=3)
    inputs = (model.constants, model.data)
    # One program for the gradient and the differences' values: a second for the loss alone
    # would cost another compilation of the model.
    value_and_grad = jax.jit(jax.value_and_grad(lambda p: joint.loss(p, inputs, model.spec)[0]))
    grad = value_and_grad(model.params)[1]
    key = jax.random.key(7)
    leaves, tree = jax.tree_util.tree_flatten(model.params)
    keys = jax.random.split(key, len(leaves))
    direction = tree.unflatten(
        [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
    )
    h = 1e-5
    shifted = [
        value_and_grad(
            jax.tree_util.tree_map(lambda p, d, s=s: p + s * h * d, model.params, direction)
        )[0]
        for s in (1.0, -1.0)
    ]
    numeric = (shifted[0] - shifted[1]) / (2 * h)
    analytic = sum(
        jnp.vdot(g, d)
        for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(direction), strict=True)
    )
    np.testing.assert_allclose(float(analytic), float(numeric), rtol=1e-6)


def _random_like(tree, seed: int):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return treedef.unflatten(
        [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
    )


def _vdot(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return float(sum(jnp.vdot(x, y) for x, y in pairs))


@pytest.mark.slow
@pytest.mark.usefixtures("x64")  # precision "double"
def test_gauss_newton_product_is_the_model_tangents_weighted_square(obs):
    """v' G v = (sum over unflagged cells |J v|^2 / noise^2 + |v|^2) / N, with J v by central
    differences of the model (independent of the product's forward and reverse passes); where
    the model meets the data the Gauss-Newton product is the Hessian's."""
    config = run_config.model_config(run_config.load({"precision": "double"}))
    model = joint.build(obs, config, init="prior", seed=3)
    spec, data = model.spec, model.data
    inputs = (model.constants, data)
    v = _random_like(model.params, 11)
    product = jax.jit(lambda p, t, i: joint.gauss_newton(p, t, i, spec))
    gv = product(model.params, v, inputs)

    def cube(p):
        return joint.predict(p, model.constants, spec).model

    h = 1e-5
    up, down = (
        cube(jax.tree.map(lambda p, d, s=s: p + s * h * d, model.params, v)) for s in (1, -1)
    )
    jv = (up - down) / (2 * h)
    weight = np.where(np.asarray(data.flags), 0.0, 1.0 / np.asarray(data.noise)[:, None, None] ** 2)
    want = (np.sum(weight * np.abs(np.asarray(jv)) ** 2) + _vdot(v, v)) / float(data.n_points)
    # Measured 7.4e-12 apart (the differences' truncation and rounding).
    np.testing.assert_allclose(_vdot(v, gv), want, rtol=1e-9)

    # With the data the model's own prediction, the residuals' curvature is zero: the product
    # equals the loss's Hessian-vector product (forward over reverse), every leaf. Measured
    # 3.8e-16 of the largest entry at most.
    exact = data._replace(vis=cube(model.params))
    at_fit = (model.constants, exact)
    loss = lambda p: joint.loss(p, at_fit, spec)[0]  # noqa: E731
    hv = jax.jit(lambda p, t: jax.jvp(jax.grad(loss), (p,), (t,))[1])(model.params, v)
    gv = product(model.params, v, at_fit)
    for got, ref in zip(jax.tree.leaves(gv), jax.tree.leaves(hv), strict=True):
        scale = float(np.max(np.abs(np.asarray(ref))))
        assert float(np.max(np.abs(np.asarray(got) - np.asarray(ref)))) <= 5e-14 * scale


@pytest.mark.slow
def test_demo_fit_from_data_estimates_reaches_the_noise_and_recovers_the_sky(demo_store):
    # The `tabascal demo` configuration on the demo preset, initialised from the data alone.
    obs = read_observation(demo_store)
    config = run_config.load(DEMO_CONFIG)
    model = joint.build(obs, run_config.model_config(config), init="data")
    fit_cfg = run_config.fit_config(config)
    optimizer = optimiser.make_optimizer(fit_cfg)
    step = fitting.route_step(parallel.route("none"), model.spec, fit_cfg, optimizer)
    state, history = optimiser.run(
        step,
        optimiser.init_state(model.params, optimizer),
        (model.constants, model.data),
        fit_cfg,
        progress=False,
        n_points=float(model.data.n_points),  # the polish's stop rule counts nats, as the run's
    )
    prediction = joint.predict(state.params, model.constants, model.spec)
    noise = float(np.mean(obs.noise))
    sky_rmse = float(np.sqrt(np.mean(np.abs(np.asarray(prediction.sky) - obs.truth.sky_vis) ** 2)))
    raw_rmse = float(np.sqrt(np.mean(np.abs(obs.vis - obs.truth.sky_vis) ** 2)))
    print(
        f"chi2 {history.chi2[0]:.4g} -> {history.chi2[-1]:.4g}; sky RMSE {sky_rmse / noise:.3g} "
        f"noise, raw data {raw_rmse / noise:.3g} noise"
    )
    # Measured 0.9974 (sky RMSE 0.152 of the noise). Without n_points the polish stopped after
    # 3 of its steps (its rule read the loss per point as nats) at 1.09 to 1.10, where the
    # rounding of the first gradient steps decided which.
    assert abs(history.chi2[-1] - 1.0) < 0.03
    assert sky_rmse < raw_rmse / 5


def _replace(obs, **changes):
    return dataclasses.replace(obs, **changes)


def test_unflagged_nan_is_refused_naming_the_cell(obs):
    vis = obs.vis.copy()
    vis[3, 1, 7] = np.nan
    with pytest.raises(ValueError, match=r"\(3, 1, 7\)"):
        joint.build(_replace(obs, vis=vis), joint.ModelConfig())


def test_flagged_nan_is_accepted(obs):
    vis, flags = obs.vis.copy(), obs.flags.copy()
    vis[3, 1, 7] = np.nan
    flags[3, 1, 7] = True
    model = joint.build(_replace(obs, vis=vis, flags=flags), joint.ModelConfig())
    loss = joint.loss(model.params, (model.constants, model.data), model.spec)[0]
    assert np.isfinite(float(loss))
    assert int(model.data.n_points) == obs.vis.size - 1


def test_all_flagged_is_refused(obs):
    with pytest.raises(ValueError, match="every visibility is flagged"):
        joint.build(_replace(obs, flags=np.ones_like(obs.flags)), joint.ModelConfig())


@pytest.mark.parametrize("noise", [0.0, -1.0])
def test_non_positive_noise_is_refused(obs, noise):
    with pytest.raises(ValueError, match="noise"):
        joint.build(_replace(obs, noise=np.asarray(noise)), joint.ModelConfig())


@pytest.mark.usefixtures("x64")  # precision "double"
def test_integer_data_are_widened_not_narrowed(obs):
    vis = np.round(obs.vis.real).astype(np.int32)
    model = joint.build(_replace(obs, vis=vis), joint.ModelConfig(precision="double"))
    assert model.data.vis.dtype == jnp.complex128
    np.testing.assert_array_equal(np.asarray(model.data.vis).real, vis)


def test_without_satellites_the_model_has_no_rfi_term(obs):
    empty = CircularOrbits(*(np.zeros(0) for _ in range(4)))
    model = joint.build(_replace(obs, orbits=empty), joint.ModelConfig())
    assert model.spec.n_src == 0 and model.spec.groups == () and model.info["rfi_groups"] == {}
    assert model.params.rfi.z.size == 0
    prediction = jax.jit(joint.predict, static_argnums=2)(model.params, model.constants, model.spec)
    np.testing.assert_array_equal(np.asarray(prediction.rfi), 0)
    assert np.any(np.asarray(prediction.sky))


def test_satellite_below_the_horizon_throughout_is_left_out_with_a_warning(obs, caplog):
    o = obs.orbits
    # Move the first satellite's orbit half a revolution on: it is then on the far side of
    # the Earth for the whole (one-minute) observation.
    moved = dataclasses.replace(o, arg_lat_rad=o.arg_lat_rad + np.array([np.pi, 0.0]))
    with caplog.at_level("WARNING"):
        model = joint.build(_replace(obs, orbits=moved), joint.ModelConfig())
    assert "left out of the fit" in caplog.text and o.label(0) in caplog.text
    assert model.info["rfi_in_view_fraction"] == [0.0, 1.0]
    amp = rfi_signal.forward(model.params.rfi, model.constants.rfi_signal)
    assert np.all(np.asarray(amp[:, 0]) == 0) and np.all(np.asarray(amp[:, 1]) != 0)


def test_a_satellite_out_of_view_adds_exactly_zero_and_gets_no_gradient(obs):
    """With the minimum elevation between a satellite's lowest and highest, it adds exactly
    nothing to the integrations it spends wholly below it, and its signal is exactly zero in
    the cells no in-view integration's time stencil reads: nothing there reaches its
    parameters."""
    elevation = np.rad2deg(
        geometry.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)
    )
    limit = float(np.median(elevation[0]))
    config = run_config.model_config(run_config.load({"satellites": {"min_elevation_deg": limit}}))
    view = satellites.satellite_view(obs, config)[0]
    down = view[:, 1] == view[:, 0]  # below for the whole integration
    assert 0 < down.sum() < obs.n_time - 1
    read = satellites.stencil_reach(~down[None], config.rfi_vis.time_stencil)[0]
    assert np.any(down & ~read) and np.any(down & read)
    model = joint.build(obs, config, init="prior", seed=1)
    signal = model.constants.rfi_signal

    def masked_power(params):
        amp = rfi_signal.forward(params, signal)
        return jnp.sum(jnp.abs(amp[:, 0][..., ~read]) ** 2)

    amp = np.asarray(rfi_signal.forward(model.params.rfi, signal))
    assert np.all(amp[:, 0][..., ~read] == 0) and np.all(amp[:, 0][..., read] != 0)
    assert float(masked_power(model.params.rfi)) == 0.0
    grad = jax.grad(masked_power)(model.params.rfi).z
    assert np.all(np.asarray(grad) == 0)
    # Its visibilities with every other satellite's signal zeroed vanish wherever it is down,
    # the cells whose stencils read its signal beyond the horizon included.
    z = np.asarray(model.params.rfi.z).copy()
    z[:, 1] = 0
    alone = model.params.rfi._replace(z=jnp.asarray(z))
    mean = np.asarray(signal.mean).copy()
    mean[:, 1] = 0
    constants = model.constants._replace(rfi_signal=signal._replace(mean=jnp.asarray(mean)))
    vis = np.asarray(joint.predict_rfi(alone, constants, model.spec))
    assert np.all(vis[..., down] == 0) and np.all(np.abs(vis[..., ~down]).max(axis=(0, 1)) > 0)


def test_satellite_view_finds_each_crossing_of_the_minimum_elevation(obs):
    """Against the elevation scanned on a grid of 2001 times per integration: the crossing
    lies where the scan changes sign, and the view is the part on the side above."""
    elevation = np.rad2deg(
        geometry.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)
    )
    limit = float(np.median(elevation[0]))
    config = run_config.model_config(run_config.load({"satellites": {"min_elevation_deg": limit}}))
    view = satellites.satellite_view(obs, config)
    x = np.linspace(-1, 1, 2001)
    times = (obs.times_s[:, None] + x * obs.int_time / 2).ravel()
    scan = geometry.satellite_elevation(obs.ant_itrf, obs.orbits, times, obs.gast0_rad)
    above = (np.rad2deg(scan) > limit).reshape(obs.n_sat, obs.n_time, x.size)
    crossed = 0
    for s in range(obs.n_sat):
        for t in range(obs.n_time):
            lo, hi = view[s, t]
            inside = (x >= lo) & (x <= hi) & (hi > lo)
            # every scanned time inside the view is above, every one outside below, but for
            # the grid points next to the crossing (spacing 1e-3 in x)
            near = np.abs(x - lo) < 1.5e-3 if lo > -1 else np.abs(x - hi) < 1.5e-3
            assert np.array_equal(above[s, t][~near], inside[~near]), (s, t, lo, hi)
            crossed += bool(hi > lo and (lo > -1 or hi < 1))
    # one view with a crossing per integration in which the scan changes sign
    assert crossed == np.sum(above.any(axis=2) & ~above.all(axis=2)) >= 1
    # With every satellite up throughout, no view: the operators' tables are shared.
    assert satellites.satellite_view(obs, joint.ModelConfig()) is None


@pytest.mark.slow
def test_a_rising_satellites_partial_integration_is_predicted_as_well_as_a_whole_one(
    rising_store,
):
    """A LEO rising a quarter of the way into one integration (the simulator averages its
    visibilities over the part above the horizon): fed the simulation's own amplitudes, one
    value per integration (time stencil 1: no interpolation across the horizon), the model's
    RFI in that integration errs about as much as in the whole ones after it, where averaging
    over the whole integration would err ten times more."""
    rise_obs = read_observation(rising_store)
    with jax.enable_x64(True):
        config = run_config.model_config(
            run_config.load({"precision": "double", "rfi": {"time_stencil": 1}})
        )
        model = joint.build(rise_obs, config)
        view = satellites.satellite_view(rise_obs, config)[0]
        (rise,) = np.flatnonzero(view[:, 0] > -1) [-1:]  # fmt: skip
        assert -1 < view[rise, 0] < 1 and view[rise, 1] == 1  # measured: rises at x = -0.54
        c = model.constants
        amp = jnp.asarray(rise_obs.truth.rfi_amp, jnp.complex128)
        errors = {}
        for label, with_view in (("view", True), ("whole", False)):
            predicted = np.zeros(rise_obs.vis.shape, np.complex128)
            for group, tables in zip(model.spec.groups, c.groups, strict=True):
                if not with_view:
                    tables = rfi_vis.make_group_tables(
                        group, np.asarray(tables.rows), np.asarray(rise_obs.a1),
                        np.asarray(rise_obs.a2), rise_obs.n_ant, rise_obs.n_freq,
                        rise_obs.n_time, rise_obs.chan_width, rise_obs.int_time,
                        config.rfi_vis, np.float64,
                    )  # fmt: skip
                vis = rfi_vis.evaluate_group(
                    group, tables, amp, c.phase, c.delay_us, c.freq_mhz, config.rfi_vis
                )
                predicted[np.asarray(tables.rows)] = np.asarray(vis)
            error = predicted - rise_obs.truth.rfi_vis
            errors[label] = np.sqrt(np.mean(np.abs(error) ** 2, axis=(0, 1))) / rise_obs.noise
    whole_cells = float(np.median(errors["view"][rise + 1 :]))
    print(f"rise cell: {errors['view'][rise]:.2f} with the view, {errors['whole'][rise]:.2f} "
          f"without; whole cells after it: median {whole_cells:.2f} of the noise")  # fmt: skip
    # measured 1.20 with the view, 10.86 without, median 0.61 in the whole cells
    assert errors["view"][rise] < 3 * whole_cells < errors["whole"][rise] / 3
    assert np.all(errors["view"][:rise] == 0)  # below throughout: nothing, exactly


def test_the_truth_start_fits_a_rising_satellites_signal_where_it_is_up(rising_store):
    """Below the minimum elevation the truth's amplitude is zero, while the model's signal
    reaches a few integrations further, as far as the time stencils read it, and continues
    the signal there. The truth start fits only the integrations whose centre is above: the
    fitted amplitude then follows the truth's wherever the satellite is up."""
    rise_obs = read_observation(rising_store)
    config = joint.ModelConfig()
    model = joint.build(rise_obs, config, init="truth")
    c = model.constants.rfi_signal
    up = satellites.satellites_in_view(rise_obs, config)[0]  # (n_time,)
    reach = np.asarray(c.mask, bool)[0, 0, 0]
    assert np.any(reach & ~up)  # the stencils read integrations below the horizon
    signal = np.abs(np.asarray(rfi_signal.forward(model.params.rfi, c)))[:, 0]
    true = np.abs(np.asarray(rise_obs.truth.rfi_amp))[:, 0]
    error = np.max(np.abs(signal - true)[..., up]) / np.max(true)
    print(f"largest error where up: {error:.2g} of the largest amplitude")
    # measured 3.9e-4 (single precision); 0.22 when the integrations below were fitted too
    assert error < 0.01


def test_truth_initialisation_only_when_asked(obs):
    with pytest.raises(ValueError, match="truth group"):
        joint.build(_replace(obs, truth=None), joint.ModelConfig(), init="truth")
    # the default start is the data's (with the fringe-stopped RFI estimate), never the truth
    assert run_config.load(None)["fit"]["init"] == "auto"
    assert joint.resolve_init("auto", obs) == "fringe"


def test_truth_initialisation_starts_the_gains_at_the_true_gains(obs):
    """init: truth starts every component at the truth, the gains too (referred to the
    reference antenna, the phase no visibility holds)."""
    config = joint.ModelConfig()
    model = joint.build(obs, config, init="truth")
    g = np.asarray(gains.forward(model.params.gains, model.constants.gains))
    true = np.asarray(obs.truth.gains, np.complex128)
    ref = config.gains.ref_ant
    referred = true * np.conj(true[ref]) / np.abs(true[ref])
    spread = np.sqrt(np.mean(np.abs(true - 1) ** 2))
    # Measured: 2.1e-7 apart at most (single precision), on a spread of 0.17 about 1.
    print(f"apart {np.abs(g - referred).max():.2g}, spread {spread:.3g}")
    np.testing.assert_allclose(g, referred, rtol=0, atol=1e-5)
    assert spread > 0.05  # the gains differ from the start of the other inits (all 1)


def test_geometric_time_scale_is_the_sidelobe_crossing_time_over_two_pi(obs):
    """Each satellite's correlation time: the station beam's sidelobe width c / (f_top D)
    over 2 pi times the sightline's largest angular speed (here by finite differences of its
    direction), between one integration and corr_time_s."""
    from tabascal.observation import geometry

    orbits = CircularOrbits(
        altitude_m=np.array([20_180e3, 20_180e3, 550e3]),
        inclination_rad=np.deg2rad([55.0, 55.0, 53.0]),
        raan_rad=obs.orbits.raan_rad[[0, 1, 0]],
        arg_lat_rad=obs.orbits.arg_lat_rad[[0, 1, 0]],
    )
    leo = _replace(obs, orbits=orbits)
    per_antenna = {"signal": "per_antenna"}  # the shared signal takes corr_time_s
    config = run_config.model_config(
        run_config.load({"rfi": {"time_scale": "geometric", **per_antenna}})
    )
    times = satellites.rfi_time_scales(leo, config)
    fixed_config = run_config.load({"rfi": {"time_scale": "fixed", **per_antenna}})
    fixed = satellites.rfi_time_scales(leo, run_config.model_config(fixed_config))
    np.testing.assert_array_equal(fixed, 100.0)

    centre = obs.ant_itrf.mean(axis=0)
    dt = 1e-3
    speed = []
    for t in obs.times_s:
        ends = []
        for s in (t - dt, t + dt):
            sat = geometry.satellite_positions(orbits, np.array([s]))[:, 0]
            ground = geometry.rotate_z(centre[None], geometry.gast(np.array([s]), obs.gast0_rad))
            rel = sat - ground
            ends.append(rel / np.linalg.norm(rel, axis=-1, keepdims=True))
        speed.append(np.linalg.norm(ends[1] - ends[0], axis=-1) / (2 * dt))
    omega = np.max(speed, axis=0)
    theta = geometry.C / ((obs.freqs_hz.max() + obs.chan_width / 2) * obs.dish_diameter_m)
    expected = np.clip(theta / (2 * np.pi * omega), obs.int_time, 100.0)
    print("correlation times (s):", times, "angular speeds (deg/s):", np.rad2deg(omega))
    np.testing.assert_allclose(times, expected, rtol=1e-6)  # measured 1e-9 (the differences)
    # measured 48.6, 48.8 s for the GPS orbits (0.0099 deg/s) and 3.6 s for the low LEO
    assert times[2] < 0.1 * times[0] and times[0] < 100.0


def test_shared_signal_factor_is_the_truths_amplitude_up_to_one_signal_per_satellite(obs):
    """The simulator's RFI amplitude on antenna a is the emission times the beam's voltage
    towards the satellite over its range; the model's factor must carry all of the antenna
    dependence, so truth / factor is the same on every antenna."""
    config = run_config.model_config(run_config.load({"rfi": {"signal": "shared"}}))
    in_view = satellites.satellites_in_view(obs, config)
    factor = satellites.rfi_antenna_factor(obs, in_view)
    truth = np.asarray(obs.truth.rfi_amp, np.float64)
    live = np.abs(factor) > 1e-3 * np.abs(factor).max()
    ratio = np.where(live, truth / np.where(live, factor, 1.0), np.nan)
    spread = np.nanmax(np.nanstd(ratio, axis=0) / np.nanmean(np.abs(ratio), axis=0))
    # Measured 4.3e-8 (the truth is stored in float32).
    assert spread < 4e-6, spread
    # Normalised to rms 1 per satellite where it is in view.
    rms = np.sqrt(np.mean(factor**2, axis=(0, 2, 3)) / np.mean(in_view, axis=1))
    np.testing.assert_allclose(rms, 1.0, rtol=1e-12)


def test_shared_signal_is_one_signal_per_satellite_times_the_factor(obs):
    config = run_config.model_config(run_config.load({"rfi": {"signal": "shared"}}))
    model = joint.build(obs, config, init="prior", seed=3)
    c = model.constants.rfi_signal
    assert model.params.rfi.z.shape[0] == 1 and c.factor.shape == (
        obs.n_ant,
        obs.n_sat,
        obs.n_freq,
        obs.n_time,
    )
    signal = np.asarray(rfi_signal.forward(model.params.rfi, c))
    # The same modes as a one-antenna per-antenna signal, times each antenna's factor.
    alone = c._replace(factor=jnp.ones((1, obs.n_sat, 1, 1), c.factor.dtype))
    one = np.asarray(rfi_signal.forward(model.params.rfi, alone))
    np.testing.assert_allclose(signal, one * np.asarray(c.factor), rtol=1e-12, atol=0)
    # Its time scale is corr_time_s: the swings across the beam are in the factor.
    np.testing.assert_array_equal(
        satellites.rfi_time_scales(obs, config), config.rfi_signal.corr_time_s
    )


def test_shared_estimate_recovers_the_signal_that_made_per_antenna_estimates(obs):
    config = run_config.model_config(run_config.load({"rfi": {"signal": "shared"}}))
    c = joint.build(obs, config).constants.rfi_signal
    rng = np.random.default_rng(1)
    u = rng.uniform(1.0, 2.0, (1, obs.n_sat, obs.n_freq, obs.n_time))
    phases = np.exp(2j * np.pi * rng.uniform(size=(obs.n_ant, obs.n_sat, 1, 1)))
    estimate = np.asarray(c.factor) * u * phases  # any per-antenna phase: it cancels
    in_view = np.asarray(c.mask, bool)[0, :, 0, :]
    got = rfi_signal.shared_estimate(c, estimate)
    np.testing.assert_allclose(got[0][:, :, in_view[0]], u[0][:, :, in_view[0]], rtol=1e-12)
