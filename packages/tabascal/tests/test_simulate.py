"""The simulator against independent numpy references, and its presets and guarantees."""

import numpy as np
import pytest

from tabascal.config import ConfigError
from tabascal.observation import geometry as geo
from tabascal.simulate import (
    SimulationError,
    build_scene,
    plan,
    simulate,
    simulation_config,
)
from tabascal.store import read_observation

C = 299_792_458.0


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "demo.zarr"
    config = simulation_config("demo")
    scene, layout = simulate(config, path)
    return path, config, scene, layout, read_observation(path)


def _j1_miller(x):
    """J1 by Miller's downward recurrence, normalised by J0 + 2 sum_k J_2k = 1."""
    x = np.asarray(x, dtype=np.float64)
    top = 2 * (int(x.max()) // 2 + 40)
    j_next, j = np.zeros_like(x), np.full_like(x, 1e-30)
    norm, j1 = np.zeros_like(x), np.zeros_like(x)
    for k in range(top, 0, -1):
        j_next, j = j, 2 * k / x * j - j_next  # j is now J_{k-1}
        if k - 1 == 1:
            j1 = j.copy()
        if k - 1 >= 2 and (k - 1) % 2 == 0:
            norm += 2 * j
        scale = np.where(np.abs(j) > 1e100, 1e-100, 1.0)
        j, j_next, norm, j1 = j * scale, j_next * scale, norm * scale, j1 * scale
    return j1 / (norm + j)


def test_reference_bessel_matches_tabulated_values():
    # Abramowitz & Stegun table 9.1 and the first zero of J1 (9.5.1)
    got = _j1_miller(np.array([1.0, 5.0, 10.0, 3.8317059702075125]))
    np.testing.assert_allclose(got[:3], [0.4400505857, -0.3275791376, 0.0434727462], atol=1e-10)
    assert abs(got[3]) < 1e-12


def _brute_force_rfi(obs, rfi, cell_f, cell_t, n_t, n_f):
    """Midpoint average of sum_s A_a1 A_a2 exp(2 pi i nu (tau_a1 - tau_a2)) over one cell, with
    its own geometry: orbits in closed form, Earth rotation, ranges, w and the Airy beam."""
    t = obs.times_s[cell_t] + ((np.arange(n_t) + 0.5) / n_t - 0.5) * obs.int_time
    nu = obs.freqs_hz[cell_f] + ((np.arange(n_f) + 0.5) / n_f - 0.5) * obs.chan_width
    theta = obs.gast0_rad + 7.292115e-5 * t
    x, y, z = obs.ant_itrf.T
    ant = np.stack(
        [
            np.cos(theta)[None] * x[:, None] - np.sin(theta)[None] * y[:, None],
            np.sin(theta)[None] * x[:, None] + np.cos(theta)[None] * y[:, None],
            np.broadcast_to(z[:, None], (x.size, t.size)),
        ],
        axis=-1,
    )  # (a, t, 3)
    o = obs.orbits
    radius = 6_378_137.0 + o.altitude_m
    u = o.arg_lat_rad[:, None] + np.sqrt(3.986004418e14 / radius**3)[:, None] * t[None]
    ci, si = np.cos(o.inclination_rad)[:, None], np.sin(o.inclination_rad)[:, None]
    cr, sr = np.cos(o.raan_rad)[:, None], np.sin(o.raan_rad)[:, None]
    sat = radius[:, None, None] * np.stack(
        [
            cr * np.cos(u) - sr * np.sin(u) * ci,
            sr * np.cos(u) + cr * np.sin(u) * ci,
            np.sin(u) * si,
        ],
        axis=-1,
    )  # (s, t, 3)
    s0 = np.array(
        [
            np.cos(obs.dec_rad) * np.cos(obs.ra_rad),
            np.cos(obs.dec_rad) * np.sin(obs.ra_rad),
            np.sin(obs.dec_rad),
        ]
    )
    rel = sat[None] - ant[:, None]  # (a, s, t, 3)
    rho = np.linalg.norm(rel, axis=-1)
    tau = -(rho + (ant @ s0)[:, None, :]) / C  # (a, s, t) s
    sin_off = np.sqrt(1 - (rel @ s0 / rho) ** 2)
    xb = np.pi * obs.dish_diameter_m * nu[:, None, None, None] * sin_off[None] / C
    beam = 2 * _j1_miller(xb) / xb  # (f, a, s, t)
    eirp = rfi.eirp_w_hz[:, None] * rfi.time_factor(t)  # (s, t)
    spectrum = rfi.spectral_factor(nu).T  # (f, s)
    amp = np.sqrt(eirp[None, None] * spectrum[:, None, :, None] / (4 * np.pi * rho**2) / 1e-26)
    sig = amp * beam * np.exp(2j * np.pi * nu[:, None, None, None] * tau[None])  # (f, a, s, t)
    prod = sig[:, obs.a1] * np.conj(sig[:, obs.a2])  # (f, bl, s, t)
    return prod.sum(axis=2).mean(axis=(0, 2))


def test_rfi_visibilities_match_a_much_finer_brute_force_to_well_below_the_noise(demo):
    _, _, scene, layout, obs = demo
    worst = 0.0
    for cell_f, cell_t in [(0, 0), (3, 31), (1, 59)]:
        coarse = _brute_force_rfi(obs, scene.rfi, cell_f, cell_t, 64, 16)
        fine = _brute_force_rfi(obs, scene.rfi, cell_f, cell_t, 128, 32)
        reference = (4 * fine - coarse) / 3  # Richardson: the midpoint rule errs as h^2
        assert np.max(np.abs(fine - coarse)) > 1e-4 * obs.noise  # the cells really wind
        worst = max(worst, np.max(np.abs(obs.truth.rfi_vis[:, cell_f, cell_t] - reference)))
    assert layout.rfi.n_time < 64 and layout.rfi.n_freq < 16  # "much finer": 4-8x the nodes
    assert worst < 1e-4 * obs.noise  # measured 6e-6: the complex64 rounding of the store


def test_truth_amplitudes_and_geometry_rebuild_the_slowly_winding_baselines(demo):
    _, _, _, _, obs = demo
    args = (obs.gast0_rad, obs.ra_rad, obs.dec_rad)
    delay = geo.rfi_delays(obs.ant_itrf, obs.orbits, obs.times_s, *args, n_deriv=2)
    t_cyc, f_cyc = geo.rfi_fringe_winding(
        delay, obs.a1, obs.a2, obs.freqs_hz, obs.int_time, obs.chan_width
    )
    slow = (t_cyc < 0.05) & (f_cyc < 0.05)
    assert slow.sum() >= 10
    phase = geo.centre_phase(delay, obs.freqs_hz)  # (a, s, f, t)
    sig = obs.truth.rfi_amp * np.exp(1j * phase)
    centre = np.sum(sig[obs.a1[slow]] * np.conj(sig[obs.a2[slow]]), axis=1)
    # averaging a fringe of w cycles scales it by sinc(w) > 0.99 for w < 0.05
    np.testing.assert_allclose(centre, obs.truth.rfi_vis[slow], atol=0.01 * np.abs(centre).max())


def test_demo_levels_make_subtraction_matter(demo):
    _, _, _, _, obs = demo
    unflagged = ~obs.flags
    rfi = np.sqrt(np.mean(np.abs(obs.truth.rfi_vis[unflagged]) ** 2)) / obs.noise
    sky = np.sqrt(np.mean(np.abs(obs.truth.sky_vis[unflagged]) ** 2)) / obs.noise
    assert 10 < rfi < 100
    assert 2 < sky < 10
    residual = obs.vis - obs.truth.gains[obs.a1] * (
        obs.truth.sky_vis + obs.truth.rfi_vis
    ) * np.conj(obs.truth.gains[obs.a2])
    # the data are the gained sky and RFI plus Gaussian noise of the stated sigma
    assert np.std(residual.real) == pytest.approx(float(obs.noise), rel=0.03)
    assert np.std(residual.imag) == pytest.approx(float(obs.noise), rel=0.03)


def test_demo_satellites_stay_above_the_horizon_and_gains_have_a_reference(demo):
    _, config, _, _, obs = demo
    el = geo.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)
    assert np.rad2deg(el).min() >= config["satellites"]["min_elevation_deg"]
    ref = config["gains"]["ref_ant"]
    np.testing.assert_allclose(np.angle(obs.truth.gains[ref]), 0.0, atol=1e-7)
    assert np.std(np.angle(obs.truth.gains)) > 0.05  # the other antennas do drift


def test_same_seed_gives_identical_store(demo, tmp_path):
    path, config, *_ = demo
    simulate(config, tmp_path / "again.zarr")
    first, again = read_observation(path), read_observation(tmp_path / "again.zarr")
    np.testing.assert_array_equal(first.vis, again.vis)
    np.testing.assert_array_equal(first.flags, again.flags)
    np.testing.assert_array_equal(first.truth.rfi_amp, again.truth.rfi_amp)


def test_another_seed_draws_another_scene():
    one = build_scene(simulation_config("demo", seed=1))
    two = build_scene(simulation_config("demo", seed=2))
    assert not np.allclose(one.sky.flux_ref_jy, two.sky.flux_ref_jy)
    assert not np.allclose(one.meta.orbits.raan_rad, two.meta.orbits.raan_rad)
    np.testing.assert_array_equal(one.meta.ant_itrf, two.meta.ant_itrf)  # the layout is fixed


def _small_config(**simulation):
    return simulation_config(
        "demo",
        {
            "array": {"n_stations": 6},
            "observation": {"n_time": 5, "n_freq": 2, "flag_fraction": 0.1, "sefd_spread": 0.2},
            "sky": {"n_sources": 3},
            "simulation": simulation,
        },
    )


def test_streaming_through_a_disk_scratch_matches_the_in_memory_path(tmp_path):
    in_memory = _small_config(chunk_rows=4)
    streamed = _small_config(chunk_rows=4, memory_mb=0.001)
    scene = build_scene(streamed)
    layout = plan(scene, 0.001, 4)
    assert layout.scratch_on_disk and layout.cells_per_block < 5
    simulate(in_memory, tmp_path / "a.zarr")
    simulate(streamed, tmp_path / "b.zarr")
    a, b = read_observation(tmp_path / "a.zarr"), read_observation(tmp_path / "b.zarr")
    np.testing.assert_allclose(b.vis, a.vis, rtol=1e-6, atol=1e-6 * np.abs(a.vis).max())
    np.testing.assert_array_equal(b.flags, a.flags)
    assert a.noise.shape == (15,)  # sefd_spread > 0 gives a per-baseline noise
    assert 0.02 < a.flags.mean() < 0.2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zarr", "b.zarr"]


def test_missing_channels_are_flagged_with_vis_0_and_the_rest_unchanged(tmp_path):
    """A channel missing from the data: its cells flagged and 0, its truth kept; every other
    cell as the same seed simulates it without the channel missing (its own random streams
    are untouched)."""
    simulate(_small_config(), tmp_path / "whole.zarr")
    cut = _small_config()
    cut["observation"]["missing_channels"] = [1]
    simulate(cut, tmp_path / "cut.zarr")
    whole, gap = read_observation(tmp_path / "whole.zarr"), read_observation(tmp_path / "cut.zarr")
    assert np.all(gap.flags[:, 1]) and not np.any(gap.vis[:, 1])
    np.testing.assert_array_equal(gap.vis[:, 0], whole.vis[:, 0])
    np.testing.assert_array_equal(gap.flags[:, 0], whole.flags[:, 0])
    np.testing.assert_array_equal(gap.truth.rfi_vis, whole.truth.rfi_vis)
    np.testing.assert_array_equal(gap.truth.sky_vis, whole.truth.sky_vis)


def test_existing_output_is_refused_unless_overwrite(demo):
    path, config, *_ = demo
    with pytest.raises(FileExistsError, match="already exists"):
        simulate(config, path)


def test_satellite_below_the_horizon_is_refused_by_name():
    visible = build_scene(simulation_config("demo", {"satellites": {"count": 1}})).meta.orbits
    # the same orbit turned by 180 deg about the pole: same latitude, opposite longitude
    far_side = {
        "name": "HIDDEN-1",
        "altitude_m": float(visible.altitude_m[0]),
        "inclination_deg": float(np.rad2deg(visible.inclination_rad[0])),
        "raan_deg": float(np.rad2deg(visible.raan_rad[0])) + 180.0,
        "arg_lat_deg": float(np.rad2deg(visible.arg_lat_rad[0])),
    }
    config = simulation_config("demo", {"satellites": {"count": 0, "orbits": [far_side]}})
    with pytest.raises(SimulationError, match=r"satellite 'HIDDEN-1' never rises"):
        build_scene(config)


@pytest.mark.parametrize(
    ("preset", "n_ant", "n_freq", "n_time", "int_time"),
    [("bench-96", 96, 1, 90, 10.0), ("bench-512", 512, 8, 150, 4.0)],
)
def test_bench_presets_plan_their_sizes_and_stream(preset, n_ant, n_freq, n_time, int_time):
    scene = build_scene(simulation_config(preset))
    m = scene.meta
    assert (m.n_ant, m.n_bl, m.n_freq, m.n_time, m.n_sat) == (
        n_ant,
        n_ant * (n_ant - 1) // 2,
        n_freq,
        n_time,
        32,
    )
    assert m.int_time == int_time
    assert np.all(np.abs(m.freqs_hz - 150e6) < 1e6)
    layout = plan(scene, 1024.0)
    # GNSS satellites over ~65 km baselines: tens of cycles per cell, hundreds of nodes at most
    assert 8 < layout.rfi.n_time < 400 and layout.rfi.n_freq < 100
    if preset == "bench-512":
        assert layout.scratch_on_disk and layout.store_bytes > 4e9
        assert layout.cells_per_block < n_time


def test_the_real_size_preset_holds_19_million_visibilities_and_four_leo_passes():
    """array-64: 64 stations within 5 km, 32 channels of 100 kHz, 300 integrations of 2 s
    (2016 x 32 x 300 visibilities), four GNSS satellites above 20 degrees throughout and four
    LEOs passing 71 to 83 degrees up, one setting before the end."""
    m = build_scene(simulation_config("array-64")).meta
    assert (m.n_ant, m.n_bl, m.n_freq, m.n_time, m.n_sat) == (64, 2016, 32, 300, 8)
    assert m.n_bl * m.n_freq * m.n_time == 19_353_600
    assert (m.int_time, m.chan_width) == (2.0, 100e3)
    enu = m.ant_itrf - m.ant_itrf.mean(axis=0)
    assert np.max(np.linalg.norm(enu, axis=1)) < 5000.0
    elevation = np.rad2deg(geo.satellite_elevation(m.ant_itrf, m.orbits, m.times_s, m.gast0_rad))
    leo = [s for s in range(m.n_sat) if m.orbits.label(s).startswith("LEO")]
    assert len(leo) == 4
    assert np.all(elevation[leo].max(axis=1) > 70)  # measured 71.1 to 82.8 degrees
    assert np.all(elevation[leo, 0] > 0)
    assert np.sum(elevation[leo, -1] <= 0) == 1  # LEO-3 sets 22 s before the end (-1.3 degrees)
    gnss = [s for s in range(m.n_sat) if s not in leo]
    assert np.all(elevation[gnss] > 20)


@pytest.mark.parametrize(
    ("preset", "overrides", "message"),
    [
        ("dmo", None, r"unknown preset 'dmo'; choose one of demo, bench-96, bench-512, array-64"),
        ("demo", {"sky": {"flux_max_jy": 0.5}}, r"'sky.flux_max_jy' must be at least"),
        ("demo", {"array": {"layout": "file"}}, r"'array.file' must name a layout file"),
        ("demo", {"satellites": {"kinds": ["glonas"]}}, r"did you mean 'glonass'\?"),
        ("demo", {"observation": {"int_time_s": -1}}, r"'observation.int_time_s': -1.0 is out"),
        ("demo", {"gains": {"ref_antt": 1}}, r"did you mean 'gains.ref_ant'\?"),
        (
            "demo",
            {"observation": {"missing_channels": [4]}},
            r"'observation.missing_channels' = \[4\] must name channels 0 to 3",
        ),
        ("demo", {"observation": {"missing_channels": [0, 1, 2, 3]}}, r"names every channel"),
    ],
)
def test_bad_simulation_configs_name_the_key(preset, overrides, message):
    with pytest.raises(ConfigError, match=message):
        simulation_config(preset, overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"observation": {"start_utc": "yesterday"}}, r"start_utc='yesterday' is not an ISO"),
        ({"observation": {"ra_deg": 10.0}}, r"ra_deg and dec_deg must both be given"),
        ({"gains": {"ref_ant": 16}}, r"gains.ref_ant=16 but there are 16 antennas"),
    ],
)
def test_scenes_the_simulator_cannot_build_are_refused(overrides, message):
    with pytest.raises(SimulationError, match=message):
        build_scene(simulation_config("demo", overrides))


def test_a_rising_satellite_has_no_rfi_until_it_is_above_the_horizon(rising_store):
    """An explicit LEO orbit below the horizon for the first minute of four: simulated, not
    refused, with the true RFI signal exactly zero while it is below and not after."""
    obs = read_observation(rising_store)
    elevation = geo.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)[0]
    below = elevation <= 0
    assert 10 < below.sum() < 60 and not below[-1]  # measured: 26 of 120 integrations below
    amp = obs.truth.rfi_amp[:, 0, 0]  # (n_ant, n_time)
    assert np.all(amp[:, below] == 0)
    # The first integration above straddles the horizon crossing and is averaged over it.
    assert np.all(np.abs(amp[:, ~below][:, 1:]) > 0)
