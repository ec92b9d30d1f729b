"""The simulation's satellites: circular orbits, and their emission.

Random satellites are placed by choosing where each one is at mid-observation (an azimuth and
an elevation above ``min_elevation_deg``, at its kind's altitude) and solving for the orbit of
its kind's inclination through that point; a draw is kept when the satellite stays above
``min_elevation_deg`` and at least ``min_separation_deg`` from the phase centre for the whole
observation. Explicit orbits may rise or set during the observation (a LEO pass lasts minutes):
their RFI is zero while they are below the horizon at the array centre. One that never rises is
refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tabascal import TabascalError
from tabascal.observation import emitters
from tabascal.observation import geometry as geo

# Circular-orbit shells: altitude (m), inclination (deg). GNSS values are the constellations'
# nominal ones; "leo" is a Starlink-like shell and "leo-polar" a sun-synchronous one.
ORBIT_KINDS = {
    "gps": (20_180e3, 55.0),
    "galileo": (23_222e3, 56.0),
    "glonass": (19_130e3, 64.8),
    "beidou": (21_528e3, 55.0),
    "leo": (550e3, 53.0),
    "leo-polar": (800e3, 98.6),
}

MAX_DRAWS = 2000
STREAM_SATELLITES = 2  # random stream of numpy.random.default_rng([seed, stream])
STREAM_EMITTERS = 7  # the ground transmitters' and aircraft's emission


class SimulationError(TabascalError, ValueError):
    """A configuration the simulator cannot honour; the message says which part and why."""


@dataclass(frozen=True, eq=False)
class RfiEmission:
    """Each satellite's EIRP spectral density towards the array, separable in time and frequency:
    ``eirp_w_hz * (f / ref_freq_hz)^spectral_index * (1 + sum_k amp_k sin(2 pi t / period_k +
    phase_k))``. eirp_w_hz, spectral_index: (n_sat,); amp, period_s, phase: (n_sat, n_terms),
    with sum_k |amp_k| < 1 so the power stays positive."""

    eirp_w_hz: np.ndarray
    spectral_index: np.ndarray
    ref_freq_hz: float
    amp: np.ndarray
    period_s: np.ndarray
    phase: np.ndarray

    def time_factor(self, times_s) -> np.ndarray:
        """Slow variation (n_sat, n_time)."""
        arg = 2 * np.pi * np.asarray(times_s)[None, None, :] / self.period_s[..., None]
        return 1.0 + np.sum(self.amp[..., None] * np.sin(arg + self.phase[..., None]), axis=1)

    def spectral_factor(self, freqs_hz) -> np.ndarray:
        """Spectrum (n_sat, n_freq), 1 at ref_freq_hz."""
        ratio = np.asarray(freqs_hz)[None, :] / self.ref_freq_hz
        return ratio ** self.spectral_index[:, None]

    def eirp(self, freqs_hz, times_s) -> np.ndarray:
        """EIRP spectral density (W/Hz): (n_sat, n_freq, n_time)."""
        spectrum = self.spectral_factor(freqs_hz)[:, :, None]
        return self.eirp_w_hz[:, None, None] * spectrum * self.time_factor(times_s)[:, None, :]


def _check_times(duration_s: float) -> np.ndarray:
    return np.linspace(0.0, duration_s, 201)


def refuse_invisible(orbits: geo.Orbits, ant_itrf, duration_s, gast0_rad) -> None:
    """Raise SimulationError naming any satellite that never rises during the observation
    (one that rises or sets during it is simulated, its RFI zero while below the horizon)."""
    el = np.rad2deg(geo.satellite_elevation(ant_itrf, orbits, _check_times(duration_s), gast0_rad))
    for s in range(orbits.n_sat):
        lo, hi = el[s].min(), el[s].max()
        if hi < 0:
            raise SimulationError(
                f"satellite '{orbits.label(s)}' never rises during the observation (elevation "
                f"{lo:.1f} to {hi:.1f} deg); change its raan_deg or arg_lat_deg"
            )


def _orbit_through(point, radius_m, incl_rad, ascending, t_mid_s):
    """Elements (raan, arg_lat at t = 0) of the circular orbit through inertial ``point`` at
    ``t_mid_s``, or None if the inclination cannot reach the point's latitude."""
    p = point / np.linalg.norm(point)
    sin_i = np.sin(incl_rad)
    if sin_i < 1e-9 or abs(p[2]) > sin_i:
        return None
    sin_u = p[2] / sin_i
    cos_u = np.sqrt(1 - sin_u**2) * (1 if ascending else -1)
    u = np.arctan2(sin_u, cos_u)
    raan = np.arctan2(p[1], p[0]) - np.arctan2(sin_u * np.cos(incl_rad), cos_u)
    n = np.sqrt(geo.GM_EARTH / radius_m**3)
    return raan % (2 * np.pi), (u - n * t_mid_s) % (2 * np.pi)


def _random_orbit(rng, kind, ant_itrf, duration_s, gast0_rad, s0, cfg):
    altitude, incl_deg = ORBIT_KINDS[kind]
    radius, incl = geo.R_EARTH + altitude, np.deg2rad(incl_deg)
    centre = ant_itrf.mean(axis=0)
    lat, lon, _ = geo.itrf_to_geodetic(centre)
    east = np.array([-np.sin(lon), np.cos(lon), 0.0])
    north = np.array([-np.sin(lat) * np.cos(lon), -np.sin(lat) * np.sin(lon), np.cos(lat)])
    up = geo.geodetic_up(centre)
    theta_mid = geo.gast(duration_s / 2, gast0_rad)
    times = _check_times(duration_s)
    min_el, min_sep = np.deg2rad(cfg["min_elevation_deg"]), np.deg2rad(cfg["min_separation_deg"])
    for _ in range(MAX_DRAWS):
        az = rng.uniform(0, 2 * np.pi)
        el = np.arcsin(rng.uniform(np.sin(min_el), 1.0))
        look = np.cos(el) * (np.sin(az) * east + np.cos(az) * north) + np.sin(el) * up
        c = geo.rotate_z(centre, theta_mid)
        e = geo.rotate_z(look, theta_mid)
        ce = c @ e
        rng_m = -ce + np.sqrt(ce**2 - c @ c + radius**2)
        found = _orbit_through(c + rng_m * e, radius, incl, rng.uniform() < 0.5, duration_s / 2)
        if found is None:
            continue
        orbit = geo.CircularOrbits([altitude], [incl], [found[0]], [found[1]])
        elev = geo.satellite_elevation(ant_itrf, orbit, times, gast0_rad)[0]
        sight = geo.satellite_positions(orbit, times)[0] - geo.rotate_z(
            centre[None], geo.gast(times, gast0_rad)
        )
        sep = np.arccos(np.clip(sight @ s0 / np.linalg.norm(sight, axis=1), -1, 1))
        if elev.min() >= min_el and sep.min() >= min_sep:
            return altitude, incl, found[0], found[1]
    raise SimulationError(
        f"could not place a '{kind}' satellite above {cfg['min_elevation_deg']} deg and "
        f"{cfg['min_separation_deg']} deg from the phase centre for {duration_s:.0f} s in "
        f"{MAX_DRAWS} draws; shorten the observation or relax satellites.min_elevation_deg"
    )


def place_satellites(
    cfg: dict,
    seed: int,
    ant_itrf,
    duration_s,
    gast0_rad,
    ra_rad,
    dec_rad,
    ref_freq_hz,
    epoch_utc=None,
):
    """Orbits and emission of the random and the explicit satellites of ``cfg`` (the
    ``satellites`` section), or of the satellites of its ``tle_file`` for an observation
    starting at ``epoch_utc``; the spectra are normalised at ``ref_freq_hz``.
    Returns (CircularOrbits or TleOrbits, RfiEmission)."""
    rng = np.random.default_rng([seed, STREAM_SATELLITES])
    if cfg.get("tle_file"):
        orbits = _tle_orbits(cfg, epoch_utc, gast0_rad)
        refuse_invisible(orbits, ant_itrf, duration_s, gast0_rad)
        eirp_db = cfg["eirp_dbw_hz"] + cfg["eirp_spread_db"] * rng.normal(size=orbits.n_sat)
        return orbits, _emission(rng, cfg, eirp_db, ref_freq_hz)
    s0 = geo.radec_to_unit(ra_rad, dec_rad)
    elements, names, eirp_db = [], [], []
    kinds = cfg["kinds"] or ["gps"]
    for i in range(cfg["count"]):
        kind = kinds[i % len(kinds)]
        elements.append(_random_orbit(rng, kind, ant_itrf, duration_s, gast0_rad, s0, cfg))
        names.append(f"{kind.upper()}-{i + 1:02d}")
        eirp_db.append(cfg["eirp_dbw_hz"] + cfg["eirp_spread_db"] * rng.normal())
    for given in cfg["orbits"]:
        elements.append(
            (
                given["altitude_m"],
                np.deg2rad(given["inclination_deg"]),
                np.deg2rad(given["raan_deg"]),
                np.deg2rad(given["arg_lat_deg"]),
            )
        )
        names.append(given["name"])
        eirp_db.append(given["eirp_dbw_hz"])
    if len(set(names)) != len(names):
        raise SimulationError(f"satellite names must be unique, got {names}")
    columns = np.array(elements, dtype=np.float64).reshape(-1, 4).T
    orbits = geo.CircularOrbits(*columns, names=tuple(names))
    refuse_invisible(orbits, ant_itrf, duration_s, gast0_rad)
    return orbits, _emission(rng, cfg, eirp_db, ref_freq_hz)


def _tle_orbits(cfg: dict, epoch_utc, gast0_rad):
    """The TLE file's satellites (``cfg["catalogue_numbers"]``, or all), which replace the
    random and explicit circular ones: asking for both is refused."""
    from tabascal.observation.tle import load_tle_orbits

    if cfg["count"] or cfg["orbits"]:
        raise SimulationError(
            f"satellites.tle_file gives the satellites, so satellites.count (here "
            f"{cfg['count']}) must be 0 and satellites.orbits (here {len(cfg['orbits'])}) empty"
        )
    if epoch_utc is None:
        raise SimulationError("a TLE simulation needs the observation's start time")
    return load_tle_orbits(
        cfg["tle_file"], cfg["catalogue_numbers"], epoch_utc, gast0_rad=gast0_rad
    )


def _emission(rng, cfg: dict, eirp_db, ref_freq_hz) -> RfiEmission:
    """Each satellite's EIRP (from ``eirp_db``, dB(W/Hz)) with its spectrum and its slow
    variations drawn from ``rng``."""
    n_sat, n_terms = len(eirp_db), 3
    weights = rng.uniform(-1, 1, (n_sat, n_terms))
    weights /= np.maximum(np.abs(weights).sum(axis=1, keepdims=True), 1e-12)
    return RfiEmission(
        eirp_w_hz=10 ** (np.array(eirp_db, dtype=np.float64) / 10),
        spectral_index=np.full(n_sat, cfg["spectral_index"]),
        ref_freq_hz=ref_freq_hz,
        amp=cfg["variation"] * weights,
        period_s=cfg["variation_period_s"] * (1 + 3 * rng.uniform(size=(n_sat, n_terms))),
        phase=rng.uniform(0, 2 * np.pi, (n_sat, n_terms)),
    )


#: How often a simulated aircraft's track is sampled (s), as ADS-B positions come.
TRACK_STEP_S = 1.0


def straight_flight(given: dict, duration_s: float) -> emitters.Track:
    """The track of an aircraft in straight, level flight (``emitters.aircraft``'s entry
    ``given``): from its position at the start along the great circle of its heading at its
    speed and altitude, sampled every ``TRACK_STEP_S`` from one sample before the start to
    one after the end."""
    lat0, lon0 = np.deg2rad(given["lat_deg"]), np.deg2rad(given["lon_deg"])
    heading = np.deg2rad(given["heading_deg"])
    times = np.arange(-TRACK_STEP_S, duration_s + 2 * TRACK_STEP_S, TRACK_STEP_S)
    # Destination on a sphere of the Earth's radius: the angle travelled, then the standard
    # great-circle formulae.
    angle = given["speed_m_s"] * times / (geo.R_EARTH + given["altitude_m"])
    lat = np.arcsin(np.sin(lat0) * np.cos(angle) + np.cos(lat0) * np.sin(angle) * np.cos(heading))
    lon = lon0 + np.arctan2(
        np.sin(heading) * np.sin(angle) * np.cos(lat0), np.cos(angle) - np.sin(lat0) * np.sin(lat)
    )
    return emitters.Track.from_geodetic(times, lat, lon, np.full(times.size, given["altitude_m"]))


def place_emitters(cfg: dict, seed: int, gast0_rad, duration_s, ref_freq_hz, emission_cfg):
    """The ground transmitters and aircraft of ``cfg`` (the ``emitters`` section) and their
    emission, its spectrum and slow variations set as the satellites' (``emission_cfg``, the
    ``satellites`` section) but drawn from their own random stream, so that adding them leaves
    the satellites' draws as they were. Returns (GroundEmitters or None, AircraftTracks or None,
    RfiEmission or None)."""
    ground_cfg, aircraft_cfg = cfg["ground"], cfg["aircraft"]
    names = [g["name"] for g in ground_cfg] + [a["name"] for a in aircraft_cfg]
    if len(set(names)) != len(names):
        raise SimulationError(f"emitter names must be unique, got {names}")
    ground = aircraft = None
    if ground_cfg:
        ground = emitters.GroundEmitters(
            np.deg2rad([g["lat_deg"] for g in ground_cfg]),
            np.deg2rad([g["lon_deg"] for g in ground_cfg]),
            [g["height_m"] for g in ground_cfg],
            gast0_rad,
            names=[g["name"] for g in ground_cfg],
        )
    if aircraft_cfg:
        tracks = [straight_flight(a, duration_s) for a in aircraft_cfg]
        aircraft = emitters.AircraftTracks(
            tracks, gast0_rad, names=[a["name"] for a in aircraft_cfg]
        )
    if not names:
        return None, None, None
    eirp_db = [g["eirp_dbw_hz"] for g in ground_cfg] + [a["eirp_dbw_hz"] for a in aircraft_cfg]
    rng = np.random.default_rng([seed, STREAM_EMITTERS])
    return ground, aircraft, _emission(rng, emission_cfg, eirp_db, ref_freq_hz)


def joined_emission(first: RfiEmission, second: RfiEmission | None) -> RfiEmission:
    """The emission of two sets of emitters, in order (``first`` alone when ``second`` is
    None)."""
    if second is None:
        return first
    return RfiEmission(
        **{
            f: np.concatenate([getattr(first, f), getattr(second, f)])
            for f in ("eirp_w_hz", "spectral_index", "amp", "period_s", "phase")
        },
        ref_freq_hz=first.ref_freq_hz,
    )
