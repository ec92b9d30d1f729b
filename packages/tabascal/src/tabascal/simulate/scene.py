"""Everything the simulator draws before computing visibilities: the scene.

Host-side numpy. Every random draw comes from ``numpy.random.default_rng([seed, stream])`` with
one stream per component, so each is reproducible on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from tabascal import __version__
from tabascal.observation import emitters
from tabascal.observation import geometry as geo
from tabascal.observation.beam import first_null_rad
from tabascal.observation.stations import ArrayReference, read_layout, ska_low_like_itrf
from tabascal.simulate.satellites import (
    RfiEmission,
    SimulationError,
    joined_emission,
    place_emitters,
    place_satellites,
)
from tabascal.store import ObservationMeta

JY = 1e-26  # W m^-2 Hz^-1
# random streams of numpy.random.default_rng([seed, stream]); satellites use 2
STREAM_SKY, STREAM_GAINS, STREAM_NOISE, STREAM_FLAGS = 1, 3, 4, 5


@dataclass(frozen=True, eq=False)
class SkyModel:
    """Point sources: ra_rad, dec_rad, flux_ref_jy (at ref_freq_hz), spectral_index: (n_src,)."""

    ra_rad: np.ndarray
    dec_rad: np.ndarray
    flux_ref_jy: np.ndarray
    spectral_index: np.ndarray
    ref_freq_hz: float

    def flux(self, freqs_hz) -> np.ndarray:
        """Flux density (Jy): (n_src, n_freq)."""
        ratio = np.asarray(freqs_hz)[None, :] / self.ref_freq_hz
        return self.flux_ref_jy[:, None] * ratio ** self.spectral_index[:, None]


@dataclass(frozen=True, eq=False)
class Scene:
    """meta: the observation's geometry and grid. sky, rfi: the emitters. gains: (n_ant, n_freq,
    n_time) complex128. noise: scalar, (n_bl,) or, with ``observation.sefd_spectral_index``,
    (n_bl, n_freq) float64 Jy (std of Re and Im). sefd_jy: (n_ant,), at the band centre when
    the SEFD varies across the band.
    """

    meta: ObservationMeta
    sky: SkyModel
    rfi: RfiEmission
    gains: np.ndarray
    noise: float | np.ndarray
    sefd_jy: np.ndarray
    flag_fraction: float
    missing_channels: tuple[int, ...]
    seed: int


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream])


def _stations(cfg: dict) -> np.ndarray:
    ref = ArrayReference(cfg["site_lat_deg"], cfg["site_lon_deg"], cfg["site_height_m"])
    if cfg["layout"] == "file":
        return read_layout(cfg["file"], cfg["file_frame"], ref)[0]
    return ska_low_like_itrf(
        cfg["n_stations"],
        ref,
        max_radius_m=cfg["max_radius_m"],
        station_diameter_m=cfg["dish_diameter_m"],
    )


def _smooth_series(rng, shape, times_s, min_period_s, n_terms=3) -> np.ndarray:
    """Random smooth series of unit standard deviation: shape + (n_time,)."""
    periods = min_period_s * (1 + 3 * rng.uniform(size=(*shape, n_terms)))
    phases = rng.uniform(0, 2 * np.pi, (*shape, n_terms))
    coef = rng.normal(size=(*shape, n_terms + 1))
    waves = np.sin(2 * np.pi * times_s / periods[..., None] + phases[..., None])
    series = coef[..., :1] + np.sum(coef[..., 1:, None] * waves, axis=-2)
    return series / np.sqrt(1 + n_terms / 2)


def _gains(cfg: dict, seed: int, n_ant: int, freqs_hz, times_s) -> np.ndarray:
    shape = (n_ant, len(freqs_hz), len(times_s))
    if not cfg["enabled"]:
        return np.ones(shape, dtype=np.complex128)
    if cfg["ref_ant"] >= n_ant:
        raise SimulationError(f"gains.ref_ant={cfg['ref_ant']} but there are {n_ant} antennas")
    rng = _rng(seed, STREAM_GAINS)
    amp = 1 + cfg["amp_std"] * _smooth_series(rng, (n_ant,), times_s, cfg["drift_period_s"])
    phase = np.deg2rad(cfg["phase_std_deg"]) * _smooth_series(
        rng, (n_ant,), times_s, cfg["drift_period_s"]
    )
    phase[cfg["ref_ant"]] = 0.0
    # a gentle bandpass slope: amplitude changes by amp_std over a 10% fractional bandwidth
    slope = cfg["amp_std"] * rng.normal(size=n_ant) / 0.1
    freq_term = 1 + slope[:, None] * (np.asarray(freqs_hz) / np.mean(freqs_hz) - 1)
    return (freq_term[:, :, None] * amp[:, None, :]) * np.exp(1j * phase)[:, None, :]


def _sky(cfg: dict, seed: int, ra0, dec0, dish_m, freqs_hz) -> SkyModel:
    rng = _rng(seed, STREAM_SKY)
    n = cfg["n_sources"]
    radius = cfg["field_radius_deg"]
    radius = np.deg2rad(radius) if radius is not None else first_null_rad(dish_m, min(freqs_hz))
    r, phi = radius * np.sqrt(rng.uniform(size=n)), rng.uniform(0, 2 * np.pi, n)
    l, m = np.sin(r) * np.sin(phi), np.sin(r) * np.cos(phi)
    nn = np.sqrt(1 - l**2 - m**2)
    dec = np.arcsin(m * np.cos(dec0) + nn * np.sin(dec0))
    ra = ra0 + np.arctan2(l, nn * np.cos(dec0) - m * np.sin(dec0))
    lo, hi, gamma = cfg["flux_min_jy"], cfg["flux_max_jy"], cfg["flux_slope"]
    flux = lo * (1 - rng.uniform(size=n) * (1 - (lo / hi) ** gamma)) ** (-1 / gamma)
    index = cfg["spectral_index"] + cfg["spectral_index_spread"] * rng.normal(size=n)
    given = cfg["sources"]
    return SkyModel(
        ra_rad=np.concatenate([ra, np.deg2rad([s["ra_deg"] for s in given])]),
        dec_rad=np.concatenate([dec, np.deg2rad([s["dec_deg"] for s in given])]),
        flux_ref_jy=np.concatenate([flux, [s["flux_jy"] for s in given]]),
        spectral_index=np.concatenate([index, [s["spectral_index"] for s in given]]),
        ref_freq_hz=cfg["ref_freq_hz"],
    )


def _noise(cfg: dict, seed: int, n_ant: int, a1, a2, freqs_hz):
    """The noise std (a scalar, (n_bl,) with an SEFD spread, (n_bl, n_freq) with a spectral
    index) and the stations' SEFDs (n_ant,): the radiometer equation, sigma = sqrt(SEFD_p
    SEFD_q) / sqrt(2 chan_width int_time), with SEFD(f) = SEFD (f / f_centre)^index: the
    width, not the spacing, is the bandwidth each channel's samples integrate."""
    sefd = cfg["sefd_jy"] * np.exp(cfg["sefd_spread"] * _rng(seed, STREAM_NOISE).normal(size=n_ant))
    scale = 1 / np.sqrt(2 * cfg["chan_width_hz"] * cfg["int_time_s"])
    index = cfg["sefd_spectral_index"]
    if index is not None:
        band = (freqs_hz / np.mean(freqs_hz)) ** index
        per_baseline = np.broadcast_to(np.sqrt(sefd[a1] * sefd[a2]) * scale, (a1.size,))
        return per_baseline[:, None] * band[None, :], sefd
    if cfg["sefd_spread"] == 0:
        return float(cfg["sefd_jy"] * scale), sefd
    return np.sqrt(sefd[a1] * sefd[a2]) * scale, sefd


def build_scene(config: dict) -> Scene:
    """Draw the scene of a validated configuration (see :func:`simulation_config`)."""
    seed, obs = config["seed"], config["observation"]
    ant_itrf = _stations(config["array"])
    n_ant = ant_itrf.shape[0]
    try:
        epoch = datetime.fromisoformat(obs["start_utc"])
    except ValueError:
        raise SimulationError(
            f"observation.start_utc={obs['start_utc']!r} is not an ISO 8601 time"
        ) from None
    epoch = epoch.replace(tzinfo=UTC) if epoch.tzinfo is None else epoch.astimezone(UTC)
    gast0 = geo.greenwich_sidereal_angle(epoch)
    times_s = (np.arange(obs["n_time"]) + 0.5) * obs["int_time_s"]
    spacing = obs["chan_width_hz"] if obs["chan_spacing_hz"] is None else obs["chan_spacing_hz"]
    freqs_hz = obs["freq_start_hz"] + spacing * np.arange(obs["n_freq"])
    if (obs["ra_deg"] is None) != (obs["dec_deg"] is None):
        raise SimulationError("observation.ra_deg and dec_deg must both be given or both null")
    if obs["ra_deg"] is None:
        lat, lon, _ = geo.itrf_to_geodetic(ant_itrf.mean(axis=0))
        ra = float(geo.gast(obs["n_time"] * obs["int_time_s"] / 2, gast0) + lon) % (2 * np.pi)
        dec = float(lat)
    else:
        ra, dec = np.deg2rad(obs["ra_deg"]), np.deg2rad(obs["dec_deg"])
    a1, a2 = np.triu_indices(n_ant, 1)
    dish = config["array"]["dish_diameter_m"]
    duration = obs["n_time"] * obs["int_time_s"]
    ref_freq = config["sky"]["ref_freq_hz"]
    orbits, rfi = place_satellites(
        config["satellites"], seed, ant_itrf, duration, gast0, ra, dec, ref_freq, epoch.isoformat()
    )
    ground, aircraft, emission = place_emitters(
        config["emitters"], seed, gast0, duration, ref_freq, config["satellites"]
    )
    orbits, rfi = emitters.join(orbits, ground, aircraft), joined_emission(rfi, emission)
    meta = ObservationMeta(
        a1=a1.astype(np.int32),
        a2=a2.astype(np.int32),
        ant_itrf=ant_itrf,
        dish_diameter_m=dish,
        times_s=times_s,
        int_time=obs["int_time_s"],
        freqs_hz=freqs_hz,
        chan_width=obs["chan_width_hz"],
        gast0_rad=gast0,
        epoch_utc=epoch.isoformat(),
        ra_rad=ra,
        dec_rad=dec,
        orbits=orbits,
        metadata={"creator": f"tabascal {__version__}", "simulation": config},
    )
    noise, sefd = _noise(obs, seed, n_ant, a1, a2, freqs_hz)
    return Scene(
        meta=meta,
        sky=_sky(config["sky"], seed, ra, dec, dish, freqs_hz),
        rfi=rfi,
        gains=_gains(config["gains"], seed, n_ant, freqs_hz, times_s),
        noise=noise,
        sefd_jy=sefd,
        flag_fraction=obs["flag_fraction"],
        missing_channels=tuple(obs["missing_channels"]),
        seed=seed,
    )
