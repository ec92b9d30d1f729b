"""Sky visibilities: a per-baseline complex Fourier Gaussian process over (channel, time).

For baseline b, with whitened complex modes z[b] ~ CN(0, 1) (see ``_fourier``),

    V[b, f, t] = mean[b] + scale[b] sum_{k, j} w_f[k] w_t[b, j] z[b, k, j]
                           exp(2 pi i (k f / N_f + j t / N_t))

with a separable power spectrum w_f[k]^2 w_t[b, j]^2, each factor normalised to sum 1 over its
kept modes, so the prior variance E|V - mean|^2 is exactly scale[b]^2 in every cell.

* **Frequency**: Gaussian kernel exp(-dnu^2 / (2 bandwidth_hz^2)), spectrum
  exp(-2 pi^2 bandwidth_hz^2 eta^2) over delay eta = k / (N_f chan_width).
* **Time**: flat up to a per-baseline knee and Gaussian beyond (``_fourier.edge_spectrum``):
  knee[b] = max(knee_factor fringe_rate_hz[b], 1 / (n_time int_time)), roll-off std
  rolloff * knee[b]. The sky's own fringe rate is bounded by the baseline's maximum sky fringe
  rate, so power is kept up to it and falls off quickly beyond; the floor keeps at least the
  modes of one cycle per observation on the shortest baselines.

Padding (``_fourier.padded_size``): frequency from the Gaussian kernel's decorrelation lag, time
from that of the smallest knee (envelope exp(-2 pi^2 (rolloff knee)^2 tau^2)), each capped at
doubling the axis. The time lattice is shared, so its padding follows the shortest baseline
while the box follows the longest: uncapped, a zero-fringe-rate baseline (knee at one cycle per
observation, decorrelation lag 2.4 T) would stretch the lattice to 3.4 n_time and the long
baselines' box with it. With the cap, a process correlated over more than the observation keeps
some correlation between its two ends (the data pin such slow terms anyway).

Mode box: one shape (n_kf, n_kt) for all baselines, from the frequency spectrum and the largest
knee, each axis truncated where its relative power falls below ``cutoff``. A baseline's time
modes below the cutoff of its own spectrum get zero weight: their parameters only feel the
prior.

Every array with a baseline axis has it leading and no operation mixes baselines, so the
component runs unchanged on any block of rows (the baseline sharding relies on this).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import option_field
from tabascal.model import _fourier, _whitened


@dataclass(frozen=True)
class SkyConfig:
    """Static settings of the sky prior.

    Attributes:
      bandwidth_hz: correlation bandwidth of the Gaussian kernel in frequency (Hz). A sky
        field of radius theta seen on a baseline of length |b| decorrelates over about
        c / (2 pi |b| theta): 190 kHz for 1.5 km and 10 degrees, the default's scale.
      knee_factor: time knee as a multiple of the baseline's maximum sky fringe rate.
      rolloff: std of the Gaussian roll-off beyond the knee, as a fraction of the knee.
      cutoff: relative power (per axis) below which modes are dropped, in (0, 1).
      wrap_tolerance: wrapped correlation allowed by the padding, in (0, 1).

    The prior's scale is not a setting of its own: ``make_constants`` takes it per baseline
    (``joint.ModelConfig.sky_sigma``, or estimated from the data).
    """

    bandwidth_hz: float = option_field(2.0e5, "correlation bandwidth in frequency", "Hz", min=1.0)
    knee_factor: float = option_field(
        1.0, "time knee, a multiple of the baseline's largest sky fringe rate", min=0.01
    )
    rolloff: float = option_field(0.25, "roll-off beyond the knee, fraction of the knee", min=0.01)
    cutoff: float = option_field(
        1.0e-3, "relative power below which modes are dropped", min=1e-12, max=0.5
    )
    wrap_tolerance: float = 1.0e-3

    def __post_init__(self):
        for name in ("bandwidth_hz", "knee_factor", "rolloff"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SkyConfig.{name} = {getattr(self, name)!r}; it must be > 0")
        for name in ("cutoff", "wrap_tolerance"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(
                    f"SkyConfig.{name} = {getattr(self, name)!r}; it must lie in (0, 1)"
                )


class SkyGrid(NamedTuple):
    """Static layout shared by all baselines: data grid, padded lattice and kept half-widths.

    The box of modes is (n_kf, n_kt) = (2 half_freq + 1, 2 half_time + 1).
    """

    n_freq: int
    n_time: int
    chan_width: float  # Hz
    int_time: float  # s
    n_freq_padded: int
    n_time_padded: int
    half_freq: int
    half_time: int


class SkyParams(NamedTuple):
    """Whitened sky modes z: (n_bl, 2, n_kf, n_kt) real, axis 1 = (real, imaginary)."""

    z: jax.Array


class SkyConstants(NamedTuple):
    """Arrays read by ``forward``; fields with a baseline axis have it leading.

    dft_freq: (n_freq, n_kf) complex; dft_time: (n_time, n_kt) complex;
    weight_freq: (n_kf,) real; weight_time: (n_bl, n_kt) real; scale: (n_bl,) real;
    mean: (n_bl,) complex.
    """

    dft_freq: jax.Array
    dft_time: jax.Array
    weight_freq: jax.Array
    weight_time: jax.Array
    scale: jax.Array
    mean: jax.Array


#: SkyConstants fields with a leading baseline axis (sharded with the baselines).
BASELINE_FIELDS = ("weight_time", "scale", "mean")


def _knee_hz(config: SkyConfig, fringe_rate_hz: np.ndarray, n_time: int, int_time: float):
    return np.maximum(config.knee_factor * fringe_rate_hz, 1.0 / (n_time * int_time))


def _check_fringe_rate(fringe_rate_hz) -> np.ndarray:
    rate = np.asarray(fringe_rate_hz, dtype=np.float64)
    if rate.ndim != 1 or rate.size == 0:
        raise ValueError(f"fringe_rate_hz has shape {rate.shape}; expected (n_bl,) with n_bl > 0")
    if not np.all(np.isfinite(rate) & (rate >= 0)):
        bad = int(np.flatnonzero(~(np.isfinite(rate) & (rate >= 0)))[0])
        raise ValueError(
            f"fringe_rate_hz[{bad}] = {rate[bad]!r}; fringe rates must be finite and >= 0 Hz"
        )
    return rate


def make_grid(
    config: SkyConfig,
    fringe_rate_hz,
    n_freq: int,
    n_time: int,
    chan_width: float,
    int_time: float,
) -> SkyGrid:
    """Padded lattice and mode box for all baselines (host, float64).

    fringe_rate_hz: (n_bl,) maximum sky fringe rate of every baseline of the observation (Hz),
    all of them, not one block: the padding follows the smallest knee and the box the largest.
    chan_width: channel spacing (Hz); int_time: integration time (s).
    """
    rate = _check_fringe_rate(fringe_rate_hz)
    if n_freq < 1 or n_time < 1 or not (chan_width > 0 and int_time > 0):
        raise ValueError(
            f"sky grid: n_freq={n_freq}, n_time={n_time}, chan_width={chan_width}, "
            f"int_time={int_time}; expected positive sizes and spacings"
        )
    knee = _knee_hz(config, rate, n_time, int_time)
    n_f, half_f = _fourier.gaussian_lattice(
        n_freq, chan_width, config.bandwidth_hz, config.cutoff, config.wrap_tolerance, n_freq
    )
    time_length = 1.0 / (2.0 * np.pi * config.rolloff * knee.min())
    time_lag = _fourier.decorrelation_lag(time_length, config.wrap_tolerance)
    n_t = _fourier.padded_size(n_time, int_time, time_lag, n_time)
    nu = np.arange((n_t + 1) // 2) / (n_t * int_time)
    k_max = knee.max()
    power_t = _fourier.edge_spectrum(nu, k_max, config.rolloff * k_max)
    half_t = _fourier.kept_half_width(power_t, config.cutoff, n_t)
    return SkyGrid(n_freq, n_time, float(chan_width), float(int_time), n_f, n_t, half_f, half_t)


def make_constants(
    config: SkyConfig,
    grid: SkyGrid,
    fringe_rate_hz,
    *,
    scale=1.0,
    mean=0.0,
    dtype=np.float64,
) -> SkyConstants:
    """Constants of ``forward`` for a set of baselines (all of them, or one block of rows).

    fringe_rate_hz: (n_bl,) maximum sky fringe rate of these baselines (Hz).
    scale: prior std of |V - mean| per cell, scalar or (n_bl,) (data units, e.g. Jy).
    mean: scalar or (n_bl,) complex constant per baseline (e.g. ``mean_from_data``).
    dtype: real dtype, float32 or float64; complex arrays get the matching complex dtype.
    """
    rate = _check_fringe_rate(fringe_rate_hz)
    n_bl = rate.size
    real = np.dtype(dtype)
    cplx = np.result_type(real, np.complex64)
    scale = np.broadcast_to(scale, (n_bl,))
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError("sky scale must be finite and > 0 for every baseline")
    mean = np.broadcast_to(np.asarray(mean, dtype=np.complex128), (n_bl,))
    weight_freq = _fourier.gaussian_weights(
        grid.n_freq_padded, grid.chan_width, grid.half_freq, config.bandwidth_hz
    )
    knee = _knee_hz(config, rate, grid.n_time, grid.int_time)[:, None]
    nu = _fourier.mode_frequencies(grid.n_time_padded, grid.int_time, grid.half_time)
    power_t = _fourier.edge_spectrum(np.abs(nu), knee, config.rolloff * knee)
    power_t = np.where(power_t >= config.cutoff, power_t, 0.0)
    return SkyConstants(
        dft_freq=jnp.asarray(
            _fourier.dft_matrix(grid.n_freq, grid.n_freq_padded, grid.half_freq), cplx
        ),
        dft_time=jnp.asarray(
            _fourier.dft_matrix(grid.n_time, grid.n_time_padded, grid.half_time), cplx
        ),
        weight_freq=jnp.asarray(weight_freq, real),
        weight_time=jnp.asarray(_fourier.normalised_weights(power_t), real),
        scale=jnp.asarray(scale, real),
        mean=jnp.asarray(mean, cplx),
    )


def init(constants: SkyConstants, key: jax.Array | None = None) -> SkyParams:
    """Whitened sky parameters: zeros (V = mean) or, given a PRNG key, a prior draw."""
    n_bl, n_kt = constants.weight_time.shape
    shape = (n_bl, 2, constants.weight_freq.shape[0], n_kt)
    return SkyParams(_whitened.draw(key, shape, constants.weight_time.dtype))


def _amplitude(constants: SkyConstants) -> jax.Array:
    """scale[b] w_f[k] w_t[b, j], shape (n_bl, n_kf, n_kt) real."""
    return (
        constants.scale[:, None, None]
        * constants.weight_freq[None, :, None]
        * constants.weight_time[:, None, :]
    )


def forward(params: SkyParams, constants: SkyConstants) -> jax.Array:
    """Sky visibilities, (n_bl, n_freq, n_time) complex (formula in the module docstring)."""
    z = _fourier.complex_from_stacked(params.z)
    vis = _fourier.modes_to_grid(z, _amplitude(constants), constants.dft_freq, constants.dft_time)
    return vis + constants.mean[:, None, None]


def prior(params: SkyParams) -> jax.Array:
    """Negative log prior |z|^2 / 2 summed over all baselines and modes (scalar)."""
    return _whitened.prior(params)


def init_from_data(
    constants: SkyConstants,
    vis,
    noise,
    flags=None,
    *,
    n_iter: int = 100,
) -> SkyParams:
    """Whitened parameters whose ``forward`` best fits a sky estimate (maximum a posteriori).

    Minimises sum_unflagged |forward(z) - vis|^2 / (2 noise^2) + |z|^2 / 2 for every baseline on
    its own, by conjugate gradients in mode space (``_fourier.fit_modes``). Flagged or
    non-finite cells are left out. A band-limited estimate (one ``forward`` can represent) with
    a small noise comes back to itself: forward(init_from_data(x)) ~= x.

    vis: (n_bl, n_freq, n_time) complex estimate; noise: scalar, (n_bl,) or (n_bl, n_freq) std
    of its real and imaginary parts (data units, > 0); flags: (n_bl, n_freq, n_time) bool or
    None. n_iter: conjugate-gradient iterations (static).

    A noise per channel enters as one value per baseline, ``1 / sqrt(mean_f noise[b, f]^-2)``:
    the noise that gives the baseline's data the same total weight against the prior (the
    fit weighs a baseline's cells equally). It is exact for equal channels, and the fit is
    started from the truth with a noise far below the data's, where the prior barely counts.
    """
    if np.ndim(noise) == 2:
        noise = 1.0 / jnp.sqrt(jnp.mean(1.0 / jnp.square(jnp.asarray(noise)), axis=1))
    z = _fourier.fit_estimate(
        vis,
        flags,
        constants.mean,
        noise,
        _amplitude(constants),
        constants.dft_freq,
        constants.dft_time,
        n_iter,
    )
    return SkyParams(z)


def mean_from_data(vis, flags=None) -> jax.Array:
    """Per-baseline mean of the unflagged, finite cells, (n_bl,) complex (0 where none are).

    vis: (n_bl, n_freq, n_time) complex; flags: same shape bool or None. Masked sums only.
    """
    vis = jnp.asarray(vis)
    use = jnp.isfinite(vis)
    if flags is not None:
        use = use & ~jnp.asarray(flags)
    total = jnp.sum(jnp.where(use, vis, 0), axis=(1, 2))
    count = jnp.sum(use, axis=(1, 2))
    return jnp.where(count > 0, total / jnp.maximum(count, 1), 0)
