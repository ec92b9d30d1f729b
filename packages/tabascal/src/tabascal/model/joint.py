"""The joint TABASCAL model: sky, RFI from known trajectories and gains, fitted together.

    V_model[b] = g[a1[b]] (V_sky[b] + V_rfi[b]) conj(g[a2[b]])

with ``V_sky`` the per-baseline Fourier Gaussian process (``sky``), ``V_rfi`` the RFI
visibilities of the per-antenna signals (``rfi_signal``) through the ri_kernels operators
(``rfi_vis``) and ``g`` the gains (``gains``). The loss is the negative log posterior per
unflagged complex data point (``likelihood.loss``).

``build`` does all host-side work once: geometry (delays, centre phases, fringe rates), the
grouping of baselines by fine sampling, the components' constants and the initial whitened
parameters. ``predict`` and ``loss`` are pure functions of (params, constants, data) with the
static ``ModelSpec`` closed over, so they jit, differentiate and shard.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal import geometry
from tabascal.model import gains, likelihood, rfi_signal, rfi_vis, sky

logger = logging.getLogger(__name__)

INITS = ("data", "prior", "truth")
PRECISIONS = {"single": np.float32, "double": np.float64}


@dataclass(frozen=True)
class ModelConfig:
    """Settings of every component, plus the model-wide ones.

    fov_radius_deg: radius of the sky field whose fringes the sky prior must follow; None
      takes the station beam's first null at the lowest channel, 1.22 c / (f_min D).
    precision: "single" (complex64) or "double" (complex128).
    """

    sky: sky.SkyConfig = field(default_factory=sky.SkyConfig)
    rfi_signal: rfi_signal.RfiSignalConfig = field(default_factory=rfi_signal.RfiSignalConfig)
    rfi_vis: rfi_vis.RfiVisConfig = field(default_factory=rfi_vis.RfiVisConfig)
    gains: gains.GainsConfig = field(default_factory=gains.GainsConfig)
    sky_sigma: float | None = None
    rfi_sigma: float | None = None
    fov_radius_deg: float | None = None
    precision: str = "single"


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
    sky: sky.SkyParams
    rfi: rfi_signal.RfiSignalParams
    gains: gains.GainsParams


class ModelConstants(NamedTuple):
    """Arrays ``predict`` reads. a1, a2: (n_bl,) int32. phase: (n_ant, n_src, n_freq, n_time)
    centre phases (rad); delay_us: (n_ant, n_src, n_time, 4); freq_mhz: (n_freq,)."""

    sky: sky.SkyConstants
    rfi_signal: rfi_signal.RfiSignalConstants
    gains: gains.GainsConstants
    groups: tuple[rfi_vis.GroupTables, ...]
    phase: jax.Array
    delay_us: jax.Array
    freq_mhz: jax.Array
    a1: jax.Array
    a2: jax.Array


class Data(NamedTuple):
    """Observed visibilities (n_bl, n_freq, n_time) complex, flags (same, bool), noise (n_bl,)
    std of the real and imaginary parts, and n_points, the number of unflagged cells."""

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
    v_rfi = predict_rfi(params.rfi, constants, spec)
    v_sky = sky.forward(params.sky, constants.sky)
    g = gains.forward(params.gains, constants.gains)
    model = gains.apply(v_sky + v_rfi, g, constants.a1, constants.a2)
    return Prediction(v_sky, v_rfi, g, model)


def loss(params: ModelParams, inputs: tuple[ModelConstants, Data], spec: ModelSpec):
    """(loss, {"chi2": reduced chi-squared}) for ``params``; inputs = (constants, data)."""
    constants, data = inputs
    model = predict(params, constants, spec).model
    nll = likelihood.neg_log_likelihood(model, data.vis, data.flags, data.noise)
    priors = (sky.prior(params.sky), rfi_signal.prior(params.rfi), gains.prior(params.gains))
    value = likelihood.loss(nll, priors, data.n_points)
    return value, {"chi2": nll / data.n_points.astype(nll.dtype)}


def _fov_radius_rad(config: ModelConfig, obs) -> float:
    if config.fov_radius_deg is not None:
        return float(np.deg2rad(config.fov_radius_deg))
    return float(1.22 * geometry.C / (np.min(obs.freqs_hz) * obs.dish_diameter_m))


def _rfi_level(vis: np.ndarray, flags: np.ndarray, n_src: int) -> float:
    """Typical per-antenna RFI amplitude (sqrt of data units) from the brightest data.

    On the shortest baselines the RFI barely decorrelates, so |V| ~ n_src |A|^2 there; the
    99th percentile of |V| over unflagged cells stands in for it.
    """
    magnitude = np.abs(vis[~flags]) if flags.any() else np.abs(vis).ravel()
    return float(np.sqrt(max(np.percentile(magnitude, 99.0), 1e-30) / n_src))


def check_observation(obs) -> None:
    """Refuse observations the model cannot fit, before any heavy work (host)."""
    if obs.orbits.n_sat == 0:
        raise ValueError(
            "the observation has no satellites: the model needs at least one orbit to fit RFI"
        )
    if np.all(obs.flags):
        raise ValueError("every visibility is flagged: there is nothing to fit")
    likelihood.validate_vis(obs.vis, obs.flags)
    likelihood.resolve_noise(obs.noise, obs.vis.shape[0])
    elevation = geometry.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)
    below = np.flatnonzero(np.all(elevation <= 0, axis=1))
    if below.size:
        names = ", ".join(obs.orbits.label(int(s)) for s in below)
        raise ValueError(
            f"satellite(s) {names} stay below the horizon for the whole observation; "
            "remove them from the store's orbits"
        )


def _data(obs, real) -> Data:
    cplx = np.result_type(real, np.complex64)
    vis = np.asarray(obs.vis)
    if not np.iscomplexobj(vis):
        logger.info("data are real (%s); widening to %s", vis.dtype, np.dtype(cplx))
    flags = np.asarray(obs.flags, bool)
    return Data(
        vis=jnp.asarray(np.where(flags, 0, vis).astype(cplx)),
        flags=jnp.asarray(flags),
        noise=jnp.asarray(likelihood.resolve_noise(obs.noise, vis.shape[0]), real),
        n_points=jnp.asarray(np.count_nonzero(~flags), jnp.int32),
    )


def _groups(obs, delay_us, snr, config: ModelConfig, real):
    n_ant = obs.ant_itrf.shape[0]
    time_cycles, freq_cycles = geometry.rfi_fringe_winding(
        delay_us, obs.a1, obs.a2, obs.freqs_hz, obs.int_time, obs.chan_width
    )
    labels, specs = rfi_vis.plan_groups(time_cycles, freq_cycles, snr, config.rfi_vis)
    tables = tuple(
        rfi_vis.make_group_tables(
            spec, np.flatnonzero(labels == g), np.asarray(obs.a1), np.asarray(obs.a2), n_ant,
            len(obs.freqs_hz), len(obs.times_s), obs.chan_width, obs.int_time, config.rfi_vis,
            real,
        )
        for g, spec in enumerate(specs)
    )  # fmt: skip
    counts = np.bincount(labels, minlength=len(specs))
    return (
        specs,
        tables,
        {
            f"{s.operator} t{s.n_time_samples} f{s.n_freq_samples}": int(c)
            for s, c in zip(specs, counts, strict=True)
        },
    )


def build(obs, config: ModelConfig, *, init: str = "data", seed: int = 0) -> Model:
    """Host-side set-up of the model for an observation (see the module docstring).

    obs: a ``tabascal.store.Observation`` (all rows). init: "data" (estimates from the data),
    "prior" (a draw from the prior, with ``seed``) or "truth" (the store's truth; only when
    asked, never by default).
    """
    if init not in INITS:
        raise ValueError(f"init {init!r} is not known; choose one of {', '.join(INITS)}")
    if init == "truth" and obs.truth is None:
        raise ValueError("init 'truth' needs a store with a truth group; this one has none")
    check_observation(obs)
    real = np.dtype(PRECISIONS[config.precision])
    n_ant, n_src = obs.ant_itrf.shape[0], obs.orbits.n_sat
    n_bl, n_freq, n_time = obs.vis.shape
    data = _data(obs, real)
    flags = np.asarray(obs.flags, bool)
    vis = np.asarray(obs.vis)
    noise = np.asarray(data.noise, np.float64)

    delay_us = geometry.rfi_delays(
        obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad, obs.ra_rad, obs.dec_rad, 3
    )
    phase = geometry.centre_phase(delay_us, obs.freqs_hz)
    snr = rfi_vis.snr_from_data(vis, flags, noise)
    specs, tables, group_sizes = _groups(obs, delay_us, snr, config, real)
    spec = ModelSpec(n_bl, n_ant, n_src, n_freq, n_time, specs, config.rfi_vis)

    level = config.rfi_sigma or _rfi_level(vis, flags, n_src)
    rfi_c = rfi_signal.make_constants(
        config.rfi_signal, n_ant, n_src, n_freq, n_time, obs.chan_width, obs.int_time,
        scale=level, mean=level if init == "data" else 0.0, dtype=real,
    )  # fmt: skip
    gains_c = gains.make_constants(config.gains, n_ant, n_freq, n_time, obs.int_time, dtype=real)
    base = ModelConstants(
        sky=None, rfi_signal=rfi_c, gains=gains_c, groups=tables,
        phase=jnp.asarray(phase, real), delay_us=jnp.asarray(delay_us, real),
        freq_mhz=jnp.asarray(obs.freqs_hz * 1e-6, real),
        a1=jnp.asarray(obs.a1, jnp.int32), a2=jnp.asarray(obs.a2, jnp.int32),
    )  # fmt: skip
    rfi_params = rfi_signal.init(rfi_c, jax.random.key(seed) if init == "prior" else None)
    if init == "truth":
        rfi_params = rfi_signal.init_from_estimate(rfi_c, obs.truth.rfi_amp, noise=0.01 * level)

    fringe_rate = geometry.max_sky_fringe_rate(
        obs.ant_itrf, obs.a1, obs.a2, obs.times_s, obs.gast0_rad, obs.ra_rad, obs.dec_rad,
        obs.freqs_hz, _fov_radius_rad(config, obs),
    )  # fmt: skip
    grid = sky.make_grid(config.sky, fringe_rate, n_freq, n_time, obs.chan_width, obs.int_time)
    rfi_start = jax.jit(predict_rfi, static_argnums=2)(rfi_params, base, spec)
    sky_mean = np.asarray(sky.mean_from_data(vis - np.asarray(rfi_start), flags))
    sky_sigma = config.sky_sigma or max(
        float(np.sqrt(np.mean(np.abs(sky_mean) ** 2))), float(np.median(noise))
    )
    sky_c = sky.make_constants(
        config.sky, grid, fringe_rate, scale=sky_sigma,
        mean=sky_mean if init == "data" else 0.0, dtype=real,
    )  # fmt: skip
    sky_params = sky.init(sky_c, jax.random.key(seed + 1) if init == "prior" else None)
    if init == "truth":
        sky_params = sky.init_from_data(sky_c, obs.truth.sky_vis, noise=0.01 * noise)
    gain_params = gains.init(gains_c, jax.random.key(seed + 2) if init == "prior" else None)
    info = {
        "rfi_groups": group_sizes,
        "rfi_snr": snr,
        "rfi_level": level,
        "sky_sigma": sky_sigma,
        "sky_modes": [grid.half_freq * 2 + 1, grid.half_time * 2 + 1],
        "fov_radius_deg": float(np.rad2deg(_fov_radius_rad(config, obs))),
    }
    logger.info("model: %s", info)
    return Model(
        spec=spec,
        constants=base._replace(sky=sky_c),
        data=data,
        params=ModelParams(sky_params, rfi_params, gain_params),
        info=info,
    )


def predict_rfi(rfi_params, constants: ModelConstants, spec: ModelSpec) -> jax.Array:
    """RFI visibilities (n_bl, n_freq, n_time) alone, before the gains."""
    amp = rfi_signal.forward(rfi_params, constants.rfi_signal)
    return rfi_vis.forward(
        amp, constants.phase, constants.delay_us, constants.freq_mhz, constants.groups,
        spec.groups, spec.n_bl, spec.rfi_vis,
    )  # fmt: skip
