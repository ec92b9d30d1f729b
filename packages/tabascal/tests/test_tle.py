"""SGP4 orbits from TLE files: the sgp4 verification vectors, the frame conversion, the circular
case, numerical derivatives, file parsing and the store."""

import dataclasses
import importlib.resources
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sgp4.api import WGS72, Satrec, jday
from sgp4.exporter import export_tle

from tabascal.observation import geometry as geo
from tabascal.observation.tle import TleError, TleOrbits, load_tle_orbits, parse_tle
from tabascal.store import read_observation, write_observation

EPOCH = datetime(2024, 6, 21, 10, 0, tzinfo=UTC)
SITE = geo.geodetic_to_itrf(np.deg2rad(-26.8247), np.deg2rad(116.7644), 377.0)


def _verification_sets():
    """(line1, line2, rows) of sgp4's SGP4-VER.TLE and tcppver.out: rows (n, 7) of tsince
    (min), TEME position (km) and velocity (km/s)."""
    root = importlib.resources.files("sgp4")
    text = (root / "SGP4-VER.TLE").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith(("1 ", "2 "))]
    rows, blocks = None, []
    for line in (root / "tcppver.out").read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == "xx":
            rows = []
            blocks.append(rows)
        elif fields:
            rows.append([float(x) for x in fields[:7]])
    assert len(blocks) == len(lines) // 2 == 33
    return [(a, b, np.array(r)) for a, b, r in zip(lines[::2], lines[1::2], blocks, strict=True)]


def _observation_at_element_epoch(line1, line2):
    """TleOrbits for an observation starting at the element set's epoch (whole second), and
    the offset (s) of the element epoch from that start."""
    sat = Satrec.twoline2rv(line1, line2, WGS72)
    start = datetime(2000, 1, 1, 12, tzinfo=UTC)
    epoch = start + timedelta(days=sat.jdsatepoch - 2451545.0 + sat.jdsatepochF)
    epoch = epoch.replace(microsecond=0)
    jd, fr = jday(*epoch.timetuple()[:6])
    offset_s = ((sat.jdsatepoch - jd) + (sat.jdsatepochF - fr)) * 86400.0
    return TleOrbits((line1,), (line2,), epoch), offset_s


def _gmst(jd, fr):
    """IAU 1982 GMST (rad) from a split Julian date (jd whole or half, fr any float), computed
    apart from tabascal: 360.98564736629 d is split into 360 d, of which only the fraction of a
    day counts, and 0.98564736629 d, so nothing large is rounded. (sgp4.propagation.gstime has
    the same formula with the rate in seconds per century, 5e-10 rad different by 2024, and
    rounds jd + fr to 4e-5 s.)"""
    days = (jd - 2451545.0) + fr
    c = days / 36525.0
    turn_fraction = ((jd - 2451545.0) % 1.0 + fr % 1.0) % 1.0
    deg = (
        280.46061837
        + 360.0 * turn_fraction
        + 0.98564736629 * days
        + 0.000387933 * c**2
        - c**3 / 38710000.0
    )
    return np.deg2rad(deg % 360.0)


def test_positions_match_sgp4_verification_vectors():
    """Positions back in TEME (undoing r = Rz(phi) r_teme, phi(t) = OMEGA_EARTH t - (GMST(t) -
    GMST(0)) for an observation whose gast0 is the GMST of its start) against the published
    vectors. Velocities are not compared: tabascal differences SGP4's positions, and SGP4's
    analytic velocity departs from their derivative by up to 4e-3 of the speed on these sets
    (high-drag and deep-space orbits)."""
    worst = 0.0
    compared = 0
    for line1, line2, rows in _verification_sets():
        orbits, offset_s = _observation_at_element_epoch(line1, line2)
        times = rows[:, 0] * 60.0 + offset_s
        if line1[2:7] == "33334":  # its eccentricity goes out of range at once (sgp4 error 3)
            with pytest.raises(TleError, match=r"NORAD 33334.*eccentricity"):
                orbits.inertial(times)
            continue
        jd, fr = jday(*datetime.fromisoformat(orbits.epoch_utc).timetuple()[:6])
        turned = _gmst(jd, fr + times / 86400.0) - _gmst(jd, fr)
        phi = geo.OMEGA_EARTH * times - turned
        teme_km = geo.rotate_z(orbits.inertial(times)[0, 0], -phi) / 1e3
        worst = max(worst, np.abs(teme_km - rows[:, 1:4]).max())
        compared += len(times)
    assert compared == 666
    # measured 1.2e-7 km (a 3.5-year propagation); the vectors are printed to 1e-8 km and the
    # sgp4 package's own test allows 2e-7 km
    assert worst < 2e-7, worst


@pytest.mark.parametrize("gast0_rad, ut1_utc_s", [(None, 0.0), (1.0, 0.0), (None, -0.4)])
def test_earth_fixed_positions_match_teme_to_pef_rotation(gast0_rad, ut1_utc_s):
    """The frame conversion: back in the Earth-fixed frame (rotating by -gast(t) as antennas
    do), satellites sit where Vallado's TEME -> PEF rotation by GMST(UT1) puts them."""
    line1, line2 = _circular_tle(550e3, np.deg2rad(53.0), 0.4, 2.0)
    orbits = TleOrbits((line1,), (line2,), EPOCH, gast0_rad=gast0_rad, ut1_utc_s=ut1_utc_s)
    times = np.linspace(0.0, 7200.0, 9)
    ours = geo.rotate_z(orbits.inertial(times)[0, 0], -geo.gast(times, orbits.gast0_rad))
    sat = Satrec.twoline2rv(line1, line2, WGS72)
    jd, fr = jday(*EPOCH.timetuple()[:6])
    _, r_teme, _ = sat.sgp4_array(np.full(times.shape, jd), fr + times / 86400.0)
    theta = _gmst(jd, fr + (times + ut1_utc_s) / 86400.0)
    reference = geo.rotate_z(r_teme * 1e3, -theta)
    # measured 3e-5 m: geometry.greenwich_sidereal_angle rounds the angle to 5e-12 rad
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-4)


def _circular_tle(altitude_m, incl_rad, raan_rad, arg_lat_rad, number=99001, epoch=EPOCH):
    """A zero-eccentricity element set at ``epoch`` with the circular orbit's Kepler mean
    motion, formatted by sgp4's own exporter (angles to 1e-4 deg: 46 m at GPS radius)."""
    n_rad_min = np.sqrt(geo.GM_EARTH / (geo.R_EARTH + altitude_m) ** 3) * 60.0
    sat = Satrec()
    days = (epoch - datetime(1949, 12, 31, tzinfo=UTC)).total_seconds() / 86400.0
    sat.sgp4init(WGS72, "i", number, days, 0.0, 0.0, 0.0, 0.0, 0.0, incl_rad, arg_lat_rad,
                 n_rad_min, raan_rad)  # fmt: skip
    return export_tle(sat)


@pytest.mark.parametrize(
    "altitude_m, tolerance_m",
    [
        # deep-space (SDP4) orbit: lunisolar terms and J2 give a -6 km radial, -15 to -9 km
        # along-track offset (measured 16.2 km at most, 6e-4 of the radius)
        (20_180e3, 20e3),
        # J2 short-period terms (+-7 km radial) and nodal / apsidal drift (measured 14.9 km)
        (550e3, 20e3),
    ],
)
def test_circular_element_set_follows_the_circular_orbit(altitude_m, tolerance_m):
    """SGP4 models the Earth's oblateness (and for deep-space orbits the Moon and Sun), a
    Keplerian circle does not: over an hour they part by J2 (R/a)^2 a-sized amounts, tens of
    km at most. A frame error would show as a rotation of the whole orbit: 1 s of sidereal
    time is 7e-5 rad, and a wrong sign or origin of the node thousands of km."""
    incl, raan, u0 = np.deg2rad(55.0), 0.7, 1.3
    tle = TleOrbits(*zip(_circular_tle(altitude_m, incl, raan, u0), strict=True), EPOCH)
    circle = geo.CircularOrbits([altitude_m], [incl], [raan], [u0])
    times = np.linspace(0.0, 3600.0, 61)
    got, expected = tle.inertial(times, 3), circle.inertial(times, 3)
    assert np.linalg.norm(got[0] - expected[0], axis=-1).max() < tolerance_m
    for k in (1, 2, 3):
        scale = np.linalg.norm(expected[k], axis=-1).max()
        # measured 7e-3 at most (LEO jerk)
        assert np.linalg.norm(got[k] - expected[k], axis=-1).max() < 1e-2 * scale
    assert abs(tle.altitude_m[0] - altitude_m) < 100.0  # WGS72 vs WGS84 mu, Kozai mean motion


@pytest.mark.parametrize("altitude_m", [550e3, 20_180e3])
def test_derivatives_match_finite_differences_of_positions(altitude_m):
    orbits = TleOrbits(*zip(_circular_tle(altitude_m, 0.9, 0.2, 0.5), strict=True), EPOCH)
    times = np.array([0.0, 900.0, 2500.0])
    got = orbits.inertial(times, 3)[:, 0]
    h = 0.004 / orbits.mean_motion[0]
    p = np.stack([orbits.inertial(times + j * h)[0, 0] for j in range(-3, 4)])
    # sixth-order central differences for the 1st and 2nd, fourth-order for the 3rd derivative
    fd = [
        (-p[0] + 9 * p[1] - 45 * p[2] + 45 * p[4] - 9 * p[5] + p[6]) / (60 * h),
        (2 * p[0] - 27 * p[1] + 270 * p[2] - 490 * p[3] + 270 * p[4] - 27 * p[5] + 2 * p[6])
        / (180 * h**2),
        (p[0] - 8 * p[1] + 13 * p[2] - 13 * p[4] + 8 * p[5] - p[6]) / (8 * h**3),
    ]
    # tolerances: this check's own error (rounding amplified by h^-k at the smaller step)
    for k, rtol in ((1, 1e-9), (2, 1e-7), (3, 1e-5)):
        scale = np.linalg.norm(got[k], axis=-1).max()
        np.testing.assert_allclose(got[k], fd[k - 1], rtol=0, atol=rtol * scale)


def test_rfi_delays_of_tle_orbits_have_consistent_derivatives():
    enu = np.random.default_rng(0).uniform(-2000, 2000, (5, 3)) * [1, 1, 0.01]
    ant = geo.enu_to_itrf(enu, np.deg2rad(-26.8247), np.deg2rad(116.7644), 377.0)
    lines = [_circular_tle(550e3, 0.93, 0.4, 2.0, 1), _circular_tle(20_180e3, 0.96, 1.0, 0.3, 2)]
    orbits = TleOrbits(*zip(*lines, strict=True), EPOCH, names=("LEO", "GNSS"))
    ra, dec = orbits.gast0_rad + np.deg2rad(116.7644), np.deg2rad(-26.8)
    args = (orbits.gast0_rad, ra, dec)
    times, h = np.array([60.0, 600.0]), 0.5
    at = geo.rfi_delays(ant, orbits, times, *args, n_deriv=3)
    shifted = [geo.rfi_delays(ant, orbits, times + s * h, *args, n_deriv=3) for s in (-2, -1, 1, 2)]
    for k in range(3):
        fd = (shifted[0][..., k] - 8 * shifted[1][..., k] + 8 * shifted[2][..., k]) / (12 * h)
        fd -= shifted[3][..., k] / (12 * h)
        scale = np.abs(at[..., k + 1]).max()
        np.testing.assert_allclose(at[..., k + 1], fd, atol=1e-6 * scale)
    el = geo.satellite_elevation(ant, orbits, times, orbits.gast0_rad)
    assert el.shape == (2, 2)


def _tle_text():
    old = _circular_tle(550e3, 0.93, 0.4, 2.0, 25544, EPOCH - timedelta(days=6))
    new = _circular_tle(550e3, 0.93, 0.5, 2.1, 25544, EPOCH - timedelta(hours=5))
    gps = _circular_tle(20_180e3, 0.96, 1.0, 0.3, 32260)
    return "\n".join(
        ["ISS (ZARYA)", *old, "", "0 ISS (ZARYA)", *new, *gps, ""]  # 3LE, 3LE, 2LE
    )


def test_load_picks_the_requested_sets_closest_to_the_observation(tmp_path):
    path = tmp_path / "sats.tle"
    path.write_text(_tle_text())
    orbits = load_tle_orbits(path, [32260, 25544], EPOCH.isoformat())
    assert orbits.catalogue_numbers == (32260, 25544)
    assert orbits.names == ("NORAD 32260", "ISS (ZARYA)")
    assert orbits.line1[1] == _tle_text().splitlines()[5]  # the set 5 h old, not 6 days
    assert orbits.gast0_rad == pytest.approx(geo.greenwich_sidereal_angle(EPOCH), abs=1e-15)
    everything = load_tle_orbits(path, None, EPOCH)
    assert everything.catalogue_numbers == (25544, 32260)


def test_load_names_what_is_wrong(tmp_path):
    path = tmp_path / "sats.tle"
    path.write_text(_tle_text())
    with pytest.raises(TleError, match=r"no element set for catalogue number\(s\) 11, 12 "):
        load_tle_orbits(path, [25544, 11, 12], EPOCH)
    with pytest.raises(TleError, match="does not exist"):
        load_tle_orbits(tmp_path / "none.tle", [1], EPOCH)
    lines = _tle_text().splitlines()
    lines[2] = lines[2][:68] + str((int(lines[2][68]) + 1) % 10)
    with pytest.raises(TleError, match="line 3 has a wrong checksum"):
        parse_tle("\n".join(lines), "bad.tle")
    with pytest.raises(TleError, match="line 2 starts an element set but line 3"):
        parse_tle("\n".join([lines[0], lines[1], lines[0]]), "bad.tle")


def test_store_keeps_tle_orbits_and_stores_without_satellites(tmp_path):
    from test_store import _observation

    base = _observation(truth=False)
    lines = [_circular_tle(550e3, 0.93, 0.4, 2.0, 1), _circular_tle(20_180e3, 0.96, 1.0, 0.3, 2)]
    orbits = TleOrbits(*zip(*lines, strict=True), base.epoch_utc, gast0_rad=base.gast0_rad,
                       names=("A", "B"), ut1_utc_s=0.25)  # fmt: skip
    obs = dataclasses.replace(base, orbits=orbits)
    write_observation(tmp_path / "tle.zarr", obs)
    got = read_observation(tmp_path / "tle.zarr").orbits
    assert isinstance(got, TleOrbits)
    assert (got.line1, got.line2, got.names, got.ut1_utc_s) == (
        orbits.line1,
        orbits.line2,
        ("A", "B"),
        0.25,
    )
    times = np.array([0.0, 100.0])
    np.testing.assert_array_equal(got.inertial(times, 3), orbits.inertial(times, 3))
    shifted = dataclasses.replace(orbits, gast0_rad=base.gast0_rad + 0.1)
    with pytest.raises(ValueError, match="TLE orbits were built for epoch"):
        write_observation(tmp_path / "bad.zarr", dataclasses.replace(base, orbits=shifted))
    empty = dataclasses.replace(base, orbits=geo.CircularOrbits([], [], [], []))
    write_observation(tmp_path / "none.zarr", empty)
    assert read_observation(tmp_path / "none.zarr").n_sat == 0


def test_a_simulation_from_a_tle_file_puts_the_satellite_where_sgp4_does(tmp_path):
    """``satellites.tle_file`` in the simulator: a GPS-altitude element set passing over the
    array is stored as its TLE lines, and the truth RFI amplitude on every antenna is the
    station beam towards the satellite over its range, with the satellite placed by sgp4 and
    rotated to the Earth-fixed frame by this module's own GMST (not tabascal's propagation)."""
    from tabascal.observation.beam import airy_voltage, beam_x
    from tabascal.simulate import build_scene, simulate, simulation_config
    from tabascal.simulate.satellites import _orbit_through

    small = {
        "array": {"n_stations": 8},
        "observation": {"n_time": 30, "n_freq": 2, "start_utc": EPOCH.isoformat()},
    }
    meta = build_scene(simulation_config("demo", {**small, "satellites": {"count": 0}})).meta
    # The orbit through the zenith of the array centre at mid-observation, ascending.
    t_mid = meta.times_s[-1] / 2
    radius, incl = geo.R_EARTH + 20_180e3, np.deg2rad(55.0)
    zenith = geo.rotate_z(
        geo.geodetic_up(meta.ant_itrf.mean(axis=0)), geo.gast(t_mid, meta.gast0_rad)
    )
    raan, arg_lat = _orbit_through(zenith * radius, radius, incl, True, t_mid)
    line1, line2 = _circular_tle(20_180e3, incl, raan, arg_lat)
    path = tmp_path / "one.tle"
    path.write_text(f"TEST-GPS\n{line1}\n{line2}\n")
    satellites = {"count": 0, "tle_file": str(path), "variation": 0.0, "spectral_index": 0.0}
    store = tmp_path / "tle.zarr"
    simulate(simulation_config("demo", {**small, "satellites": satellites}), store)
    obs = read_observation(store, truth=True)
    assert isinstance(obs.orbits, TleOrbits) and obs.orbits.line2 == (line2,)

    sat = Satrec.twoline2rv(line1, line2, WGS72)
    jd, fr = jday(*EPOCH.timetuple()[:6])
    days = fr + obs.times_s / 86400.0
    _, r_teme, _ = sat.sgp4_array(np.full(obs.times_s.shape, jd), days)
    theta = _gmst(jd, days)
    r_sat = np.stack([geo.rotate_z(r * 1e3, -th) for r, th in zip(r_teme, theta, strict=True)])
    rel = r_sat[None] - obs.ant_itrf[:, None]  # (a, t, 3)
    range_m = np.linalg.norm(rel, axis=-1)
    centre = np.stack(
        [geo.rotate_z(geo.radec_to_unit(obs.ra_rad, obs.dec_rad), -th) for th in theta]
    )
    cos_off = np.sum(rel * centre[None], axis=-1) / range_m
    sin_off = np.sqrt(np.clip(1 - cos_off**2, 0, 1))
    freqs = np.asarray(obs.freqs_hz)[None, :, None]
    expected = airy_voltage(beam_x(obs.dish_diameter_m, freqs, sin_off[:, None])) / range_m[:, None]
    ratio = np.asarray(obs.truth.rfi_amp, np.float64)[:, 0] / expected
    spread = float(np.std(ratio) / np.mean(ratio))
    # Measured 1.9e-8 (the truth is stored in float32).
    print(f"truth over sgp4 beam / range: spread {spread:.2e}")
    assert spread < 2e-6, spread
