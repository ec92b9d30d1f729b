"""The model's frame: everything of the TABASCAL model that the observation's metadata and a
few data statistics fix, before any visibility is read (host).

The settings (``ModelConfig``, the precisions and the starts, ``INITS``), the static spec that
``predict`` closes over (``ModelSpec``), the arrays it reads (``ModelConstants``): the geometry
(delays, centre phases, fringe rates: ``observation_geometry``), the baselines grouped by the
fine sampling their RFI needs (``rfi_groups``), each satellite's view and time scales
(``satellites``), and the RFI signal's and gains' constants and starting parameters.
``model_frame`` makes them; ``joint.build``, ``joint.abstract_model`` and ``blockwise.build``
add the per-row arrays (data, sky mean, sky parameters).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import ConfigError, option_field
from tabascal.model import gains, orbit_corrections, rfi_signal, rfi_vis, sky
from tabascal.model.satellites import (
    rfi_antenna_factor,
    rfi_time_scales,
    satellite_view,
    signal_in_view,
)
from tabascal.observation import geometry

logger = logging.getLogger(__name__)

# "fringe": "data", with the RFI signal from the fringe-stopped data (rfi_estimate); it needs
# every row in one process, as "truth" does. "auto": "fringe" where that holds and the
# estimate's arrays are small enough (``resolve_init``), "data" otherwise.
INITS = ("data", "prior", "truth", "fringe", "auto")
# Largest of the fringe estimate's (n_bl, n_src, n_freq, n_time) complex arrays that init
# "auto" takes on the host (it holds a few of them at once).
FRINGE_START_MAX_BYTES = 512 * 2**20
WHOLE_OBSERVATION_INITS = ("truth", "fringe")
FROM_DATA_INITS = ("data", "fringe", "auto")  # the priors' means start from the data
PRECISIONS = {"single": np.float32, "double": np.float64}


@dataclass(frozen=True)
class ModelConfig:
    """Settings of every component, plus the model-wide ones.

    sky_sigma, rfi_sigma: the sky's (Jy) and the RFI signal's (Jy^0.5) prior std per cell;
      None estimates each from the data (``joint.build``).
    fov_radius_deg: radius of the sky field whose fringes the sky prior must follow; None
      takes the station beam's first null at the lowest channel, 1.22 c / (f_min D).
    min_elevation_deg: a satellite contributes nothing where it is at or below this elevation
      at the array centre (0: the horizon); within an integration in which it crosses it, its
      visibilities are averaged over the part above (``satellites.satellite_view``).
    precision: "single" (complex64) or "double" (complex128).
    """

    sky: sky.SkyConfig = field(default_factory=sky.SkyConfig)
    rfi_signal: rfi_signal.RfiSignalConfig = field(default_factory=rfi_signal.RfiSignalConfig)
    rfi_vis: rfi_vis.RfiVisConfig = field(default_factory=rfi_vis.RfiVisConfig)
    gains: gains.GainsConfig = field(default_factory=gains.GainsConfig)
    orbits: orbit_corrections.OrbitFitConfig = field(
        default_factory=orbit_corrections.OrbitFitConfig
    )
    sky_sigma: float | None = option_field(
        None, "prior std per cell; null estimates it from the data", "Jy", min=0.0
    )
    rfi_sigma: float | None = option_field(
        None,
        "prior std of the signal per cell; null estimates it from the data",
        "Jy^0.5",
        min=0.0,
    )
    fov_radius_deg: float | None = option_field(
        None,
        "radius of the field whose fringes the sky follows; null = the station beam's "
        "first null at the lowest channel",
        "deg",
        min=0.0,
        max=90.0,
    )
    min_elevation_deg: float = option_field(
        0.0,
        "a satellite contributes no RFI where it is at or below this elevation at the array centre",
        "deg",
        min=-90.0,
        max=90.0,
    )
    precision: str = option_field(
        "single", "float precision of the model", choices=tuple(PRECISIONS)
    )


def check_init(init: str) -> None:
    """Refuse an ``init`` that is not one of ``INITS``."""
    if init not in INITS:
        raise ConfigError(f"init {init!r} is not known; choose one of {', '.join(INITS)}")


def resolve_init(init: str, meta, n_processes: int = 1, *, by_block: bool = False) -> str:
    """The start ``init`` stands for: itself, or for "auto" the fringe start where one
    process holds every row and the estimate's arrays (n_bl x n_src x n_freq x n_time complex)
    are within ``FRINGE_START_MAX_BYTES``, else the data start (the satellites' RFI then starts
    from nothing). by_block: the route reads the rows block by block (the baseline axis), which
    the fringe start would replace by the whole observation in one place; "auto" then keeps
    the data start. meta: the observation's (``n_bl``, ``n_sat``, ``n_freq``, ``n_time``)."""
    check_init(init)
    if init != "auto":
        return init
    size = 16 * meta.n_bl * max(meta.n_sat, 1) * meta.n_freq * meta.n_time
    if n_processes == 1 and not by_block and size <= FRINGE_START_MAX_BYTES:
        return "fringe"
    if n_processes > 1:
        why = f"{n_processes} processes each read only their own rows"
    elif by_block:
        why = "the route reads the rows block by block"
    else:
        why = f"its arrays would take {size / 2**30:.1f} GiB each"
    logger.info("init auto: the data start, not the fringe start (%s)", why)
    return "data"


@dataclass(frozen=True)
class ModelSpec:
    """Static shapes and settings that ``predict`` and ``loss`` close over (hashable)."""

    n_bl: int
    n_ant: int
    n_src: int
    n_freq: int
    n_time: int
    groups: tuple[rfi_vis.GroupSpec, ...]
    rfi_vis: rfi_vis.RfiVisConfig


class ModelConstants(NamedTuple):
    """Arrays ``predict`` reads. a1, a2: (n_bl,) int32. phase: (n_ant, n_src, n_freq, n_time)
    centre phases (rad); delay_us: (n_ant, n_src, n_time, 4); freq_mhz: (n_freq,); orbits:
    the orbit corrections' constants, None with fixed orbits."""

    sky: sky.SkyConstants
    rfi_signal: rfi_signal.RfiSignalConstants
    gains: gains.GainsConstants
    groups: tuple[rfi_vis.GroupTables, ...]
    phase: jax.Array
    delay_us: jax.Array
    freq_mhz: jax.Array
    a1: jax.Array
    a2: jax.Array
    orbits: orbit_corrections.OrbitConstants | None = None


class Frame(NamedTuple):
    """The model set up from metadata and the scalar data statistics: everything but the
    per-row arrays (data, sky mean and sky parameters). constants.sky is None."""

    spec: ModelSpec
    constants: ModelConstants
    grid: sky.SkyGrid
    fringe_rate_hz: np.ndarray
    sky_delay_s: np.ndarray
    rfi: rfi_signal.RfiSignalParams
    gains: gains.GainsParams
    info: dict[str, Any]
    orbits: orbit_corrections.OrbitParams | None = None


class PriorKeys(NamedTuple):
    """The random keys of an ``init: prior`` draw, one per component."""

    rfi: jax.Array
    sky: jax.Array
    gains: jax.Array


def prior_keys(seed: int) -> PriorKeys:
    """The one place the prior draw's keys come from ``seed``: every route that builds a model
    (``joint.build``, ``blockwise.build``) draws the same numbers from the same seed."""
    return PriorKeys(
        rfi=jax.random.key(seed), sky=jax.random.key(seed + 1), gains=jax.random.key(seed + 2)
    )


def _fov_radius_rad(config: ModelConfig, meta) -> float:
    if config.fov_radius_deg is not None:
        return float(np.deg2rad(config.fov_radius_deg))
    return float(1.22 * geometry.C / (np.min(meta.freqs_hz) * meta.dish_diameter_m))


class Geometry(NamedTuple):
    """What the model derives from the observation's metadata alone (host, float64).

    delay_us: (n_ant, n_src, n_time, 4) RFI delays and their time derivatives; phase: (n_ant,
    n_src, n_freq, n_time) centre phases (rad); time_cycles, freq_cycles: (n_bl,) largest RFI
    fringe winding per cell; sky_fringe_rate_hz, sky_delay_s: (n_bl,) largest sky fringe rate
    (Hz) and delay (s) in the field of radius fov_radius_rad.
    """

    delay_us: np.ndarray
    phase: np.ndarray
    time_cycles: np.ndarray
    freq_cycles: np.ndarray
    sky_fringe_rate_hz: np.ndarray
    fov_radius_rad: float
    sky_delay_s: np.ndarray


def observation_geometry(meta, config: ModelConfig) -> Geometry:
    """Delays, phases and fringe rates of ``meta`` (an ``ObservationMeta`` or ``Observation``);
    with no satellites the RFI arrays are empty and the windings zero."""
    if meta.orbits.n_sat == 0:
        delay_us = np.zeros((meta.n_ant, 0, meta.n_time, 4))
        time_cycles = freq_cycles = np.zeros(meta.n_bl)
    else:
        delay_us = geometry.rfi_delays(
            meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad, meta.ra_rad, meta.dec_rad, 3
        )
        time_cycles, freq_cycles = geometry.rfi_fringe_winding(
            delay_us, meta.a1, meta.a2, meta.freqs_hz, meta.int_time, meta.chan_width
        )
    fov = _fov_radius_rad(config, meta)
    baselines = (meta.ant_itrf, meta.a1, meta.a2, meta.times_s, meta.gast0_rad)
    centre = (meta.ra_rad, meta.dec_rad)
    return Geometry(
        delay_us,
        geometry.centre_phase(delay_us, meta.freqs_hz),
        time_cycles,
        freq_cycles,
        geometry.max_sky_fringe_rate(*baselines, *centre, meta.freqs_hz, fov),
        fov,
        geometry.max_sky_delay_s(*baselines, *centre, fov),
    )


def _fitted_spec(spec, members, meta, geom: Geometry, snr: float, config: ModelConfig, real):
    """``spec`` with an analytic group's cubic terms and pieces fitted to its own phases."""
    if spec.operator != "analytic":
        return spec
    a1, a2 = np.asarray(meta.a1), np.asarray(meta.a2)
    antennas = np.unique(np.concatenate([a1[members], a2[members]]))
    cubic, curvature = (
        bound(geom.delay_us, antennas, meta.freqs_hz, meta.chan_width, meta.int_time)
        for bound in (rfi_vis.cubic_phase_bound, rfi_vis.curvature_phase_bound)
    )
    rate = rfi_vis.rate_phase_bound(geom.delay_us, antennas, meta.chan_width, meta.int_time)
    low = float(np.min(meta.freqs_hz)) - meta.chan_width / 2
    ratio = meta.chan_width / 2 / low if low > 0 else math.inf
    return rfi_vis.analytic_spec(spec, cubic, snr, config.rfi_vis, real, curvature, rate, ratio)


def rfi_groups(meta, geom: Geometry, snr: float, config: ModelConfig, real, view=None):
    """The baselines grouped by the fine sampling their RFI needs (``rfi_vis.plan_groups``):
    each group's static spec, its tables, and the number of baselines in each group by name.
    view: ``satellites.satellite_view``, or None where every satellite is up throughout."""
    if meta.n_sat == 0:
        return (), (), {}  # no RFI term: joint.predict_rfi gives zeros
    labels, specs = rfi_vis.plan_groups(geom.time_cycles, geom.freq_cycles, snr, config.rfi_vis)
    specs = tuple(
        _fitted_spec(spec, labels == g, meta, geom, snr, config, real)
        for g, spec in enumerate(specs)
    )
    tables = tuple(
        rfi_vis.make_group_tables(
            spec,
            np.flatnonzero(labels == g),
            np.asarray(meta.a1),
            np.asarray(meta.a2),
            meta.n_ant,
            meta.n_freq,
            meta.n_time,
            meta.chan_width,
            meta.int_time,
            config.rfi_vis,
            real,
            view=view,
            chan_spacing=meta.chan_spacing,
        )
        for g, spec in enumerate(specs)
    )
    counts = np.bincount(labels, minlength=len(specs))
    sizes = {s.name: int(c) for s, c in zip(specs, counts, strict=True)}
    return specs, tables, sizes


def _rfi_signal_constants(meta, config, rfi_level, init, corr_time_s, in_view, real):
    """The RFI signal's constants: prior scale ``rfi_level``, its mean too where the start is
    from the data, correlation times ``corr_time_s`` (s, (n_sat,)), the cells ``in_view`` and,
    for the shared signal, the per-antenna factor."""
    return rfi_signal.make_constants(
        config.rfi_signal,
        meta.n_ant,
        meta.n_sat,
        meta.n_freq,
        meta.n_time,
        meta.chan_spacing,
        meta.int_time,
        scale=rfi_level,
        mean=rfi_level if init in FROM_DATA_INITS else 0.0,
        corr_time_s=corr_time_s,
        in_view=in_view,
        factor=(
            rfi_antenna_factor(meta, in_view) if config.rfi_signal.signal == "shared" else None
        ),
        dtype=real,
    )


def model_frame(meta, config, snr, rfi_level, init, seed, geom: Geometry | None = None) -> Frame:
    """Everything of the model that the metadata ``meta`` and the data statistics fix (host):
    snr sizes the RFI groups' fine sampling, rfi_level scales the RFI prior; ``joint.build``,
    ``joint.abstract_model`` and ``blockwise.build`` add the per-row arrays to it."""
    real = np.dtype(PRECISIONS[config.precision])
    n_ant, n_src, n_freq, n_time = meta.n_ant, meta.n_sat, meta.n_freq, meta.n_time
    geom = observation_geometry(meta, config) if geom is None else geom
    view = satellite_view(meta, config)
    specs, tables, group_sizes = rfi_groups(meta, geom, snr, config, real, view)
    in_view, in_view_fraction = signal_in_view(meta, config, view)
    corr_time_s = rfi_time_scales(meta, config)
    spec = ModelSpec(meta.n_bl, n_ant, n_src, n_freq, n_time, specs, config.rfi_vis)
    rfi_c = _rfi_signal_constants(meta, config, rfi_level, init, corr_time_s, in_view, real)
    gains_c = gains.make_constants(config.gains, n_ant, n_freq, n_time, meta.int_time, dtype=real)
    constants = ModelConstants(
        sky=None,
        rfi_signal=rfi_c,
        gains=gains_c,
        groups=tables,
        phase=jnp.asarray(geom.phase, real),
        delay_us=jnp.asarray(geom.delay_us, real),
        freq_mhz=jnp.asarray(meta.freqs_hz * 1e-6, real),
        a1=jnp.asarray(meta.a1, jnp.int32),
        a2=jnp.asarray(meta.a2, jnp.int32),
        orbits=orbit_corrections.make_constants(
            config.orbits,
            meta,
            real,
            factor=(
                (lambda m: rfi_antenna_factor(m, in_view))
                if config.rfi_signal.signal == "shared"
                else None
            ),
        ),
    )
    grid = sky.make_grid(
        config.sky,
        geom.sky_fringe_rate_hz,
        n_freq,
        n_time,
        meta.chan_spacing,
        meta.int_time,
        delay_s=geom.sky_delay_s,
    )
    info = {
        "rfi_groups": group_sizes,
        "rfi_analytic_options": rfi_vis.analytic_options_report(specs, config.rfi_vis),
        "sky_groups": sky.group_sizes(grid),
        "rfi_snr": snr,
        "rfi_level": rfi_level,
        "rfi_corr_time_s": [float(t) for t in corr_time_s],
        "rfi_in_view_fraction": [float(f) for f in in_view_fraction],
        "sky_modes": [grid.half_freq * 2 + 1, grid.half_time * 2 + 1],
        "fov_radius_deg": float(np.rad2deg(geom.fov_radius_rad)),
    }
    return Frame(
        spec,
        constants,
        grid,
        geom.sky_fringe_rate_hz,
        geom.sky_delay_s,
        rfi_signal.init(rfi_c, prior_keys(seed).rfi if init == "prior" else None),
        gains.init(gains_c, prior_keys(seed).gains if init == "prior" else None),
        info,
        orbit_corrections.init(constants.orbits),
    )
