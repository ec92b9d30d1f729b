"""Ground transmitters and aircraft tracks (``observation.emitters``) against independent
references: the closed-form WGS84 and east-north-up conversions written out here, a straight
line at constant speed, brute-force delays per antenna, and finite differences."""

import dataclasses

import numpy as np
import pytest

from tabascal.observation import emitters as em
from tabascal.observation import geometry as geo

A_WGS84 = 6378137.0
F_WGS84 = 1 / 298.257223563
OMEGA = 7.292115e-5
C = 299792458.0

# A site in the Karoo, its antennas spread over a few km, 20 s of observation.
LAT0, LON0, H0 = np.deg2rad(-30.7), np.deg2rad(21.4), 1050.0
GAST0 = 1.234
TIMES = np.linspace(0.0, 20.0, 11)


def ecef(lat, lon, h):
    """The closed-form WGS84 geodetic to Earth-centred, Earth-fixed conversion."""
    e2 = F_WGS84 * (2 - F_WGS84)
    n = A_WGS84 / np.sqrt(1 - e2 * np.sin(lat) ** 2)
    return np.array(
        [
            (n + h) * np.cos(lat) * np.cos(lon),
            (n + h) * np.cos(lat) * np.sin(lon),
            (n * (1 - e2) + h) * np.sin(lat),
        ]
    )


def enu_to_ecef(e, n, u):
    """An east-north-up offset about (LAT0, LON0, H0) to ECEF, by the rotation matrix."""
    sl, cl, sp, cp = np.sin(LON0), np.cos(LON0), np.sin(LAT0), np.cos(LAT0)
    rot = np.array([[-sl, -sp * cl, cp * cl], [cl, -sp * sl, cp * sl], [0.0, cp, sp]])
    return ecef(LAT0, LON0, H0) + rot @ np.array([e, n, u])


def turned(xyz, t):
    """ECEF to the inertial frame at t: a rotation about z by GAST0 + OMEGA t."""
    a = GAST0 + OMEGA * t
    rot = np.array([[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0], [0.0, 0.0, 1.0]])
    return rot @ xyz


@pytest.fixture(scope="module")
def antennas():
    rng = np.random.default_rng(5)
    return np.stack([enu_to_ecef(*off) for off in rng.uniform(-2e3, 2e3, (5, 3)) * [1, 1, 0.01]])


def test_a_ground_transmitter_sits_where_the_closed_form_conversions_put_it():
    lat, lon, h = np.deg2rad(-30.55), np.deg2rad(21.62), 1200.0
    ground = em.GroundEmitters([lat], [lon], [h], GAST0, names=["tower"])
    # 0 apart, and 9.3e-10 m once turned (float64 rounding at 6.4e6 m)
    np.testing.assert_allclose(ground.itrf[0], ecef(lat, lon, h), rtol=0, atol=1e-7)
    pos = ground.inertial(TIMES, 0)[0, 0]
    want = np.stack([turned(ecef(lat, lon, h), t) for t in TIMES])
    np.testing.assert_allclose(pos, want, rtol=0, atol=1e-7)
    assert ground.label(0) == "tower" and ground.n_sat == 1


def test_a_ground_transmitters_derivatives_equal_finite_differences():
    ground = em.GroundEmitters([np.deg2rad(-30.6)], [np.deg2rad(21.5)], [300.0], GAST0)
    d = ground.inertial(TIMES, 3)[:, 0]
    step = 0.5
    for k in range(1, 4):
        low, high = (
            ground.inertial(TIMES - step, k - 1)[k - 1, 0],
            ground.inertial(TIMES + step, k - 1)[k - 1, 0],
        )
        fd = (high - low) / (2 * step)
        # 2.3e-10 relative: the central difference's own error, (OMEGA step)^2 / 6 = 2.2e-10
        np.testing.assert_allclose(d[k], fd, rtol=1e-8, atol=1e-12 * np.abs(d[k]).max())


def test_ground_and_aircraft_delays_equal_brute_force_per_antenna(antennas):
    ground = em.GroundEmitters(
        np.deg2rad([-30.62, -30.9]), np.deg2rad([21.55, 21.2]), [150.0, 40.0], GAST0
    )
    start = enu_to_ecef(-15e3, 8e3, 10e3)
    velocity = enu_to_ecef(-15e3 + 230.0, 8e3 - 40.0, 10e3) - start
    track_t = np.arange(-5.0, 30.0, 1.0)
    aircraft = em.AircraftTracks([em.Track(track_t, start + track_t[:, None] * velocity)], GAST0)
    both = em.Emitters((ground, aircraft), ("ground", "aircraft"))
    ra, dec = 1.1, -0.45
    got = geo.rfi_delays(antennas, both, TIMES, GAST0, ra, dec, n_deriv=0)[..., 0]
    s0 = np.array([np.cos(dec) * np.cos(ra), np.cos(dec) * np.sin(ra), np.sin(dec)])
    emitters_itrf = [*ground.itrf, None]
    want = np.zeros((len(antennas), 3, TIMES.size))
    for i, t in enumerate(TIMES):
        for s in range(3):
            x_e = turned(emitters_itrf[s] if s < 2 else start + t * velocity, t)
            for a, ant in enumerate(antennas):
                x_a = turned(ant, t)
                want[a, s, i] = -(np.linalg.norm(x_e - x_a) + x_a @ s0) / C * 1e6
    want -= want.mean(axis=0, keepdims=True)
    # 7.3e-12 us apart at most: the rounding of the w term's 2e4 us
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-10)
    assert both.kinds == ("ground", "ground", "aircraft")


def test_a_straight_track_is_interpolated_exactly_at_and_between_its_samples():
    # Samples of a straight line at constant speed, given as the latitude, longitude and
    # height an ADS-B decoder writes.
    start = enu_to_ecef(5e3, -20e3, 9e3)
    velocity = np.array([120.0, -180.0, 35.0])
    t = np.arange(0.0, 60.0, 1.0)
    lat, lon, h = geo.itrf_to_geodetic(start + t[:, None] * velocity)
    track = em.Track.from_geodetic(t, lat, lon, h)
    at_samples = track.itrf_at(t, 0)[0]
    # 9.3e-10 m apart (the geodetic round trip), and 1.4e-9 m between the samples
    np.testing.assert_allclose(at_samples, start + t[:, None] * velocity, rtol=0, atol=1e-7)
    between = t[:-1] + 0.37
    d = track.itrf_at(between, 3)
    np.testing.assert_allclose(d[0], start + between[:, None] * velocity, rtol=0, atol=1e-7)
    # the velocity to 2.3e-9 m/s, the acceleration 4.6e-9 m/s^2 from zero
    np.testing.assert_allclose(d[1], np.broadcast_to(velocity, d[1].shape), rtol=0, atol=2e-7)
    np.testing.assert_allclose(d[2], 0.0, rtol=0, atol=5e-7)


def test_a_curved_tracks_spline_passes_its_samples_and_beats_the_chords_between_them():
    # A turn at 3 deg/s, 250 m/s, sampled every 2 s: the spline is exact at the samples and
    # between them closer to the arc than the chords (straight lines between the samples).
    rate, speed = np.deg2rad(3.0), 250.0
    radius = speed / rate
    t = np.arange(0.0, 40.0, 2.0)
    arc = lambda tt: np.stack(  # noqa: E731
        [radius * np.sin(rate * tt), radius * (1 - np.cos(rate * tt)), np.full_like(tt, 9e3)], -1
    )
    offsets = arc(t)
    track = em.Track(t, np.stack([enu_to_ecef(*o) for o in offsets]))
    np.testing.assert_allclose(track.itrf_at(t, 0)[0], track.itrf, rtol=0, atol=1e-8)
    mid = t[2:-3] + 1.0  # away from the not-a-knot ends
    truth = np.stack([enu_to_ecef(*o) for o in arc(mid)])
    spline_error = np.linalg.norm(track.itrf_at(mid, 0)[0] - truth, axis=1).max()
    chord = (track.itrf[2:-3] + track.itrf[3:-2]) / 2
    chord_error = np.linalg.norm(chord - truth, axis=1).min()
    # The spline's error, 1.8e-3 m, within the cubic spline's bound 5/384 h^4 max|x''''| =
    # 6.5e-3 m (the arc's fourth derivative: radius rate^4), and 3.6e3 times below the chords'
    # 6.5 m (their sagitta)
    h = t[1] - t[0]
    assert spline_error <= 5 / 384 * h**4 * radius * rate**4, spline_error
    assert spline_error < 1e-3 * chord_error, (spline_error, chord_error)


def test_an_aircrafts_inertial_derivatives_equal_finite_differences():
    start = enu_to_ecef(-3e3, 12e3, 10e3)
    t = np.arange(0.0, 40.0, 1.0)
    wiggle = np.stack([220.0 * t, 30.0 * np.sin(t / 6.0), 2.0 * t], -1)
    aircraft = em.AircraftTracks([em.Track(t, start + wiggle)], GAST0)
    at = np.array([7.3, 15.5, 22.1])
    d = aircraft.inertial(at, 2)[:, 0]
    step = 1e-3
    # central differences agree to 4.0e-7 m/s in a velocity of 330 m/s and 2.9e-11 m/s^2 in
    # an acceleration of 0.7 m/s^2
    for k, atol in ((1, 4e-5), (2, 3e-9)):
        lo = aircraft.inertial(at - step, k - 1)[k - 1, 0]
        hi = aircraft.inertial(at + step, k - 1)[k - 1, 0]
        np.testing.assert_allclose(d[k], (hi - lo) / (2 * step), rtol=0, atol=atol)


def test_visibility_by_kind(antennas):
    ground = em.GroundEmitters([np.deg2rad(-30.75)], [np.deg2rad(21.0)], [20.0], GAST0)
    start = enu_to_ecef(-3e3, 2e3, 10e3)
    aircraft = em.AircraftTracks(
        [em.Track([4.0, 12.0], np.stack([start, start + np.array([2e3, 0.0, 0.0])]))], GAST0
    )
    below = em.AircraftTracks(
        [em.Track([0.0, 30.0], np.stack([ecef(LAT0 + 0.5, LON0, 1e4)] * 2))], GAST0
    )
    both = em.Emitters((ground, aircraft, below), ("ground", "aircraft", "aircraft"))
    seen = em.visible(antennas, both, TIMES, GAST0, np.deg2rad(5.0))
    # The ground transmitter sits below 5 deg (at the horizon) and is in view throughout; the
    # overhead aircraft within its track's 4 to 12 s; the one 3000 km away never.
    assert geo.satellite_elevation(antennas, ground, TIMES, GAST0).max() < np.deg2rad(5.0)
    np.testing.assert_array_equal(seen[0], True)
    np.testing.assert_array_equal(seen[1], (TIMES >= 4.0) & (TIMES <= 12.0))
    np.testing.assert_array_equal(seen[2], False)


def test_tracks_refuse_bad_samples_and_report_gaps():
    with pytest.raises(ValueError, match=r"sample 2 at 1\.0 s is not after sample 1 at 1\.0 s"):
        em.Track([0.0, 1.0, 1.0], np.zeros((3, 3)))
    with pytest.raises(ValueError, match="at least two samples"):
        em.Track([0.0], np.zeros((1, 3)))
    track = em.Track([0.0, 1.0, 30.0, 31.0], np.zeros((4, 3)))
    assert track.gaps() == [(1.0, 30.0)]


def _observation_with_every_kind(antennas):
    """A small observation holding two satellites, a ground transmitter and an aircraft."""
    from tabascal.store import Observation

    rng = np.random.default_rng(3)
    a1, a2 = np.triu_indices(len(antennas), 1)
    cube = (a1.size, 2, TIMES.size)
    satellites = geo.CircularOrbits([20e6, 550e3], [0.9, 0.95], [0.1, 0.2], [0.3, 0.4])
    ground = em.GroundEmitters([np.deg2rad(-30.62)], [np.deg2rad(21.55)], [150.0], GAST0)
    start = enu_to_ecef(-15e3, 8e3, 10e3)
    track_t = np.arange(-5.0, 30.0, 1.0)
    line = start + track_t[:, None] * np.array([200.0, -50.0, 1.0])
    aircraft = em.AircraftTracks([em.Track(track_t, line)], GAST0, names=["KLM123"])
    return Observation(
        a1=a1.astype(np.int32),
        a2=a2.astype(np.int32),
        ant_itrf=antennas,
        dish_diameter_m=13.5,
        times_s=TIMES,
        int_time=2.0,
        freqs_hz=np.array([1.0e9, 1.0001e9]),
        chan_width=1e5,
        gast0_rad=GAST0,
        epoch_utc="2026-03-01T12:00:00+00:00",
        ra_rad=1.1,
        dec_rad=-0.45,
        orbits=em.join(satellites, ground, aircraft),
        metadata={},
        vis=(rng.normal(size=cube) + 1j * rng.normal(size=cube)).astype(np.complex64),
        flags=np.zeros(cube, bool),
        noise=np.float64(1.0),
        rows=slice(0, a1.size),
        n_bl_total=a1.size,
    )


def test_a_store_keeps_its_ground_transmitters_and_aircraft(tmp_path, antennas):
    from tabascal.store import read_meta, store_info, write_observation

    obs = _observation_with_every_kind(antennas)
    write_observation(tmp_path / "obs.zarr", obs)
    meta = read_meta(tmp_path / "obs.zarr")
    assert store_info(tmp_path / "obs.zarr").n_sat == 4
    # A reader of version 1 alone refuses the store rather than reading its satellites alone.
    assert store_info(tmp_path / "obs.zarr").format_version == 2
    assert meta.orbits.kinds == ("satellite", "satellite", "ground", "aircraft")
    assert [meta.orbits.label(s) for s in range(4)] == [
        "satellite 0",
        "satellite 1",
        "ground transmitter 0",
        "KLM123",
    ]
    # The positions as written, to the bit
    np.testing.assert_array_equal(meta.orbits.inertial(TIMES, 3), obs.orbits.inertial(TIMES, 3))
    from tabascal.store import summarize, summary_lines

    lines = summary_lines(summarize(tmp_path / "obs.zarr"))
    assert "  satellites    2" in lines and "  other emitters 1 ground, 1 aircraft" in lines
    tower = next(line for line in lines if "ground transmitter 0" in line)
    assert "ground   at   0.15 km" in tower, tower
    satellites_only = em.split(obs.orbits)[0]
    write_observation(tmp_path / "sat.zarr", dataclasses.replace(obs, orbits=satellites_only))
    assert isinstance(read_meta(tmp_path / "sat.zarr").orbits, geo.CircularOrbits)
    assert store_info(tmp_path / "sat.zarr").format_version == 1


EPOCH = "2026-03-01T12:00:00+00:00"
EPOCH_UNIX = 1772366400.0  # the same instant in Unix seconds


def test_track_files_are_read_as_adsb_decoders_write_them(tmp_path, caplog):
    # OpenSky-like state vectors: Unix time, two aircraft interleaved, a line without a
    # position, a position repeated, and a 20 s gap in one track.
    path = tmp_path / "tracks.csv"
    rows = ["time,icao24,lat,lon,velocity,geoaltitude"]
    for k in range(6):
        t = EPOCH_UNIX + 2.0 * k + (20.0 if k >= 3 else 0.0)
        rows.append(f"{t},abc123,{-30.6 + 0.001 * k},{21.4 + 0.002 * k},230,{10000 + k}")
        rows.append(f"{EPOCH_UNIX + 2.0 * k},def456,{-30.8},{21.0 + 0.003 * k},200,{9000}")
    rows.insert(3, f"{EPOCH_UNIX + 1.0},abc123,,,230,")
    rows.append(rows[1])
    path.write_text("\n".join(rows) + "\n")
    with caplog.at_level("WARNING"):
        tracks = em.read_tracks(path, EPOCH, GAST0)
    assert tracks.names == ("abc123", "def456")
    first = tracks.tracks[0]
    np.testing.assert_array_equal(first.times_s, [0.0, 2.0, 4.0, 26.0, 28.0, 30.0])
    want = ecef(np.deg2rad(-30.6 + 0.003), np.deg2rad(21.4 + 0.006), 10003.0)
    np.testing.assert_allclose(first.itrf[3], want, rtol=0, atol=1e-6)
    assert "abc123's track has no position from 4.0 s to 26.0 s" in caplog.text


def test_track_files_take_iso_times_and_feet_and_ground_files_their_columns(tmp_path):
    path = tmp_path / "track.csv"
    path.write_text(
        "# one aircraft, heights in feet\ntime,lat_deg,lon_deg,alt_ft\n"
        "2026-03-01T12:00:10Z,-30.7,21.4,33000\n2026-03-01T12:00:11,-30.7,21.401,33010\n"
    )
    track = em.read_tracks(path, EPOCH, GAST0).tracks[0]
    np.testing.assert_array_equal(track.times_s, [10.0, 11.0])
    np.testing.assert_allclose(
        track.itrf[1], ecef(np.deg2rad(-30.7), np.deg2rad(21.401), 33010 * 0.3048), atol=1e-6
    )
    ground = tmp_path / "ground.csv"
    ground.write_text("name,lat_deg,lon_deg,height_m\nFM tower,-30.55,21.62,1350\n")
    towers = em.read_ground(ground, GAST0)
    assert towers.names == ("FM tower",)
    np.testing.assert_allclose(
        towers.itrf[0], ecef(np.deg2rad(-30.55), np.deg2rad(21.62), 1350.0), atol=1e-6
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,lat,lon\n0,1,2\n1,1,2\n", "no column for the height"),
        ("time,lat,lon,alt_m\n0,1,2,3\n1,x,2,3\n", "line 3: latitude 'x' is not a number"),
        ("time,lat,lon,alt_m\n0,1,2,3\n", "aircraft has one position"),
        ("time,lat,lon,alt_m\nnoon,1,2,3\n", "time 'noon' is neither ISO 8601 nor Unix seconds"),
        ("lat,lon,alt_m\n1,2,3\n", "no column for time"),
    ],
)
def test_bad_track_files_are_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(em.EmitterFileError, match=message):
        em.read_tracks(path, EPOCH, GAST0)


def _scene(overrides):
    from tabascal.simulate.presets import simulation_config
    from tabascal.simulate.scene import build_scene

    return build_scene(simulation_config("demo", overrides))


TOWER = {"name": "TX", "lat_deg": -26.70, "lon_deg": 116.90, "height_m": 500.0}
FLIGHT = {
    "name": "AC",
    "lat_deg": -26.95,
    "lon_deg": 116.79,
    "altitude_m": 10e3,
    "heading_deg": 30.0,
    "speed_m_s": 230.0,
}


def test_a_simulated_flight_is_straight_level_and_at_its_speed():
    from tabascal.simulate.satellites import straight_flight

    track = straight_flight(FLIGHT, 120.0)
    height = geo.itrf_to_geodetic(track.itrf)[2]
    # Level to 1.9e-9 m, and starting where it is told. The flight follows a great circle on a
    # sphere, so its course and speed measured on the WGS84 ellipsoid are off by what the two
    # shapes differ here: 2.3e-3 rad (geocentric against geodetic north) and -0.33%.
    np.testing.assert_allclose(height, 10e3, rtol=0, atol=2e-7)
    start = geo.geodetic_to_itrf(np.deg2rad(-26.95), np.deg2rad(116.79), 10e3)
    np.testing.assert_allclose(track.itrf_at([0.0])[0, 0], start, rtol=0, atol=1e-6)
    lat0, lon0 = np.deg2rad(-26.95), np.deg2rad(116.79)
    east = np.array([-np.sin(lon0), np.cos(lon0), 0.0])
    north = np.array([-np.sin(lat0) * np.cos(lon0), -np.sin(lat0) * np.sin(lon0), np.cos(lat0)])
    step = track.itrf_at([1.0])[0, 0] - start
    course = np.arctan2(step @ east, step @ north)
    assert abs(course - np.deg2rad(30.0)) < 5e-3, np.rad2deg(course)
    speed = np.linalg.norm(np.diff(track.itrf, axis=0), axis=1)
    np.testing.assert_allclose(speed, 230.0, rtol=7e-3)


def test_the_simulator_adds_emitters_after_the_satellites_leaving_their_draws():
    alone = _scene({})
    both = _scene({"emitters": {"ground": [TOWER], "aircraft": [FLIGHT]}})
    assert both.meta.orbits.kinds == ("satellite", "satellite", "ground", "aircraft")
    assert [both.meta.orbits.label(s) for s in (2, 3)] == ["TX", "AC"]
    np.testing.assert_array_equal(both.rfi.eirp_w_hz[:2], alone.rfi.eirp_w_hz)
    np.testing.assert_array_equal(both.rfi.phase[:2], alone.rfi.phase)
    np.testing.assert_array_equal(
        both.meta.orbits.inertial(TIMES)[:, :2], alone.meta.orbits.inertial(TIMES)
    )
    np.testing.assert_allclose(both.rfi.eirp_w_hz[2:], 10 ** (np.array([-120.0, -100.0]) / 10))


def test_an_orbit_error_displaces_the_satellites_alone():
    from tabascal.simulate.simulation import handed_meta

    scene = _scene({"emitters": {"ground": [TOWER], "aircraft": [FLIGHT]}})
    error = {"time_offset_s": 2.0, "radial_m": 100.0, "in_track_m": 0.0, "cross_track_m": 0.0}
    handed = handed_meta(scene.meta, error).orbits.inertial(TIMES)
    true = scene.meta.orbits.inertial(TIMES)
    assert np.all(np.linalg.norm(handed[0, :2] - true[0, :2], axis=-1) > 100.0)
    np.testing.assert_array_equal(handed[0, 2:], true[0, 2:])


def test_simulator_emitter_names_must_be_unique():
    from tabascal.simulate.satellites import SimulationError

    with pytest.raises(SimulationError, match="emitter names must be unique"):
        _scene({"emitters": {"ground": [TOWER], "aircraft": [{**FLIGHT, "name": "TX"}]}})


def test_a_run_configs_files_replace_the_observations_emitters_of_their_kind(tmp_path, antennas):
    from tabascal.fitting import run_config
    from tabascal.fitting.run_plan import plan_run

    obs = _observation_with_every_kind(antennas)
    (tmp_path / "towers.csv").write_text("name,lat_deg,lon_deg,height_m\nA,-30.5,21.5,10\n")
    config = run_config.load({"emitters": {"ground_file": str(tmp_path / "towers.csv")}})
    replaced = plan_run(config).satellites.apply(obs)
    assert replaced.orbits.kinds == ("satellite", "satellite", "ground", "aircraft")
    assert replaced.orbits.label(2) == "A" and replaced.orbits.label(3) == "KLM123"
    np.testing.assert_array_equal(
        replaced.orbits.inertial(TIMES)[:, :2], obs.orbits.inertial(TIMES)[:, :2]
    )
    assert plan_run(run_config.load({})).satellites.apply(obs) is obs
