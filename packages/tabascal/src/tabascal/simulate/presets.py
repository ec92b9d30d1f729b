"""The simulator's configuration schema and its named presets.

A preset is a partial configuration: the schema's defaults fill the rest, and a user's YAML file
and ``--seed`` override it (:func:`simulation_config`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tabascal.config import ConfigError, Option, Section, merge, validate
from tabascal.observation.beam import beam_x, voltage_table
from tabascal.simulate.satellites import ORBIT_KINDS
from tabascal.simulate.scene import build_scene
from tabascal.simulate.simulation import rfi_amplitudes

ORBIT = Section(
    "one satellite's circular orbit, elements at the start of the observation",
    {
        "name": Option(str, "SAT", "name shown by inspect"),
        "altitude_m": Option(float, 20_180e3, "altitude above the equatorial radius", "m", 1e5),
        "inclination_deg": Option(float, 55.0, "orbital inclination", "deg", 0.0, 180.0),
        "raan_deg": Option(float, 0.0, "right ascension of the ascending node", "deg"),
        "arg_lat_deg": Option(float, 0.0, "argument of latitude at the start", "deg"),
        "eirp_dbw_hz": Option(float, -40.0, "EIRP spectral density towards the array", "dB(W/Hz)"),
    },
)

GROUND = Section(
    "one ground transmitter at a fixed position (a broadcast tower, a base station)",
    {
        "name": Option(str, "TX", "name shown by inspect"),
        "lat_deg": Option(float, 0.0, "WGS84 latitude", "deg", -90.0, 90.0),
        "lon_deg": Option(float, 0.0, "WGS84 longitude", "deg", -180.0, 360.0),
        "height_m": Option(float, 0.0, "WGS84 height of the antenna", "m"),
        "eirp_dbw_hz": Option(float, -120.0, "EIRP spectral density towards the array", "dB(W/Hz)"),
    },
)

AIRCRAFT = Section(
    "one aircraft in straight, level flight along a great circle",
    {
        "name": Option(str, "AC", "name shown by inspect"),
        "lat_deg": Option(float, 0.0, "WGS84 latitude at the start", "deg", -90.0, 90.0),
        "lon_deg": Option(float, 0.0, "WGS84 longitude at the start", "deg", -180.0, 360.0),
        "altitude_m": Option(float, 10_000.0, "WGS84 height", "m", 0.0),
        "heading_deg": Option(float, 0.0, "course, clockwise from north", "deg"),
        "speed_m_s": Option(float, 230.0, "speed along the track", "m/s", 0.0),
        "eirp_dbw_hz": Option(float, -100.0, "EIRP spectral density towards the array", "dB(W/Hz)"),
    },
)

SOURCE = Section(
    "one point source",
    {
        "ra_deg": Option(float, 0.0, "right ascension", "deg"),
        "dec_deg": Option(float, 0.0, "declination", "deg", -90.0, 90.0),
        "flux_jy": Option(float, 1.0, "flux density at sky.ref_freq_hz", "Jy", 0.0),
        "spectral_index": Option(float, -0.7, "S proportional to f^index"),
    },
)

SCHEMA = Section(
    "simulation of a satellite-contaminated observation",
    {
        "seed": Option(int, 0, "seed of every random draw", min=0),
        "array": Section(
            "the stations",
            {
                "layout": Option(str, "ska-low", "station layout", choices=("ska-low", "file")),
                "n_stations": Option(int, 16, "stations of the generated layout", min=2),
                "max_radius_m": Option(float, 37_500.0, "radius of the spiral arms", "m", 100.0),
                "file": Option(str, None, "layout file when layout is 'file'", nullable=True),
                "file_frame": Option(str, "enu", "frame of the file", choices=("enu", "itrf")),
                "site_lat_deg": Option(float, -26.82472, "reference latitude", "deg", -90, 90),
                "site_lon_deg": Option(float, 116.76444, "reference longitude", "deg", -180, 360),
                "site_height_m": Option(float, 377.8, "reference height (WGS84)", "m"),
                "dish_diameter_m": Option(float, 38.0, "station diameter (Airy beam)", "m", 1.0),
            },
        ),
        "observation": Section(
            "time and frequency grid, pointing and noise",
            {
                "start_utc": Option(str, "2024-06-21T10:00:00", "start time, ISO 8601 UTC"),
                "n_time": Option(int, 60, "integrations", min=1),
                "int_time_s": Option(float, 2.0, "integration time", "s", 0.01, 3600.0),
                "n_freq": Option(int, 4, "channels", min=1),
                "freq_start_hz": Option(float, 150e6, "centre of the first channel", "Hz", 1e6),
                "chan_width_hz": Option(float, 100e3, "channel width", "Hz", 1.0),
                "chan_spacing_hz": Option(
                    float,
                    None,
                    "step between channel centres, at least the width (channels selected or "
                    "decimated in frequency); null: the width, channels side by side",
                    "Hz",
                    1.0,
                    nullable=True,
                ),
                "ra_deg": Option(
                    float,
                    None,
                    "phase centre; null: zenith at mid-observation",
                    "deg",
                    nullable=True,
                ),
                "dec_deg": Option(
                    float,
                    None,
                    "phase centre; null: zenith at mid-observation",
                    "deg",
                    -90.0,
                    90.0,
                    nullable=True,
                ),
                "sefd_jy": Option(float, 2500.0, "system equivalent flux density", "Jy", 0.0),
                "sefd_spread": Option(
                    float,
                    0.0,
                    "fractional station-to-station SEFD spread (> 0 gives a per-baseline noise)",
                    min=0.0,
                    max=0.5,
                ),
                "sefd_spectral_index": Option(
                    float,
                    None,
                    "SEFD proportional to (f / band centre)^index, giving a noise per baseline "
                    "and channel (0: equal channels, stored per channel); null: the same SEFD "
                    "in every channel",
                    min=-5.0,
                    max=5.0,
                    nullable=True,
                ),
                "flag_fraction": Option(
                    float, 0.0, "fraction of cells flagged at random", min=0.0, max=1.0
                ),
                "missing_channels": Option(
                    list,
                    [],
                    "channels (0 to n_freq - 1) missing from the data, as when cut in "
                    "frequency: flagged with vis 0, their truth kept",
                    items=int,
                ),
            },
        ),
        "sky": Section(
            "point sources through the Airy beam",
            {
                "n_sources": Option(int, 10, "random sources in the field", min=0),
                "flux_min_jy": Option(float, 1.0, "faintest random source", "Jy", 0.0),
                "flux_max_jy": Option(float, 30.0, "brightest random source", "Jy", 0.0),
                "flux_slope": Option(float, 1.5, "N(>S) proportional to S^-slope", min=0.1),
                "spectral_index": Option(float, -0.7, "mean spectral index"),
                "spectral_index_spread": Option(float, 0.2, "its standard deviation", min=0.0),
                "field_radius_deg": Option(
                    float,
                    None,
                    "random sources within this radius; "
                    "null: the beam's first null at the lowest channel",
                    "deg",
                    0.0,
                    90.0,
                    nullable=True,
                ),
                "ref_freq_hz": Option(float, 150e6, "reference frequency of fluxes", "Hz", 1e6),
                "sources": Option(
                    list, [], "explicit sources, added to the random ones", items=SOURCE
                ),
            },
        ),
        "satellites": Section(
            "transmitters on circular orbits (random ones above min_elevation_deg throughout, "
            "explicit ones rising or setting as their orbits take them) or from a TLE file",
            {
                "count": Option(int, 2, "random visible satellites", min=0),
                "kinds": Option(
                    list,
                    ["gps"],
                    "orbit kinds of random ones, used in turn",
                    items=str,
                    choices=tuple(ORBIT_KINDS),
                ),
                "min_elevation_deg": Option(
                    float, 20.0, "lowest elevation of random ones", "deg", 0.0, 89.0
                ),
                "min_separation_deg": Option(
                    float,
                    15.0,
                    "closest approach of random ones to the phase centre",
                    "deg",
                    0.0,
                    90.0,
                ),
                "eirp_dbw_hz": Option(
                    float, -40.0, "mean EIRP spectral density of random ones", "dB(W/Hz)"
                ),
                "eirp_spread_db": Option(float, 3.0, "its standard deviation", "dB", 0.0),
                "spectral_index": Option(float, 0.0, "EIRP proportional to f^index"),
                "variation": Option(
                    float, 0.1, "fractional amplitude of slow EIRP variations", min=0.0, max=0.9
                ),
                "variation_period_s": Option(
                    float, 300.0, "shortest period of the variations", "s", 1.0
                ),
                "orbits": Option(
                    list, [], "explicit satellites, added to the random ones", items=ORBIT
                ),
                "tle_file": Option(
                    str,
                    None,
                    "TLE file whose satellites are simulated (propagated with SGP4) instead of "
                    "random and explicit circular orbits; each gets eirp_dbw_hz and its spread",
                    nullable=True,
                ),
                "catalogue_numbers": Option(
                    list,
                    None,
                    "NORAD catalogue numbers to take from tle_file; null takes every satellite "
                    "in it",
                    items=int,
                    nullable=True,
                ),
                "orbit_error": Section(
                    "the error of the orbits handed to a fit: the store keeps the simulated "
                    "(true) orbits and these offsets, and a fit reads the orbits displaced by "
                    "them (every satellite alike)",
                    {
                        "time_offset_s": Option(
                            float,
                            0.0,
                            "along-track time offset: the handed satellite is "
                            "where the true one is this much later",
                            "s",
                        ),
                        "radial_m": Option(float, 0.0, "radial position offset", "m"),
                        "in_track_m": Option(float, 0.0, "in-track position offset", "m"),
                        "cross_track_m": Option(float, 0.0, "cross-track position offset", "m"),
                    },
                ),
            },
        ),
        "emitters": Section(
            "emitters beside the satellites whose paths are known: their emission's spectrum "
            "and slow variations are set as the satellites' (satellites.spectral_index, "
            "variation, variation_period_s)",
            {
                "ground": Option(list, [], "ground transmitters", items=GROUND),
                "aircraft": Option(list, [], "aircraft", items=AIRCRAFT),
            },
        ),
        "gains": Section(
            "smooth complex antenna gains",
            {
                "enabled": Option(bool, True, "false: unit gains"),
                "amp_std": Option(float, 0.05, "fractional amplitude spread", min=0.0, max=0.5),
                "phase_std_deg": Option(float, 10.0, "phase spread", "deg", 0.0, 180.0),
                "drift_period_s": Option(float, 1800.0, "shortest period of the drifts", "s", 1.0),
                "ref_ant": Option(int, 0, "antenna whose phase is zero", min=0),
            },
        ),
        "simulation": Section(
            "numerical settings",
            {
                "chunk_rows": Option(
                    int, None, "baselines per store chunk; null: ~16 MiB", min=1, nullable=True
                ),
                "memory_mb": Option(
                    float,
                    1024.0,
                    "working-memory budget; larger cubes go through a scratch store on disk",
                    "MB",
                    0.001,
                ),
            },
        ),
    },
)

PRESETS: dict[str, dict] = {
    # 16 stations within ~1.5 km, two GNSS satellites, 4 x 100 kHz, 60 x 2 s: seconds on a CPU.
    "demo": {
        "seed": 1,
        "array": {"n_stations": 16, "max_radius_m": 1500.0},
        "observation": {"n_time": 60, "int_time_s": 2.0, "n_freq": 4, "chan_width_hz": 100e3},
        "sky": {"n_sources": 12, "flux_min_jy": 2.0, "flux_max_jy": 50.0},
        "satellites": {"count": 2, "kinds": ["gps", "galileo"], "eirp_dbw_hz": -40.0},
    },
    # Benchmark sizes: GNSS satellites keep the RFI fringe winding per cell in the range the
    # model's hybrid operator is built for.
    "bench-96": {
        "seed": 96,
        "array": {"n_stations": 96},
        "observation": {"n_time": 90, "int_time_s": 10.0, "n_freq": 1, "chan_width_hz": 10e3},
        "sky": {"n_sources": 50},
        "satellites": {"count": 32, "kinds": ["gps", "galileo", "glonass", "beidou"]},
    },
    "bench-512": {
        "seed": 512,
        "array": {"n_stations": 512},
        "observation": {"n_time": 150, "int_time_s": 4.0, "n_freq": 8, "chan_width_hz": 10e3},
        "sky": {"n_sources": 50},
        "satellites": {"count": 32, "kinds": ["gps", "galileo", "glonass", "beidou"]},
    },
    # An observation of real size: 64 stations within 5 km, 10 minutes at 2 s, 32 channels of
    # 100 kHz (2016 x 32 x 300 = 19.4 million visibilities), four GNSS satellites and four
    # LEO passes (550 km at 53 degrees, 800 km sun-synchronous) peaking 71 to 83 degrees up,
    # one of them setting 22 s before the end.
    "array-64": {
        "seed": 64,
        "array": {"n_stations": 64, "max_radius_m": 5000.0},
        "observation": {"n_time": 300, "int_time_s": 2.0, "n_freq": 32, "chan_width_hz": 100e3},
        "sky": {"n_sources": 30},
        "satellites": {
            "count": 4,
            "kinds": ["gps", "galileo", "glonass", "beidou"],
            "eirp_dbw_hz": -45.0,
            "orbits": [
                {
                    "name": "LEO-1",
                    "altitude_m": 550e3,
                    "inclination_deg": 53.0,
                    "raan_deg": 337.8,
                    "arg_lat_deg": 193.82,
                    "eirp_dbw_hz": -65.0,
                },
                {
                    "name": "LEO-2",
                    "altitude_m": 800e3,
                    "inclination_deg": 98.6,
                    "raan_deg": 171.47,
                    "arg_lat_deg": 323.32,
                    "eirp_dbw_hz": -65.0,
                },
                {
                    "name": "LEO-3",
                    "altitude_m": 550e3,
                    "inclination_deg": 53.0,
                    "raan_deg": 199.07,
                    "arg_lat_deg": 313.92,
                    "eirp_dbw_hz": -65.0,
                },
                {
                    "name": "LEO-4",
                    "altitude_m": 800e3,
                    "inclination_deg": 98.6,
                    "raan_deg": 0.47,
                    "arg_lat_deg": 182.05,
                    "eirp_dbw_hz": -65.0,
                },
            ],
        },
    },
    # bench-512's observation on 2048 stations (2096128 baselines): for planning and the
    # memory benchmark from abstract shapes, not for simulating on one machine.
    "bench-2048": {
        "seed": 2048,
        "array": {"n_stations": 2048},
        "observation": {"n_time": 150, "int_time_s": 4.0, "n_freq": 8, "chan_width_hz": 10e3},
        "sky": {"n_sources": 50},
        "satellites": {"count": 32, "kinds": ["gps", "galileo", "glonass", "beidou"]},
    },
}


def simulation_config(
    preset: str | None = None, overrides: Mapping | None = None, seed: int | None = None
) -> dict:
    """A validated configuration: schema defaults, then ``preset``, ``overrides``, ``seed``."""
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    config = merge(PRESETS.get(preset, {}), overrides)
    if seed is not None:
        config["seed"] = seed
    config = validate(SCHEMA, config)
    if config["array"]["layout"] == "file" and not config["array"]["file"]:
        raise ConfigError("config key 'array.file' must name a layout file when layout is 'file'")
    if config["sky"]["flux_max_jy"] < config["sky"]["flux_min_jy"]:
        raise ConfigError("config key 'sky.flux_max_jy' must be at least sky.flux_min_jy")
    obs = config["observation"]
    if obs["chan_spacing_hz"] is not None and obs["chan_spacing_hz"] < obs["chan_width_hz"]:
        raise ConfigError(
            f"config key 'observation.chan_spacing_hz' = {obs['chan_spacing_hz']:g} Hz is less "
            f"than the channel width observation.chan_width_hz = {obs['chan_width_hz']:g} Hz: "
            "the channels would overlap; give a spacing of at least the width, or null for "
            "channels side by side"
        )
    missing = obs["missing_channels"]
    if len(set(missing)) != len(missing) or not all(0 <= c < obs["n_freq"] for c in missing):
        raise ConfigError(
            f"config key 'observation.missing_channels' = {missing} must name channels 0 to "
            f"{obs['n_freq'] - 1} (observation.n_freq = {obs['n_freq']}), each once"
        )
    if len(missing) >= obs["n_freq"]:
        raise ConfigError(
            "config key 'observation.missing_channels' names every channel: leave some in the data"
        )
    return config


def observation_scene(preset: str | None = None, overrides: Mapping | None = None, seed=None):
    """The scene of a preset (geometry, emitters, gains, noise) drawn without simulating any
    visibility: what a benchmark or a memory estimate needs at sizes too large to simulate."""
    return build_scene(simulation_config(preset, overrides, seed))


def observation_meta(preset: str | None = None, overrides: Mapping | None = None, seed=None):
    """The ``ObservationMeta`` a simulation of the preset would write (no visibilities)."""
    return observation_scene(preset, overrides, seed).meta


def expected_snr(scene) -> float:
    """Upper estimate of ``DataStats.snr`` (largest unflagged |V| over the smallest noise) for
    data simulated from ``scene``, from the emitters alone.

    No cross-correlation's RFI exceeds sum_s max_a |A[a, s]|^2 (the truth amplitudes, beam and
    spectrum included) nor its sky the total flux; the noise adds a 6-sigma excursion (the
    largest of ~1e9 draws).
    """
    m = scene.meta
    table = voltage_table(beam_x(m.dish_diameter_m, m.freqs_hz.max() + m.chan_width, 1.0))
    amp = rfi_amplitudes(scene, table).astype(np.float64)  # (n_ant, n_sat, n_freq, n_time)
    rfi_peak = np.max(np.sum(np.max(amp**2, axis=0), axis=0))
    sky_peak = np.max(np.sum(scene.sky.flux(m.freqs_hz), axis=0), initial=0.0)
    noise_min = float(np.min(scene.noise))
    return float((rfi_peak + sky_peak) / noise_min + 6.0)
