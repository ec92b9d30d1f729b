"""The joint TABASCAL model: sky, RFI from known trajectories and gains, fitted together.

    V_model[b] = g[a1[b]] (V_sky[b] + V_rfi[b]) conj(g[a2[b]])

with ``V_sky`` the per-baseline Fourier Gaussian process (``sky``), ``V_rfi`` the RFI
visibilities of the per-antenna signals (``rfi_signal``) through the ri_kernels operators
(``rfi_vis``) and ``g`` the gains (``gains``). The loss is the negative log posterior per
unflagged complex data point (``likelihood.loss``).

``build`` does all host-side work once: the model's frame (``frame.model_frame``: geometry,
the grouping of baselines by fine sampling, the components' constants), the start of the RFI
signal, and the initial whitened parameters. Everything but the per-row arrays follows from the
metadata and a few mergeable data statistics (``data_stats``), so ``abstract_model`` makes the
same model from the metadata alone, with the per-row arrays as ``jax.ShapeDtypeStruct``s, for
compiling and sizing every stage before any data is read. ``predict`` and ``loss`` are pure
functions of (params, constants, data) with the static ``ModelSpec`` closed over, so they jit,
differentiate and shard.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import ConfigError
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
from tabascal.model.frame import (
    FROM_DATA_INITS,
    PRECISIONS,
    WHOLE_OBSERVATION_INITS,
    Frame,
    Geometry,
    ModelConfig,
    ModelConstants,
    ModelSpec,
    check_init,
    model_frame,
    prior_keys,
    resolve_init,
)
from tabascal.model.satellites import above_min_elevation, beam_crossing_time_s

logger = logging.getLogger(__name__)

# Integrations over which the fringe start weighs each satellite's estimate against the data
# (``rfi_estimate.source_weights``): 5 keeps the start's RFI error near its least on every
# scenario, where one integration leaves the eight-satellite shell's nearly three times as
# large and 31 the LEO pass's (docs/science.md, "The defaults and why").
WEIGH_WINDOW = 5


class ModelParams(NamedTuple):
    """orbits: the orbit corrections (``orbit_corrections``), None when the orbits are fixed
    (``orbits.fit: none``, the default): the pytree then has no orbit leaves at all."""

    sky: sky.SkyParams
    rfi: rfi_signal.RfiSignalParams
    gains: gains.GainsParams
    orbits: orbit_corrections.OrbitParams | None = None


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


def prior_curvature(inputs) -> jax.Array:
    """The least eigenvalue ``gauss_newton``'s matrix can have: the priors' curvature, 1 / N
    for identity priors on whitened parameters over the data's N points."""
    _, data = inputs
    return 1.0 / data.n_points


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
    if not obs.n_sat or init not in WHOLE_OBSERVATION_INITS:
        return frame.rfi
    below = ~above_min_elevation(obs, config)[None, :, None, :]
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
    geom: ``frame.observation_geometry(meta, config)`` when already at hand (it is the slow
    part at 512 stations, and the same for every RFI route). noise_per_channel: the data's
    noise is (n_bl, n_freq) rather than (n_bl,).
    """
    check_init(init)
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
