"""The joint TABASCAL model: sky, RFI from known trajectories and gains, fitted together.

    V_model[b] = g[a1[b]] (V_sky[b] + V_rfi[b]) conj(g[a2[b]])

with ``V_sky`` the per-baseline Fourier Gaussian process (``sky``), ``V_rfi`` the RFI
visibilities of the per-antenna signals (``rfi_signal``) through the ri_kernels operators
(``rfi_vis``) and ``g`` the gains (``gains``). The loss is the negative log posterior per
unflagged complex data point (``likelihood.loss``).

``build`` does all host-side work once: geometry (delays, centre phases, fringe rates), the
grouping of baselines by fine sampling, the components' constants and the initial whitened
parameters. Everything but the per-row arrays follows from the metadata and a few mergeable
data statistics (``data_stats``), so ``abstract_model`` makes the same model from the metadata
alone, with the per-row arrays as ``jax.ShapeDtypeStruct``s, for compiling and sizing every
stage before any data is read. ``predict`` and ``loss`` are pure functions of (params,
constants, data) with the static ``ModelSpec`` closed over, so they jit, differentiate and
shard.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import ri_kernels
from tabascal.config import ConfigError, option_field
from tabascal.model import (
    gains,
    likelihood,
    orbit_corrections,
    rfi_estimate,
    rfi_signal,
    rfi_vis,
    sky,
)
from tabascal.model.data_stats import DataStats, MeanPower
from tabascal.observation import beam, geometry

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
# Integrations over which the fringe start weighs each satellite's estimate against the data
# (``rfi_estimate.source_weights``): 5 keeps the start's RFI error near its least on every
# scenario, where one integration leaves the eight-satellite shell's nearly three times as
# large and 31 the LEO pass's (docs/science.md, "The defaults and why").
WEIGH_WINDOW = 5


@dataclass(frozen=True)
class ModelConfig:
    """Settings of every component, plus the model-wide ones.

    sky_sigma, rfi_sigma: the sky's (Jy) and the RFI signal's (Jy^0.5) prior std per cell;
      None estimates each from the data (``build``).
    fov_radius_deg: radius of the sky field whose fringes the sky prior must follow; None
      takes the station beam's first null at the lowest channel, 1.22 c / (f_min D).
    min_elevation_deg: a satellite contributes nothing where it is at or below this elevation
      at the array centre (0: the horizon); within an integration in which it crosses it, its
      visibilities are averaged over the part above (``satellite_view``).
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


class ModelParams(NamedTuple):
    """orbits: the orbit corrections (``orbit_corrections``), None when the orbits are fixed
    (``orbits.fit: none``, the default): the pytree then has no orbit leaves at all."""

    sky: sky.SkyParams
    rfi: rfi_signal.RfiSignalParams
    gains: gains.GainsParams
    orbits: orbit_corrections.OrbitParams | None = None


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


class Data(NamedTuple):
    """Observed visibilities (n_bl, n_freq, n_time) complex, flags (same, bool), noise (n_bl,)
    or (n_bl, n_freq) std of the real and imaginary parts, and n_points, the number of
    unflagged cells."""

    vis: jax.Array
    flags: jax.Array
    noise: jax.Array
    n_points: jax.Array


class Prediction(NamedTuple):
    """Model visibilities (n_bl, n_freq, n_time): sky and rfi before the gains, model after;
    gains (n_ant, n_freq, n_time) complex."""

    sky: jax.Array
    rfi: jax.Array
    gains: jax.Array
    model: jax.Array


@dataclass(frozen=True)
class Model:
    """Everything ``build`` makes: the static spec, the constants, data and initial params."""

    spec: ModelSpec
    constants: ModelConstants
    data: Data
    params: ModelParams
    info: dict[str, Any]


def predict(params: ModelParams, constants: ModelConstants, spec: ModelSpec) -> Prediction:
    """Sky, RFI and model visibilities and gains for ``params``."""
    v_rfi = predict_rfi(params.rfi, constants, spec, params.orbits)
    v_sky = sky.forward(params.sky, constants.sky)
    g = gains.forward(params.gains, constants.gains)
    model = gains.apply(v_sky + v_rfi, g, constants.a1, constants.a2)
    return Prediction(v_sky, v_rfi, g, model)


class PriorKeys(NamedTuple):
    """The random keys of an ``init: prior`` draw, one per component."""

    rfi: jax.Array
    sky: jax.Array
    gains: jax.Array


def prior_keys(seed: int) -> PriorKeys:
    """The one place the prior draw's keys come from ``seed``: every route that builds a model
    (``build``, ``blockwise.build``) draws the same numbers from the same seed."""
    return PriorKeys(
        rfi=jax.random.key(seed), sky=jax.random.key(seed + 1), gains=jax.random.key(seed + 2)
    )


def loss(params: ModelParams, inputs: tuple[ModelConstants, Data], spec, predict=predict):
    """(loss, {"chi2": reduced chi-squared}) for ``params``; inputs = (constants, data).

    predict(params, constants, spec) -> ``Prediction``: this module's, or a sharded route's
    over its placed ``spec`` (``tabascal.parallel.routes``), whose padded rows are flagged so
    that n_points stays the real data's.
    """
    constants, data = inputs
    model = predict(params, constants, spec).model
    nll = likelihood.neg_log_likelihood(model, data.vis, data.flags, data.noise)
    return posterior(nll, params, data.n_points)


def posterior(nll: jax.Array, params: ModelParams, n_points) -> tuple[jax.Array, dict]:
    """``loss``'s value and aux from the likelihood's -log L ``nll`` at ``params``: the
    negative log posterior per point, and the reduced chi-squared."""
    value = likelihood.loss(nll, (_prior(params),), n_points)
    return value, {"chi2": nll / n_points.astype(nll.dtype)}


def _prior(params: ModelParams) -> jax.Array:
    return (
        sky.prior(params.sky)
        + rfi_signal.prior(params.rfi)
        + gains.prior(params.gains)
        + orbit_corrections.prior(params.orbits)
    )


def gauss_newton(
    params: ModelParams, tangent: ModelParams, inputs, spec, predict=predict
) -> ModelParams:
    """The Gauss-Newton product of ``loss`` at ``params`` with ``tangent``: (J' W J v + P v) / N.

    J is the model's Jacobian (``predict(...).model`` over the parameters), W the likelihood's
    Hessian over the model (1 / noise^2 in every unflagged cell, 0 in flagged ones), P the
    priors' Hessian and N the data's points: the loss's Hessian without the residuals'
    curvature (sum over cells of the residual times the model's second derivative), which
    vanishes where the model meets the data. It is never indefinite. Taken as the model's
    tangent, W on it, then the model's cotangent (a forward pass, then a forward and a reverse
    one): no forward over reverse, whose tangents of the reverse pass's intermediates hold
    the most memory of a Hessian-vector product.
    """
    constants, data = inputs

    def model(p):
        return predict(p, constants, spec).model

    def nll(m):
        return likelihood.neg_log_likelihood(m, data.vis, data.flags, data.noise)

    m, u = jax.jvp(model, (params,), (tangent,))
    weighted = jax.jvp(jax.grad(nll), (m,), (u,))[1]
    pulled = jax.vjp(model, params)[1](weighted)[0]
    return with_prior_curvature(pulled, params, tangent, data.n_points)


def with_prior_curvature(pulled: ModelParams, params, tangent, n_points) -> ModelParams:
    """(J' W J v + P v) / N from the likelihood's part ``pulled`` = J' W J v: the Gauss-Newton
    product's prior term and normalisation (``gauss_newton``)."""
    curved = jax.jvp(jax.grad(_prior), (params,), (tangent,))[1]
    n = jnp.asarray(n_points)
    return jax.tree.map(lambda a, b: (a + b) / n.astype(a.dtype), pulled, curved)


def _fov_radius_rad(config: ModelConfig, meta) -> float:
    if config.fov_radius_deg is not None:
        return float(np.deg2rad(config.fov_radius_deg))
    return float(1.22 * geometry.C / (np.min(meta.freqs_hz) * meta.dish_diameter_m))


def satellites_in_view(meta, config: ModelConfig) -> np.ndarray:
    """(n_sat, n_time) bool: each satellite above ``config.min_elevation_deg`` at the array
    centre at each integration's centre. A satellite in view at no time is left out of the fit
    (its signal is zero throughout), with a warning."""
    if meta.n_sat == 0:
        logger.info("the observation has no satellites: the model is the sky and the gains")
        return np.zeros((0, meta.n_time), bool)
    in_view = _above_min_elevation(meta, config)
    never = np.flatnonzero(~in_view.any(axis=1))
    if never.size:
        names = ", ".join(meta.orbits.label(int(s)) for s in never)
        logger.warning(
            "satellite(s) %s stay at or below %.1f deg elevation for the whole observation: "
            "left out of the fit (no RFI from them)",
            names,
            config.min_elevation_deg,
        )
    return in_view


def _above_min_elevation(meta, config: ModelConfig) -> np.ndarray:
    """(n_sat, n_time) bool: each satellite above ``config.min_elevation_deg`` at the array
    centre at each integration's centre (``satellites_in_view`` without its messages)."""
    elevation = geometry.satellite_elevation(
        meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad
    )
    return elevation > np.deg2rad(config.min_elevation_deg)


# Halvings of an integration in the search for the time a satellite crosses the minimum
# elevation within it: 40 leave 2^-40 of the integration.
_CROSSING_STEPS = 40


def satellite_view(meta, config: ModelConfig) -> np.ndarray | None:
    """The part of each integration in which each satellite is above
    ``config.min_elevation_deg`` at the array centre, as the RFI operators take it: (n_sat,
    n_time, 2) float64 ``[lo, hi]`` in x = 2 (t - t_centre) / int_time, ``lo = hi = 0`` where
    it is below throughout. The crossing time within an integration is found by bisection;
    a satellite is taken to cross at most once per integration. None where every satellite is
    up throughout every integration: the operators then need no view."""
    if meta.n_sat == 0:
        return None
    limit = np.deg2rad(config.min_elevation_deg)
    half = meta.int_time / 2
    times = np.asarray(meta.times_s, np.float64)

    def up(at_s):  # (n_sat, len(at_s)) bool
        elevation = geometry.satellite_elevation(meta.ant_itrf, meta.orbits, at_s, meta.gast0_rad)
        return elevation > limit

    start, end = up(times - half), up(times + half)
    if np.all(start & end):
        return None
    view = np.zeros((meta.n_sat, meta.n_time, 2))
    view[start & end] = (-1.0, 1.0)
    src, cell = np.nonzero(start != end)
    rising = end[src, cell]
    lo, hi = np.full(src.size, -1.0), np.full(src.size, 1.0)  # the crossing lies between
    for _ in range(_CROSSING_STEPS):
        mid = (lo + hi) / 2
        above = up(times[cell] + half * mid)[src, np.arange(src.size)]
        before = above == rising  # the crossing is before mid
        lo, hi = np.where(before, lo, mid), np.where(before, mid, hi)
    crossing = (lo + hi) / 2
    view[src, cell, 0] = np.where(rising, crossing, -1.0)
    view[src, cell, 1] = np.where(rising, 1.0, crossing)
    return view


def stencil_reach(in_view: np.ndarray, n_stencil: int) -> np.ndarray:
    """(n_sat, n_time) bool: the data cells whose signal the time stencil of some integration
    in view (``in_view``, (n_sat, n_time) bool) reads. Where a satellite rises or sets within
    an integration the operators interpolate its signal from cells on both sides, so those
    beyond the horizon keep their values; the view zeroes what they would add there."""
    n_time = in_view.shape[1]
    start = ri_kernels.stencil_starts(n_time, min(n_stencil, n_time))
    reach = np.zeros(in_view.shape[::-1], bool)
    for l in range(min(n_stencil, n_time)):
        np.logical_or.at(reach, start + l, in_view.T)
    return reach.T


def check_observation(obs) -> None:
    """Refuse observations the model cannot fit, before any heavy work (host)."""
    if np.all(obs.flags):
        raise likelihood.DataError("every visibility is flagged: there is nothing to fit")
    likelihood.validate_vis(obs.vis, obs.flags)
    likelihood.resolve_noise(obs.noise, *np.shape(obs.vis)[:2])


def _data(obs, real) -> Data:
    cplx = np.result_type(real, np.complex64)
    vis = np.asarray(obs.vis)
    if not np.iscomplexobj(vis):
        logger.info("data are real (%s); widening to %s", vis.dtype, np.dtype(cplx))
    flags = np.asarray(obs.flags, bool)
    return Data(
        vis=jnp.asarray(np.where(flags, 0, vis).astype(cplx)),
        flags=jnp.asarray(flags),
        noise=jnp.asarray(likelihood.resolve_noise(obs.noise, *vis.shape[:2]), real),
        n_points=jnp.asarray(np.count_nonzero(~flags), jnp.int32),
    )


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


def rfi_time_scales(meta, config: ModelConfig) -> np.ndarray:
    """Correlation time (s) of each satellite's RFI signal, (n_sat,) float64.

    "fixed": ``rfi_signal.corr_time_s`` for all. "geometric": a satellite's amplitude on an
    antenna is the station beam towards it, whose sidelobes are ``theta = c / (f_top D)`` wide
    (D the station diameter, f_top the top of the band); crossing them at the sightline's
    largest angular speed ``omega`` (``geometry.satellite_angular_speed``), the amplitude
    swings with period ``theta / omega``, and a Gaussian kernel of length
    ``theta / (2 pi omega)`` keeps that period's power at exp(-1/2) of the peak. Capped at
    ``corr_time_s``, and at least one integration: the signal lives on the data grid, which
    cannot hold a faster swing (a Gaussian kernel shorter than a cell aliases on it). A LEO
    satellite at 550 km (0.74 deg/s overhead) would need 0.65 s at 150 MHz with 38 m stations,
    so gets the integration time; a GPS satellite (about 0.01 deg/s) about 50 s.
    """
    ceiling = config.rfi_signal.corr_time_s
    # The shared signal's swings across the beam are in its known factor: what is left, the
    # emission, keeps the long time.
    fixed = config.rfi_signal.time_scale == "fixed" or config.rfi_signal.signal == "shared"
    if fixed or meta.n_sat == 0:
        return np.full(meta.n_sat, ceiling)
    return beam_crossing_time_s(meta, ceiling)


def beam_crossing_time_s(meta, ceiling: float) -> np.ndarray:
    """The geometric time scale of ``rfi_time_scales`` (s), (n_sat,): how long each
    satellite's amplitude on an antenna stays put as it crosses the station beam's
    sidelobes, between one integration and ``ceiling``."""
    if meta.n_sat == 0:
        return np.zeros(0)
    omega = geometry.satellite_angular_speed(
        meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad
    ).max(axis=1)
    f_top = float(np.max(meta.freqs_hz)) + meta.chan_width / 2
    theta = geometry.C / (f_top * meta.dish_diameter_m)
    length = theta / (2 * np.pi * np.maximum(omega, 1e-30))
    return np.clip(length, min(meta.int_time, ceiling), ceiling)


def rfi_antenna_factor(meta, in_view: np.ndarray) -> np.ndarray:
    """The shared RFI signal's per-antenna factor, (n_ant, n_sat, n_freq, n_time) float64.

    The satellite's field at antenna a is its emission times the station beam's voltage towards
    it over its distance: b(pi D f sin(theta_a) / c) / r_a, with b the Airy voltage pattern of
    a station of diameter D = ``dish_diameter_m`` tracking the phase centre
    (``observation.beam``), theta_a the satellite's angle from the phase centre and r_a its
    range, at the cell centres. Normalised per satellite to rms 1 over the antennas, channels
    and the times it is in view (``in_view``, (n_sat, n_time) bool; 0 elsewhere), so that the
    shared signal keeps the units and the prior scale of a per-antenna one.
    """
    range_m, sin_off = geometry.satellite_sightlines(
        meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad, meta.ra_rad, meta.dec_rad
    )
    freqs = np.asarray(meta.freqs_hz, np.float64)
    x = beam.beam_x(meta.dish_diameter_m, freqs[None, None, :, None], sin_off[:, :, None, :])
    factor = beam.airy_voltage(x) / range_m[:, :, None, :]
    factor = factor * np.asarray(in_view, bool)[None, :, None, :]
    rms = np.sqrt(np.mean(factor**2, axis=(0, 2, 3)) / np.maximum(np.mean(in_view, axis=1), 1e-30))
    return factor / np.where(rms > 0, rms, 1.0)[None, :, None, None]


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


def _groups(meta, geom: Geometry, snr: float, config: ModelConfig, real, view=None):
    if meta.n_sat == 0:
        return (), (), {}  # no RFI term: predict_rfi gives zeros
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
        )
        for g, spec in enumerate(specs)
    )
    counts = np.bincount(labels, minlength=len(specs))
    sizes = {s.name: int(c) for s, c in zip(specs, counts, strict=True)}
    return specs, tables, sizes


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


def model_frame(meta, config, snr, rfi_level, init, seed, geom: Geometry | None = None) -> Frame:
    """Everything of the model that the metadata ``meta`` and the data statistics fix (host):
    snr sizes the RFI groups' fine sampling, rfi_level scales the RFI prior; ``build``,
    ``abstract_model`` and ``blockwise.build`` add the per-row arrays to it."""
    real = np.dtype(PRECISIONS[config.precision])
    n_ant, n_src, n_freq, n_time = meta.n_ant, meta.n_sat, meta.n_freq, meta.n_time
    geom = observation_geometry(meta, config) if geom is None else geom
    view = satellite_view(meta, config)
    specs, tables, group_sizes = _groups(meta, geom, snr, config, real, view)
    in_view = satellites_in_view(meta, config)
    in_view_fraction = in_view.mean(axis=1)
    if view is not None:  # the signal where the in-view integrations' stencils read it
        in_view_fraction = np.mean(view[..., 1] - view[..., 0], axis=1) / 2
        in_view = stencil_reach(view[..., 1] > view[..., 0], config.rfi_vis.time_stencil)
    corr_time_s = rfi_time_scales(meta, config)
    spec = ModelSpec(meta.n_bl, n_ant, n_src, n_freq, n_time, specs, config.rfi_vis)
    rfi_c = rfi_signal.make_constants(
        config.rfi_signal,
        n_ant,
        n_src,
        n_freq,
        n_time,
        meta.chan_width,
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
        meta.chan_width,
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


def _check_init(init: str) -> None:
    if init not in INITS:
        raise ConfigError(f"init {init!r} is not known; choose one of {', '.join(INITS)}")


def resolve_init(init: str, meta, n_processes: int = 1, *, by_block: bool = False) -> str:
    """The start ``init`` stands for: itself, or for "auto" the fringe start where one
    process holds every row and the estimate's arrays (n_bl x n_src x n_freq x n_time complex)
    are within ``FRINGE_START_MAX_BYTES``, else the data start (the satellites' RFI then starts
    from nothing). by_block: the route reads the rows block by block (the baseline axis), which
    the fringe start would replace by the whole observation in one place; "auto" then keeps
    the data start. meta: the observation's (``n_bl``, ``n_sat``, ``n_freq``, ``n_time``)."""
    _check_init(init)
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


def _rfi_start_params(obs, config: ModelConfig, frame: Frame, init: str, level: float):
    """The RFI signal's starting parameters: the frame's (zeros or a prior draw), or fitted to
    the truth's amplitudes (init "truth") or to the fringe-stopped data's (init "fringe").

    Either is fitted only where the satellite is above the minimum elevation at the
    integration's centre. The model's signal reaches a few integrations further, as far as the
    operators' time stencils read it where the satellite rises or sets, and there it continues
    the signal in view; the truth's amplitude there is zero and the data's estimate noise, and
    fitting those cells made the smooth signal ring: at init "truth" a rising LEO's amplitude
    was 19% off next to its rise, and the noiseless data's misfit 24.2 in reduced chi-squared
    (17% and 15.9 with only the cells out of the stencils' reach left out, 0.0026 with these
    too; benchmarks/gains_bound.py, leo-rising)."""
    if not obs.n_sat or init not in ("truth", "fringe"):
        return frame.rfi
    below = ~_above_min_elevation(obs, config)[None, :, None, :]
    below = np.broadcast_to(below, (obs.n_ant, obs.n_sat, obs.n_freq, obs.n_time))
    if init == "truth":
        return rfi_signal.init_from_estimate(
            frame.constants.rfi_signal, obs.truth.rfi_amp, noise=0.01 * level, flags=below
        )
    c = frame.constants
    # The orbits as the corrections start them (the time-offset search's).
    phase, delay_us = orbit_corrections.corrected(
        frame.orbits, c.orbits, c.phase, c.delay_us, c.freq_mhz
    )
    # Each satellite's per-antenna amplitude is smooth over its beam-crossing time (whatever
    # the signal model's prior): the estimate averages the stopped data over that window.
    window_s = beam_crossing_time_s(obs, config.rfi_signal.corr_time_s)
    estimate = rfi_estimate.estimate_rfi_signal(
        np.asarray(obs.vis),
        np.asarray(obs.flags, bool),
        np.asarray(phase, np.float64),
        np.asarray(delay_us, np.float64),
        np.asarray(obs.a1),
        np.asarray(obs.a2),
        obs.freqs_hz,
        obs.int_time,
        obs.chan_width,
        ref_ant=config.gains.ref_ant,
        window_cells=np.rint(window_s / obs.int_time).astype(int),
    )
    params = rfi_signal.init_from_estimate(c.rfi_signal, estimate, noise=0.05 * level, flags=below)
    if frame.orbits is not None:
        # With orbit corrections fitted the start's delays are provisional: weighed at them, a
        # displaced LEO's estimate was scaled down and the corrections then recovered less
        # (the RFI left 1.98 of the noise against 1.22 unweighed, test_orbit_corrections).
        return params
    # Where the estimate could not separate satellites, it explains the data worse than
    # leaving them out: each satellite's estimate is weighed against the data with the others'.
    per_source = _per_source_rfi(params, frame.constants, frame.spec, frame.orbits)
    weights = rfi_estimate.source_weights(
        np.asarray(obs.vis), np.asarray(obs.flags, bool), per_source, window_cells=WEIGH_WINDOW
    )
    logger.info("fringe start: each satellite's median weight %s", np.median(weights, axis=1))
    estimate = estimate * np.sqrt(weights)[None, :, None, :]
    return rfi_signal.init_from_estimate(c.rfi_signal, estimate, noise=0.05 * level, flags=below)


def _per_source_rfi(rfi_params, constants, spec, orbit_params) -> np.ndarray:
    """Each satellite's RFI visibilities alone, (n_src, n_bl, n_freq, n_time) (host)."""
    alone = jax.jit(predict_rfi, static_argnums=2)  # the satellite's index is traced
    n_src = constants.phase.shape[1]
    return np.stack(
        [np.asarray(alone(rfi_params, constants, spec, orbit_params, r)) for r in range(n_src)]
    )


def build(obs, config: ModelConfig, *, init: str = "data", seed: int = 0) -> Model:
    """Host-side set-up of the model for an observation (see the module docstring).

    obs: a ``tabascal.store.Observation`` (all rows). init: "data" (estimates from the data),
    "fringe" (the same, with each satellite's RFI signal estimated from the fringe-stopped
    data: ``rfi_estimate``), "auto" (``resolve_init``: "fringe" unless the observation is too
    large for it), "prior" (a draw from the prior, with ``seed``) or "truth" (the store's
    truth; only when asked, never by default).

    The work splits in two: the metadata and a few mergeable data statistics
    (``data_stats.DataStats``) fix everything but the per-row arrays (``model_frame``, shared with
    ``abstract_model``); the per-row arrays (data, the sky mean from the data less the initial
    RFI prediction, the sky parameters) follow row by row.
    """
    init = resolve_init(init, obs)
    if init == "truth" and obs.truth is None:
        raise ConfigError("init 'truth' needs a store with a truth group; this one has none")
    check_observation(obs)
    real = np.dtype(PRECISIONS[config.precision])
    data = _data(obs, real)
    flags = np.asarray(obs.flags, bool)
    vis = np.asarray(obs.vis)
    noise = np.asarray(data.noise, np.float64)
    stats = DataStats.from_rows(vis, flags, noise)
    # With no satellites the RFI signal has no elements and its scale is never used.
    level = config.rfi_sigma or (stats.rfi_level(obs.n_sat) if obs.n_sat else 1.0)
    frame = model_frame(obs, config, stats.snr, level, init, seed)
    if frame.orbits is not None and init in FROM_DATA_INITS:
        offsets = orbit_corrections.search_time_offsets(
            vis, flags, obs.a1, obs.a2, obs.freqs_hz, frame.constants.phase, frame.constants.orbits
        )
        frame = frame._replace(orbits=orbit_corrections.init(frame.constants.orbits, offsets))
    rfi_params = _rfi_start_params(obs, config, frame, init, level)
    rfi_start = jax.jit(predict_rfi, static_argnums=2)(
        rfi_params, frame.constants, frame.spec, frame.orbits
    )
    sky_mean = np.asarray(sky.mean_from_data(vis - np.asarray(rfi_start), flags))
    sky_sigma = config.sky_sigma or max(MeanPower.from_rows(sky_mean).rms, stats.noise_median)
    sky_c = sky.make_constants(
        config.sky,
        frame.grid,
        frame.fringe_rate_hz,
        delay_s=frame.sky_delay_s,
        scale=sky_sigma,
        mean=sky_mean if init in FROM_DATA_INITS else 0.0,
        dtype=real,
    )
    sky_params = sky.init(sky_c, prior_keys(seed).sky if init == "prior" else None)
    gains_params = frame.gains
    if init == "truth":
        sky_params = sky.init_from_data(sky_c, obs.truth.sky_vis, noise=0.01 * noise)
        gains_params = gains.init_from_gains(
            frame.constants.gains, obs.truth.gains, config.gains.ref_ant
        )
    info = dict(frame.info, sky_sigma=sky_sigma)
    logger.info("model: %s", info)
    return Model(
        spec=frame.spec,
        constants=frame.constants._replace(sky=sky_c),
        data=data,
        params=ModelParams(sky_params, rfi_params, gains_params, frame.orbits),
        info=info,
    )


def abstract_model(
    meta,
    config: ModelConfig,
    *,
    snr: float,
    rfi_level: float = 1.0,
    sky_sigma: float = 1.0,
    init: str = "data",
    seed: int = 0,
    geom: Geometry | None = None,
    noise_per_channel: bool = False,
) -> Model:
    """The model of an observation with metadata ``meta`` and no visibilities.

    The metadata-derived constants (geometry, RFI groups and their tables, the components'
    constants, the per-antenna parameters) are real arrays, exactly those ``build`` makes for
    the same ``snr`` and ``rfi_level``; the per-row arrays that need the data (``data``, the sky
    constants' ``mean`` and the sky parameters) are ``jax.ShapeDtypeStruct``s. Every stage can
    be lowered and compiled from it with no visibility allocated.

    snr: the RFI signal-to-noise that sizes the fine sampling (``DataStats.snr`` of the data it
    stands for): it fixes the groups, hence the shapes. rfi_level, sky_sigma: prior scales
    (values only, no shapes). init: "data" or "prior" ("truth" needs the data).
    geom: ``observation_geometry(meta, config)`` when already at hand (it is the slow
    part at 512 stations, and the same for every RFI route). noise_per_channel: the data's
    noise is (n_bl, n_freq) rather than (n_bl,).
    """
    _check_init(init)
    if init == "truth":
        raise ValueError("abstract_model: init 'truth' needs the store's truth; use build")
    real = np.dtype(PRECISIONS[config.precision])
    cplx = np.result_type(real, np.complex64)
    frame = model_frame(meta, config, snr, rfi_level, init, seed, geom)
    sky_c = sky.make_constants(
        config.sky,
        frame.grid,
        frame.fringe_rate_hz,
        delay_s=frame.sky_delay_s,
        scale=sky_sigma,
        dtype=real,
    )
    sky_c = sky_c._replace(mean=jax.ShapeDtypeStruct(sky_c.mean.shape, cplx))
    cube = (meta.n_bl, meta.n_freq, meta.n_time)
    data = Data(
        vis=jax.ShapeDtypeStruct(cube, cplx),
        flags=jax.ShapeDtypeStruct(cube, np.bool_),
        noise=jax.ShapeDtypeStruct(cube[:2] if noise_per_channel else cube[:1], real),
        n_points=jax.ShapeDtypeStruct((), np.int32),
    )
    sky_params = sky.SkyParams(
        tuple(jax.ShapeDtypeStruct(shape, real) for shape in sky.param_shapes(sky_c))
    )
    return Model(
        spec=frame.spec,
        constants=frame.constants._replace(sky=sky_c),
        data=data,
        params=ModelParams(sky_params, frame.rfi, frame.gains, frame.orbits),
        info=dict(frame.info, sky_sigma=sky_sigma, abstract=True),
    )


def corrected_signal(constants: ModelConstants, orbit_params):
    """The RFI signal's constants with the shared signal's factor moved with the orbit
    corrections (the constants themselves with fixed orbits or the per-antenna signal)."""
    signal = constants.rfi_signal
    if orbit_params is None:
        return signal
    factor = orbit_corrections.corrected_factor(orbit_params, constants.orbits, signal.factor)
    return signal._replace(factor=factor)


def predict_rfi(
    rfi_params, constants: ModelConstants, spec: ModelSpec, orbit_params=None, source=None
) -> jax.Array:
    """RFI visibilities (n_bl, n_freq, n_time) alone, before the gains; orbit_params: the
    orbit corrections (``ModelParams.orbits``), None for the orbits as given; source: None
    for every satellite's, or one satellite's index (may be traced) for its alone."""
    amp, factor = rfi_signal.forward_parts(rfi_params, corrected_signal(constants, orbit_params))
    if source is not None:
        amp = jnp.where((jnp.arange(amp.shape[1]) == source)[None, :, None, None], amp, 0)
    phase, delay_us = orbit_corrections.corrected(
        orbit_params, constants.orbits, constants.phase, constants.delay_us, constants.freq_mhz
    )
    return rfi_vis.forward(
        amp,
        phase,
        delay_us,
        constants.freq_mhz,
        constants.groups,
        spec.groups,
        spec.n_bl,
        spec.rfi_vis,
        factor,
    )
