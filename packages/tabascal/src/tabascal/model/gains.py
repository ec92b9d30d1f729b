"""Antenna gains: unitary, or per (antenna, channel) Gaussian processes in time.

    g[a, f, t] = exp(log_amp[a, f, t]) exp(i phase[a, f, t])
    log_amp[a, f, t] = log_amp_mean[a, f] + amp_sigma * x_amp[a, f, t]
    phase[a, f, t]   = phase_mean[a, f] + phase_sigma * x_phase[a, f, t],  phase[ref_ant] = 0

Each x is an independent real, unit-variance Gaussian process in time per (antenna, channel)
with the Gaussian kernel exp(-dt^2 / (2 corr_time_s^2)), written on the Hartley basis cas(2 pi j
t / N) = cos + sin of a padded lattice (``_fourier.hartley_matrix``): one real parameter per
kept mode, the padding uncapped as for the RFI signal (a correlation time of hours over a short
observation keeps a few modes). Channels are independent (no smoothness across the band is
imposed). The exponential keeps the amplitude positive; log_amp is close to the relative
amplitude error.

The reference antenna has no phase parameters at all, and its phase is set with ``where`` to
exactly 0.0, whatever the other antennas do. ``kind="unitary"`` keeps the same pytree with zero
modes: the parameter arrays have a trailing axis of size 0 and ``forward`` returns exactly 1.
The observed visibilities are V[b] = g[a1[b]] V_true[b] conj(g[a2[b]]) (``apply``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import option_field
from tabascal.model import _fourier, _whitened

KINDS = ("unitary", "gp")
_HIGHEST = jax.lax.Precision.HIGHEST


@dataclass(frozen=True)
class GainsConfig:
    """Static settings of the gains.

    Attributes:
      kind: ``"unitary"`` (all ones, no parameters) or ``"gp"``.
      corr_time_s: correlation time of the Gaussian kernel in time (s).
      amp_sigma: prior std of the log amplitude (about the relative amplitude error).
      phase_sigma: prior std of the phase (rad).
      ref_ant: index of the reference antenna, whose phase is exactly 0.
      cutoff: relative power below which modes are dropped, in (0, 1).
      wrap_tolerance: wrapped correlation allowed by the padding, in (0, 1).
    """

    kind: str = option_field(
        "gp", "unitary (fixed at 1) or gp (Gaussian process in time)", choices=KINDS
    )
    corr_time_s: float = option_field(1800.0, "correlation time of the gains", "s", min=1e-3)
    amp_sigma: float = option_field(0.05, "prior std of the log amplitude", min=1e-9)
    phase_sigma: float = option_field(0.2, "prior std of the phase", "rad", min=1e-9)
    ref_ant: int = option_field(0, "reference antenna, whose phase is fixed at 0", min=0)
    cutoff: float = 1.0e-3
    wrap_tolerance: float = 1.0e-3

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"GainsConfig.kind = {self.kind!r}; expected one of {KINDS}")
        for name in ("corr_time_s", "amp_sigma", "phase_sigma"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GainsConfig.{name} = {getattr(self, name)!r}; it must be > 0")
        for name in ("cutoff", "wrap_tolerance"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(
                    f"GainsConfig.{name} = {getattr(self, name)!r}; it must lie in (0, 1)"
                )
        if isinstance(self.ref_ant, bool) or not (
            isinstance(self.ref_ant, int | np.integer) and self.ref_ant >= 0
        ):
            raise ValueError(f"GainsConfig.ref_ant = {self.ref_ant!r}; expected an integer >= 0")


class GainsParams(NamedTuple):
    """Whitened gain modes, real.

    log_amp: (n_ant, n_freq, n_kt); phase: (n_ant - 1, n_freq, n_kt), every antenna but the
    reference in antenna order. n_kt = 0 for unitary gains.
    """

    log_amp: jax.Array
    phase: jax.Array


class GainsConstants(NamedTuple):
    """Arrays read by ``forward``.

    hartley_time: (n_time, n_kt) real; weight_time: (n_kt,) real; amp_sigma, phase_sigma: ()
    real; log_amp_mean, phase_mean: (n_ant, n_freq) real (phase_mean[ref_ant] = 0);
    phase_rows: (n_ant,) int32, row of each antenna in [zeros; params.phase] (0 = reference).
    """

    hartley_time: jax.Array
    weight_time: jax.Array
    amp_sigma: jax.Array
    phase_sigma: jax.Array
    log_amp_mean: jax.Array
    phase_mean: jax.Array
    phase_rows: jax.Array


def make_constants(
    config: GainsConfig,
    n_ant: int,
    n_freq: int,
    n_time: int,
    int_time: float,
    *,
    log_amp_mean=0.0,
    phase_mean=0.0,
    dtype=np.float64,
) -> GainsConstants:
    """Constants of ``forward`` (host, float64, then cast to the real ``dtype``).

    int_time: integration time (s). log_amp_mean, phase_mean (rad): broadcastable to
    (n_ant, n_freq); the reference antenna's phase mean must be 0. Unitary gains take no means.
    """
    if min(n_ant, n_freq, n_time) < 1 or not int_time > 0:
        raise ValueError(
            f"gains grid: n_ant={n_ant}, n_freq={n_freq}, n_time={n_time}, int_time={int_time}; "
            "expected positive sizes and integration time"
        )
    if config.ref_ant >= n_ant:
        raise ValueError(f"GainsConfig.ref_ant = {config.ref_ant}; expected < n_ant = {n_ant}")
    shape = (n_ant, n_freq)
    log_amp_mean = np.broadcast_to(np.asarray(log_amp_mean, np.float64), shape)
    phase_mean = np.broadcast_to(np.asarray(phase_mean, np.float64), shape)
    if config.kind == "unitary":
        if np.any(log_amp_mean != 0) or np.any(phase_mean != 0):
            raise ValueError("unitary gains take no log_amp_mean or phase_mean; use kind='gp'")
        n_padded, half = n_time, -1
    else:
        if np.any(phase_mean[config.ref_ant] != 0):
            raise ValueError(
                f"phase_mean of the reference antenna {config.ref_ant} must be 0; "
                "subtract it from every antenna's phase first"
            )
        n_padded, half = _fourier.gaussian_lattice(
            n_time, int_time, config.corr_time_s, config.cutoff, config.wrap_tolerance
        )
    weights = _fourier.gaussian_weights(n_padded, int_time, half, config.corr_time_s)
    rows = np.zeros(n_ant, np.int32)
    rows[np.arange(n_ant) != config.ref_ant] = np.arange(1, n_ant, dtype=np.int32)
    real = np.dtype(dtype)
    return GainsConstants(
        hartley_time=jnp.asarray(_fourier.hartley_matrix(n_time, n_padded, half), real),
        weight_time=jnp.asarray(weights, real),
        amp_sigma=jnp.asarray(config.amp_sigma, real),
        phase_sigma=jnp.asarray(config.phase_sigma, real),
        log_amp_mean=jnp.asarray(log_amp_mean, real),
        phase_mean=jnp.asarray(phase_mean, real),
        phase_rows=jnp.asarray(rows),
    )


def init(constants: GainsConstants, key: jax.Array | None = None) -> GainsParams:
    """Whitened parameters: zeros (g = exp(means)) or, given a PRNG key, a prior draw."""
    n_ant, n_freq = constants.log_amp_mean.shape
    n_kt = constants.weight_time.shape[0]
    dtype = constants.weight_time.dtype
    key_amp, key_phase = (None, None) if key is None else jax.random.split(key)
    return GainsParams(
        log_amp=_whitened.draw(key_amp, (n_ant, n_freq, n_kt), dtype),
        phase=_whitened.draw(key_phase, (n_ant - 1, n_freq, n_kt), dtype),
    )


def init_from_gains(constants: GainsConstants, g, ref_ant: int) -> GainsParams:
    """Whitened parameters whose gains come closest to ``g`` (n_ant, n_freq, n_time) complex,
    in least squares on the log amplitude and the phase (``init: truth``).

    The phases are first referred to antenna ``ref_ant`` (``g conj(g_ref) / |g_ref|``): the data
    hold only phase differences, and the model's reference has phase exactly 0. Host numpy,
    float64; the result in the constants' real dtype. Unitary gains have no modes to fit.
    """
    g = np.asarray(g, np.complex128)
    n_ant, n_freq = np.asarray(constants.log_amp_mean).shape
    n_kt = int(constants.weight_time.shape[0])
    dtype = constants.weight_time.dtype
    if g.shape[:2] != (n_ant, n_freq) or g.shape[2] != constants.hartley_time.shape[0]:
        raise ValueError(
            f"gains of shape {g.shape}; expected (n_ant, n_freq, n_time) = "
            f"({n_ant}, {n_freq}, {constants.hartley_time.shape[0]})"
        )
    if n_kt == 0:
        return init(constants)
    basis = np.asarray(constants.hartley_time, np.float64) * np.asarray(
        constants.weight_time, np.float64
    )  # (n_time, n_kt): x(t) = basis @ z

    def modes(target, sigma):  # (rows, n_time) -> (rows, n_kt)
        return np.linalg.lstsq(float(sigma) * basis, target.T, rcond=None)[0].T

    log_amp = np.log(np.abs(g)) - np.asarray(constants.log_amp_mean, np.float64)[..., None]
    referred = g * np.conj(g[ref_ant]) / np.abs(g[ref_ant])
    phase = np.unwrap(np.angle(referred), axis=-1)
    phase -= np.asarray(constants.phase_mean, np.float64)[..., None]
    rows = np.asarray(constants.phase_rows)
    others = np.argsort(rows)[1:]  # antennas of params.phase rows 1.., the reference left out
    z_amp = modes(log_amp.reshape(-1, g.shape[2]), constants.amp_sigma)
    z_phase = modes(phase[others].reshape(-1, g.shape[2]), constants.phase_sigma)
    return GainsParams(
        log_amp=jnp.asarray(z_amp.reshape(n_ant, n_freq, n_kt), dtype),
        phase=jnp.asarray(z_phase.reshape(n_ant - 1, n_freq, n_kt), dtype),
    )


def _time_process(z: jax.Array, constants: GainsConstants) -> jax.Array:
    """sum_j weight_time[j] z[..., j] cas(2 pi j t / N): (..., n_kt) -> (..., n_time) real."""
    return jnp.einsum(
        "...j,tj->...t", constants.weight_time * z, constants.hartley_time, precision=_HIGHEST
    )


def forward(params: GainsParams, constants: GainsConstants) -> jax.Array:
    """Gains, (n_ant, n_freq, n_time) complex (formula in the module docstring)."""
    log_amp = constants.log_amp_mean[..., None] + constants.amp_sigma * _time_process(
        params.log_amp, constants
    )
    ref_row = jnp.zeros((1, *params.phase.shape[1:]), params.phase.dtype)
    phase_z = jnp.concatenate([ref_row, params.phase])
    phase_z = phase_z[constants.phase_rows]
    phase = constants.phase_mean[..., None] + constants.phase_sigma * _time_process(
        phase_z, constants
    )
    phase = jnp.where((constants.phase_rows == 0)[:, None, None], 0.0, phase)
    amp = jnp.exp(log_amp)
    return jax.lax.complex(amp * jnp.cos(phase), amp * jnp.sin(phase))


def prior(params: GainsParams) -> jax.Array:
    """Negative log prior |z|^2 / 2 summed over both parameter arrays (scalar)."""
    return _whitened.prior(params)


def apply(vis: jax.Array, gains: jax.Array, a1: jax.Array, a2: jax.Array) -> jax.Array:
    """Corrupt baseline visibilities: V[b] = g[a1[b]] vis[b] conj(g[a2[b]]).

    vis: (n_bl, n_freq, n_time) complex; gains: (n_ant, n_freq, n_time) complex;
    a1, a2: (n_bl,) integer antenna indices of the rows of ``vis`` (a block of rows takes its
    own a1, a2). Returns (n_bl, n_freq, n_time) complex. Rows are independent of each other.
    """
    return gains[a1] * vis * jnp.conj(gains[a2])
