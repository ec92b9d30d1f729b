from datetime import UTC, datetime

import numpy as np
import pytest

from tabascal.observation import geometry as geo

LAT, LON, HEIGHT = np.deg2rad(-26.8247), np.deg2rad(116.7644), 377.0
GAST0 = 1.234


def _array(n_ant=6, spread_m=3000.0, seed=0):
    enu = np.random.default_rng(seed).uniform(-spread_m, spread_m, (n_ant, 3)) * [1, 1, 0.01]
    return geo.enu_to_itrf(enu, LAT, LON, HEIGHT)


def _zenith_phase_centre(t_s=0.0):
    return GAST0 + geo.OMEGA_EARTH * t_s + LON, LAT


def _orbits():
    return geo.CircularOrbits(
        altitude_m=[20_180e3, 550e3],
        inclination_rad=np.deg2rad([55.0, 53.0]),
        raan_rad=[0.3, 2.0],
        arg_lat_rad=[1.1, -0.4],
        names=("gnss", "leo"),
    )


def test_orbit_radius_is_constant_and_period_matches_kepler():
    orbits = _orbits()
    times = np.linspace(0.0, 5000.0, 7)
    pos = geo.satellite_positions(orbits, times)
    radius = np.broadcast_to(orbits.radius_m[:, None], pos.shape[:2])
    np.testing.assert_allclose(np.linalg.norm(pos, axis=-1), radius, rtol=1e-14)
    # GPS satellites orbit twice per sidereal day (86164.1 s); 20,180 km is their nominal altitude.
    assert orbits.period_s[0] == pytest.approx(86164.1 / 2, rel=2e-3)
    back = geo.satellite_positions(orbits, times + orbits.period_s[1])[1]
    np.testing.assert_allclose(back, pos[1], atol=1e-6)


def test_satellite_velocity_is_tangent_with_circular_speed():
    orbits = _orbits()
    d = geo.satellite_inertial(orbits, np.array([0.0, 100.0]), n_deriv=1)
    np.testing.assert_allclose(np.sum(d[0] * d[1], axis=-1), 0.0, atol=1e-3)
    speed = np.sqrt(geo.GM_EARTH / orbits.radius_m)
    speed = np.broadcast_to(speed[:, None], d.shape[1:3])
    np.testing.assert_allclose(np.linalg.norm(d[1], axis=-1), speed, rtol=1e-14)


def test_delay_derivatives_match_finite_differences():
    ant, orbits = _array(), _orbits()
    ra, dec = _zenith_phase_centre()
    times = np.array([10.0, 400.0, 900.0])
    h = 0.5
    steps = np.array([-2, -1, 1, 2]) * h
    shifted = [geo.rfi_delays(ant, orbits, times + s, GAST0, ra, dec, n_deriv=3) for s in steps]
    at = geo.rfi_delays(ant, orbits, times, GAST0, ra, dec, n_deriv=3)
    for k in range(3):
        # fourth-order central difference of the analytic k-th derivative
        fd = (shifted[0][..., k] - 8 * shifted[1][..., k] + 8 * shifted[2][..., k]) / (12 * h)
        fd -= shifted[3][..., k] / (12 * h)
        scale = np.abs(at[..., k + 1]).max()
        np.testing.assert_allclose(at[..., k + 1], fd, atol=1e-7 * scale + 1e-12)
    # relative to the array mean
    np.testing.assert_allclose(at.mean(axis=0), 0.0, atol=1e-9)


def test_far_field_limit_of_satellite_phase_equals_sky_fringe():
    ant = _array(spread_m=5000.0)
    ra, dec = _zenith_phase_centre(50.0)
    # an emitter 1e11 m away: the near-field curvature |b|^2 / 2D is ~1e-4 m at 5 km
    orbits = geo.CircularOrbits([1e11], [0.4], [GAST0 + LON - 0.05], [0.3])
    freq_hz = 350e6
    a1, a2 = np.triu_indices(len(ant), 1)
    for t in (0.0, 50.0, 100.0):
        times = np.array([t])
        tau = geo.rfi_delays(ant, orbits, times, GAST0, ra, dec, n_deriv=0)[:, 0, 0, 0]
        centre = geo.antenna_inertial(ant, times, GAST0)[0].mean(axis=0)[0]
        los = geo.satellite_positions(orbits, times)[0, 0] - centre
        src_ra = np.arctan2(los[1], los[0])
        src_dec = np.arcsin(los[2] / np.linalg.norm(los))
        sky = geo.sky_delays(ant, times, GAST0, ra, dec, [src_ra], [src_dec])[:, 0, 0]
        near = 2 * np.pi * freq_hz * 1e-6 * (tau[a1] - tau[a2])
        far = 2 * np.pi * freq_hz * 1e-6 * (sky[a1] - sky[a2])
        assert np.max(np.abs(far)) > 10.0  # the source is well off the phase centre
        np.testing.assert_allclose(near, far, atol=2e-3)


def test_source_at_phase_centre_is_fringe_stopped():
    ant = _array()
    ra, dec = 0.7, -0.5
    tau = geo.sky_delays(ant, np.linspace(0, 3600, 5), GAST0, ra, dec, [ra], [dec])
    np.testing.assert_allclose(tau, 0.0, atol=1e-12)


def test_uvw_matches_hour_angle_declination_formula():
    ant = _array()
    times = np.array([0.0, 1000.0, 20000.0])
    ra, dec = 2.1, -0.6
    uvw = geo.antenna_uvw(ant, times, GAST0, ra, dec)
    for i, t in enumerate(times):
        h = GAST0 + geo.OMEGA_EARTH * t - ra  # Greenwich hour angle
        sh, ch, sd, cd = np.sin(h), np.cos(h), np.sin(dec), np.cos(dec)
        rot = np.array([[sh, ch, 0], [-sd * ch, sd * sh, cd], [cd * ch, -cd * sh, sd]])
        np.testing.assert_allclose(uvw[i], ant @ rot.T, atol=1e-6)


def test_centre_phase_matches_extended_precision_reference():
    rng = np.random.default_rng(3)
    delay_us = rng.uniform(-300.0, 300.0, (3, 2, 5))
    freqs = np.array([50e6, 150.123457e6, 349.9e6])
    phase = geo.centre_phase(delay_us, freqs)
    assert phase.shape == (3, 2, 3, 5)
    assert np.all(np.abs(phase) <= np.pi)
    cycles = np.longdouble(freqs)[None, None, :, None] * np.longdouble(delay_us)[:, :, None, :]
    cycles *= np.longdouble("1e-6")
    ref = 2 * np.pi * (cycles - np.round(cycles))
    np.testing.assert_allclose(np.exp(1j * phase), np.exp(1j * ref.astype(float)), atol=1e-9)


def test_elevation_of_equatorial_satellite_seen_from_equator():
    ant = geo.geodetic_to_itrf([0.0, 0.0], [-1e-4, 1e-4], [0.0, 0.0])  # two antennas, lon ~ 0
    radius = geo.R_EARTH + 1000e3
    orbits = geo.CircularOrbits([1000e3], [0.0], [0.0], [GAST0])  # overhead at t = 0
    times = np.array([0.0, 120.0, 300.0])
    el = geo.satellite_elevation(ant, orbits, times, GAST0)[0]
    gamma = (orbits.mean_motion[0] - geo.OMEGA_EARTH) * times  # geocentric angle between them
    expected = np.arctan2(np.cos(gamma) - geo.R_EARTH / radius, np.sin(gamma))
    np.testing.assert_allclose(el, expected, atol=1e-9)


def test_geodetic_round_trip_and_known_points():
    lat, lon, h = np.array([-0.47, 0.0, 1.5]), np.array([2.0, 0.0, -1.0]), np.array([377.0, 0, 5])
    back = geo.itrf_to_geodetic(geo.geodetic_to_itrf(lat, lon, h))
    np.testing.assert_allclose(back[0], lat, atol=1e-13)
    np.testing.assert_allclose(back[1], lon, atol=1e-13)
    np.testing.assert_allclose(back[2], h, atol=1e-6)
    np.testing.assert_allclose(geo.geodetic_to_itrf(0, 0, 0), [geo.R_EARTH, 0, 0])
    polar = geo.R_EARTH * (1 - geo.WGS84_F)
    np.testing.assert_allclose(geo.geodetic_to_itrf(np.pi / 2, 0, 0), [0, 0, polar], atol=1e-6)


def test_enu_axes_are_local_east_north_up():
    ref = geo.geodetic_to_itrf(LAT, LON, HEIGHT)
    pts = geo.enu_to_itrf(np.eye(3) * 100.0, LAT, LON, HEIGHT) - ref
    up = geo.geodetic_up(ref)
    np.testing.assert_allclose(pts[2] / 100, up, atol=1e-12)
    assert pts[1] @ [0, 0, 1] > 0  # north points towards +z
    np.testing.assert_allclose(np.cross(pts[0], pts[1]) / 1e4, up, atol=1e-12)


def test_sidereal_angle_matches_meeus_example():
    # Meeus, Astronomical Algorithms, example 12.a: 1987 April 10, 0h UT -> 13h10m46.3668s
    got = geo.greenwich_sidereal_angle(datetime(1987, 4, 10, tzinfo=UTC))
    expected = np.deg2rad((13 + 10 / 60 + 46.3668 / 3600) * 15)
    assert got == pytest.approx(expected, abs=1e-7)


def _field_case():
    """Five antennas over 20 km, a zenith field of 4 degrees, seven times over an hour."""
    a1, a2 = np.triu_indices(5, 1)
    ra, dec = _zenith_phase_centre(1800.0)
    times = np.linspace(0.0, 3600.0, 7)
    return _array(n_ant=5, spread_m=20e3), a1, a2, ra, dec, times, np.deg2rad(4.0)


def _sources_in_field(ra, dec, fov, seed, n=300):
    """n random directions about (ra, dec) and which of them lie within ``fov`` (rad)."""
    rng = np.random.default_rng(seed)
    r, phi = fov * np.sqrt(rng.uniform(size=n)), rng.uniform(0, 2 * np.pi, n)
    src_dec = dec + r * np.sin(phi)
    src_ra = ra + r * np.cos(phi) / np.cos(dec)
    keep = np.arccos(geo.radec_to_unit(src_ra, src_dec) @ geo.radec_to_unit(ra, dec)) <= fov
    return src_ra, src_dec, keep


def test_max_sky_fringe_rate_bounds_sampled_sources():
    ant, a1, a2, ra, dec, times, fov = _field_case()
    # In blocks of 3 of the 10 baselines, the last one short.
    bound = geo.max_sky_fringe_rate(ant, a1, a2, times, GAST0, ra, dec, [150e6], fov, block=3)
    src_ra, src_dec, keep = _sources_in_field(ra, dec, fov, seed=1)
    dt = 1e-2
    taus = [geo.sky_delays(ant, times + s, GAST0, ra, dec, src_ra, src_dec) for s in (-dt, dt)]
    rate = 150.0 * (taus[1] - taus[0]) / (2 * dt)  # MHz x us/s = cycles/s
    sampled = np.abs(rate[a1] - rate[a2])[:, keep].max(axis=(1, 2))
    assert np.all(sampled <= bound * (1 + 1e-6))
    assert np.all(sampled >= 0.8 * bound)


def test_max_sky_delay_bounds_sampled_sources():
    ant, a1, a2, ra, dec, times, fov = _field_case()
    bound = geo.max_sky_delay_s(ant, a1, a2, times, GAST0, ra, dec, fov, block=3)
    src_ra, src_dec, keep = _sources_in_field(ra, dec, fov, seed=2)
    tau_us = geo.sky_delays(ant, times, GAST0, ra, dec, src_ra, src_dec)
    sampled = np.abs(tau_us[a1] - tau_us[a2])[:, keep].max(axis=(1, 2)) * 1e-6
    assert np.all(sampled <= bound * (1 + 1e-9))
    assert np.all(sampled >= 0.9 * bound)  # 300 sources reach 0.971 to 0.992 of it


def test_rfi_fringe_winding_bounds_phase_change_across_cells():
    ant, orbits = _array(n_ant=5, spread_m=10e3), _orbits()
    a1, a2 = np.triu_indices(5, 1)
    ra, dec = _zenith_phase_centre()
    int_time, chan_width, freq = 4.0, 50e3, np.array([150e6])
    centres = (np.arange(10) + 0.5) * int_time
    delay = geo.rfi_delays(ant, orbits, centres, GAST0, ra, dec, n_deriv=2)
    t_cyc, f_cyc = geo.rfi_fringe_winding(delay, a1, a2, freq, int_time, chan_width)
    edges = np.arange(11) * int_time
    tau = geo.rfi_delays(ant, orbits, edges, GAST0, ra, dec, n_deriv=0)[..., 0]
    d = tau[a1] - tau[a2]
    f_top = (freq[0] + chan_width / 2) * 1e-6
    change = f_top * np.abs(np.diff(d, axis=-1)).max(axis=(1, 2))
    assert np.all(change <= t_cyc * (1 + 1e-9))
    assert np.all(change >= 0.9 * t_cyc)
    np.testing.assert_allclose(
        f_cyc, 0.05 * np.abs(delay[a1, ..., 0] - delay[a2, ..., 0]).max(axis=(1, 2))
    )


@pytest.mark.parametrize("inclination_deg", [0.0, 90.0])
def test_angular_speed_of_an_overhead_satellite_is_its_relative_speed_over_its_height(
    inclination_deg,
):
    """Hand calculation: an antenna on the equator, a satellite at 550 km straight overhead at
    t = 0. Equatorial and prograde, the sightline turns at (n R - Omega R_e) / h; polar, the
    satellite's northward n R and the ground's eastward Omega R_e add in quadrature."""
    h = 550e3
    gast0 = 0.3
    ant = geo.geodetic_to_itrf(0.0, 0.0, 0.0)[None, :]
    orbits = geo.CircularOrbits(
        altitude_m=[h], inclination_rad=[np.deg2rad(inclination_deg)], raan_rad=[gast0],
        arg_lat_rad=[0.0],
    )  # fmt: skip
    r, n = geo.R_EARTH + h, float(orbits.mean_motion[0])
    ground = geo.OMEGA_EARTH * geo.R_EARTH
    speed = n * r - ground if inclination_deg == 0 else np.hypot(n * r, ground)
    omega = geo.satellite_angular_speed(ant, orbits, np.array([0.0]), gast0)
    assert omega.shape == (1, 1)
    np.testing.assert_allclose(omega[0, 0], speed / h, rtol=1e-13)  # measured 1e-15 (0.74 deg/s)
