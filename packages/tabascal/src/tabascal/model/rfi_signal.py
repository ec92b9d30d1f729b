"""RFI signal: per (antenna, source) complex amplitude on the data grid, a Fourier Gaussian process.

For antenna a and source (satellite) r, with whitened complex modes z[a, r] ~ CN(0, 1),

    s[a, r, f, t] = mean[a, r] + scale[a, r] sum_{k, j} w_f[k] w_t[j] z[a, r, k, j]
                                 exp(2 pi i (k f / N_f + j t / N_t))

with a separable Gaussian kernel exp(-dnu^2 / (2 bandwidth_hz^2)) exp(-dt^2 / (2 T_r^2)):
spectra exp(-2 pi^2 bandwidth_hz^2 eta^2) and exp(-2 pi^2 T_r^2 nu^2), each normalised to sum 1
over its kept modes, so E|s - mean|^2 = scale^2 in every cell. The correlation time T_r is
``corr_time_s`` for every source, or one per source (``make_constants(corr_time_s=...)``, from
the geometry: ``satellites.rfi_time_scales``); the time lattice is then the one of the longest
(padding) and the shortest (modes kept), shared by all. Padding
and truncation as in ``_fourier``, the padding uncapped: wrapped correlations stay below
``wrap_tolerance`` even for correlation times longer than the observation, for a few extra
modes. The output is the ``amp`` input of the ri_kernels operators (complex, on the data grid);
it is small (no baseline axis) and replicated on every device.

Two signal models (``RfiSignalConfig.signal``):

* ``per_antenna``: a free signal s[a, r] per (antenna, source), as above;
* ``shared``: one signal u[r] per source, seen by each antenna through a known factor,

      s[a, r, f, t] = factor[a, r, f, t] u[r, f, t],

  factor = the station beam's voltage towards the satellite over its distance
  (``satellites.rfi_antenna_factor``), normalised per source. The satellite's emission is then the
  only unknown, which leaves the antenna gains identifiable from the RFI (a free per-antenna
  signal absorbs any gain). The modes z, the scale and the mean then have an antenna axis of
  length 1, and u's correlation time is ``corr_time_s``: the fast swings across the beam's
  sidelobes are in the factor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.config import option_field
from tabascal.model import _fourier, _whitened

TIME_SCALES = ("fixed", "geometric")
SIGNALS = ("per_antenna", "shared")


@dataclass(frozen=True)
class RfiSignalConfig:
    """Static settings of the RFI-signal prior.

    Attributes:
      corr_time_s: correlation time of the Gaussian kernel in time (s); with
        ``time_scale`` "geometric", the longest any source gets.
      time_scale: "fixed" (corr_time_s for every source) or "geometric" (each satellite's own,
        from how fast it crosses the station beam's sidelobes: ``satellites.rfi_time_scales``).
      bandwidth_hz: correlation bandwidth of the Gaussian kernel in frequency (Hz).
      cutoff: relative power (per axis) below which modes are dropped, in (0, 1).
      wrap_tolerance: wrapped correlation allowed by the padding, in (0, 1).

    The prior's scale is not a setting of its own: ``make_constants`` takes it per (antenna,
    source) (``frame.ModelConfig.rfi_sigma``, or estimated from the data).
    """

    corr_time_s: float = option_field(100.0, "correlation time of the signal", "s", min=1e-3)
    bandwidth_hz: float = option_field(1.0e6, "correlation bandwidth of the signal", "Hz", min=1.0)
    # Measured (benchmarks/science.py): geometric took a LEO pass's RFI residual from 41.6 to
    # 3.8 times the noise and the demo's from 0.47 to 0.35; "fixed" keeps one time for all.
    time_scale: str = option_field(
        "geometric",
        "fixed: corr_time_s for every satellite; geometric: each satellite's own, "
        "the time it takes to cross a sidelobe of the station beam over 2 pi, at most "
        "corr_time_s",
        choices=TIME_SCALES,
    )
    # The shared signal is the default: on every benchmark scenario it left less RFI in the
    # cleaned data than the per-antenna signal, and only it learns the gains (docs/science.md).
    signal: str = option_field(
        "shared",
        "per_antenna: a free signal per (antenna, satellite); shared: one signal per satellite, "
        "seen by each antenna through the station beam towards it over its distance",
        choices=SIGNALS,
    )
    cutoff: float = 1.0e-3
    wrap_tolerance: float = 1.0e-3

    def __post_init__(self):
        for name in ("corr_time_s", "bandwidth_hz"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"RfiSignalConfig.{name} = {getattr(self, name)!r}; it must be > 0"
                )
        if self.signal not in SIGNALS:
            raise ValueError(f"RfiSignalConfig.signal = {self.signal!r}; choose one of {SIGNALS}")
        if self.time_scale not in TIME_SCALES:
            raise ValueError(
                f"RfiSignalConfig.time_scale = {self.time_scale!r}; choose one of {TIME_SCALES}"
            )
        for name in ("cutoff", "wrap_tolerance"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(
                    f"RfiSignalConfig.{name} = {getattr(self, name)!r}; it must lie in (0, 1)"
                )


class RfiSignalParams(NamedTuple):
    """Whitened modes z: (n_ant, n_src, 2, n_kf, n_kt) real, axis 2 = (real, imaginary); the
    antenna axis has length 1 for the shared signal."""

    z: jax.Array


class RfiSignalConstants(NamedTuple):
    """Arrays read by ``forward``.

    dft_freq: (n_freq, n_kf) complex; dft_time: (n_time, n_kt) complex;
    weight_freq: (n_kf,) real; weight_time: (1, n_src, n_kt) real, each source's own;
    scale: (n_ant, n_src) real; mean: (n_ant, n_src) complex (antenna axis of length 1 for
    the shared signal); mask: (1, n_src, 1, n_time) real, 1 where the source is in view and 0
    where it is not (below the horizon or a minimum elevation): there the signal is exactly
    zero and its parameters get no gradient. factor: (n_ant, n_src, n_freq, n_time) real for
    the shared signal, each antenna's known factor; (1, n_src, 1, 1) ones for the per-antenna
    one.
    """

    dft_freq: jax.Array
    dft_time: jax.Array
    weight_freq: jax.Array
    weight_time: jax.Array
    scale: jax.Array
    mean: jax.Array
    mask: jax.Array
    factor: jax.Array


def make_constants(
    config: RfiSignalConfig,
    n_ant: int,
    n_src: int,
    n_freq: int,
    n_time: int,
    chan_spacing: float,
    int_time: float,
    *,
    scale=1.0,
    mean=0.0,
    corr_time_s=None,
    in_view=None,
    factor=None,
    dtype=np.float64,
) -> RfiSignalConstants:
    """Constants of ``forward`` (host, float64, then cast).

    chan_spacing: the step between channel centres (Hz; ``ObservationMeta.chan_spacing``);
    int_time: integration time (s).
    scale: prior std of |s - mean| per cell, scalar or broadcastable to (n_ant, n_src) (sqrt
    of data units, e.g. Jy^0.5). mean: complex, broadcastable to (n_ant, n_src).
    corr_time_s: correlation time (s) of each source, (n_src,) or a scalar;
    ``config.corr_time_s`` when None. in_view: (n_src, n_time) bool, where each source is in
    view; everywhere when None. factor: (n_ant, n_src, n_freq, n_time) real, the shared
    signal's per-antenna factor (required when ``config.signal`` is "shared", else unused);
    scale and mean then broadcast to (1, n_src).
    dtype: real dtype, float32 or float64; complex arrays get the matching complex dtype.
    """
    if min(n_ant, n_freq, n_time) < 1 or n_src < 0 or not (chan_spacing > 0 and int_time > 0):
        raise ValueError(
            f"RFI signal grid: n_ant={n_ant}, n_src={n_src}, n_freq={n_freq}, n_time={n_time}, "
            f"chan_spacing={chan_spacing}, int_time={int_time}; expected positive sizes and "
            "spacings (n_src may be 0: no RFI term)"
        )
    real = np.dtype(dtype)
    cplx = np.result_type(real, np.complex64)
    factor = _checked_factor(config, factor, (n_ant, n_src, n_freq, n_time))
    shape = (1 if config.signal == "shared" else n_ant, n_src)
    scale = np.broadcast_to(scale, shape)
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError("RFI signal scale must be finite and > 0 for every (antenna, source)")
    times = np.broadcast_to(
        np.asarray(config.corr_time_s if corr_time_s is None else corr_time_s, np.float64),
        (n_src,),
    )
    if not np.all(np.isfinite(times) & (times > 0)):
        raise ValueError(f"RFI correlation times must be finite and > 0 s; got {times}")
    mean = np.broadcast_to(np.asarray(mean, dtype=np.complex128), shape)
    n_f, half_f = _fourier.gaussian_lattice(
        n_freq, chan_spacing, config.bandwidth_hz, config.cutoff, config.wrap_tolerance
    )
    n_t, half_t, weight_time = _time_lattice(config, times, n_time, int_time)
    return RfiSignalConstants(
        dft_freq=jnp.asarray(_fourier.dft_matrix(n_freq, n_f, half_f), cplx),
        dft_time=jnp.asarray(_fourier.dft_matrix(n_time, n_t, half_t), cplx),
        weight_freq=jnp.asarray(
            _fourier.gaussian_weights(n_f, chan_spacing, half_f, config.bandwidth_hz), real
        ),
        weight_time=jnp.asarray(weight_time, real),
        scale=jnp.asarray(scale, real),
        mean=jnp.asarray(mean, cplx),
        mask=jnp.asarray(
            np.broadcast_to(True if in_view is None else in_view, (n_src, n_time))[None, :, None],
            real,
        ),
        factor=jnp.asarray(factor, real),
    )


def _checked_factor(config: RfiSignalConfig, factor, expected: tuple) -> np.ndarray:
    """The shared signal's factor, checked against its shape (n_ant, n_src, n_freq, n_time);
    ones (1, n_src, 1, 1) for the per-antenna signal."""
    if config.signal != "shared":
        return np.ones((1, expected[1], 1, 1))
    if factor is None or np.shape(factor) != expected:
        got = None if factor is None else np.shape(factor)
        raise ValueError(
            f"the shared RFI signal needs its per-antenna factor, shape {expected}; got {got}"
        )
    return np.asarray(factor, np.float64)


def _time_lattice(config: RfiSignalConfig, times: np.ndarray, n_time: int, int_time: float):
    """(padded length, kept half width, weights (1, n_src, 2 half + 1)) of the time modes: the
    lattice of the longest correlation time, the modes the shortest keeps."""
    n_src = times.size
    longest, shortest = (float(f(times)) if n_src else config.corr_time_s for f in (np.max, np.min))
    n_t, _ = _fourier.gaussian_lattice(
        n_time, int_time, longest, config.cutoff, config.wrap_tolerance
    )
    x = np.arange((n_t + 1) // 2) / (n_t * int_time)
    half_t = _fourier.kept_half_width(_fourier.gaussian_spectrum(x, shortest), config.cutoff, n_t)
    weights = [_fourier.gaussian_weights(n_t, int_time, half_t, float(t)) for t in times]
    return n_t, half_t, np.reshape(weights, (1, n_src, 2 * half_t + 1))


def is_shared(constants: RfiSignalConstants) -> bool:
    """Whether ``constants`` are the shared signal's (static: read from the factor's shape,
    which has an antenna axis only then)."""
    return constants.factor.shape[0] > 1


def take_antennas(params: RfiSignalParams, constants: RfiSignalConstants, take):
    """``params`` and ``constants`` for the antennas ``take`` selects (a function applied to
    every array with an antenna axis first: the modes, scale and mean of the per-antenna
    signal, the factor of the shared one)."""
    if is_shared(constants):
        return params, constants._replace(factor=take(constants.factor))
    return params._replace(z=take(params.z)), constants._replace(
        scale=take(constants.scale), mean=take(constants.mean)
    )


def init(constants: RfiSignalConstants, key: jax.Array | None = None) -> RfiSignalParams:
    """Whitened parameters: zeros (s = mean) or, given a PRNG key, a prior draw."""
    n_kf, n_kt = constants.weight_freq.shape[0], constants.weight_time.shape[-1]
    shape = (*constants.scale.shape, 2, n_kf, n_kt)
    return RfiSignalParams(_whitened.draw(key, shape, constants.scale.dtype))


def _amplitude(constants: RfiSignalConstants) -> jax.Array:
    """scale[a, r] w_f[k] w_t[r, j], shape (n_ant, n_src, n_kf, n_kt) real."""
    return (
        constants.scale[:, :, None, None]
        * constants.weight_freq[None, None, :, None]
        * constants.weight_time[:, :, None, :]
    )


def forward(params: RfiSignalParams, constants: RfiSignalConstants) -> jax.Array:
    """RFI signal, (n_ant, n_src, n_freq, n_time) complex (formula in the module docstring)."""
    amp, factor = forward_parts(params, constants)
    return amp if factor is None else amp * factor


def forward_parts(params: RfiSignalParams, constants: RfiSignalConstants):
    """The signal as the operators take it: (amp, amp_factor). The per-antenna signal is
    ``(forward(...), None)``; the shared one is u (1, n_src, n_freq, n_time) complex and its
    known factor (n_ant, n_src, n_freq, n_time) real, whose product the operators form only at
    each block's cells (``ri_kernels``' ``amp_factor``), so that neither the product nor its
    cotangent is ever held whole."""
    z = _fourier.complex_from_stacked(params.z)
    amp = _fourier.modes_to_grid(z, _amplitude(constants), constants.dft_freq, constants.dft_time)
    amp = (amp + constants.mean[:, :, None, None]) * constants.mask
    if is_shared(constants):
        return amp, constants.factor
    return amp * constants.factor, None


def prior(params: RfiSignalParams) -> jax.Array:
    """Negative log prior |z|^2 / 2 summed over all modes (scalar)."""
    return _whitened.prior(params)


def init_from_estimate(
    constants: RfiSignalConstants,
    amp,
    noise,
    flags=None,
    *,
    n_iter: int = 100,
) -> RfiSignalParams:
    """Whitened parameters whose ``forward`` best fits an estimate of the signal (MAP).

    Minimises sum_unflagged |forward(z) - amp|^2 / (2 noise^2) + |z|^2 / 2 for every
    (antenna, source) on its own by conjugate gradients (``_fourier.fit_modes``); flagged or
    non-finite cells are left out, and so are the cells where the source is out of view (the
    mask's zeros): ``forward`` is zero there whatever z, and an estimate's zeros there, fitted
    by the smooth modes, would ring across the cells in view (at init "truth" a rising LEO's
    signal was 19% off next to its rise and 4% off between the time modes' nodes).

    amp: (n_ant, n_src, n_freq, n_time) complex estimate; noise: scalar or broadcastable to
    (n_ant, n_src), std of its real and imaginary parts (> 0); flags: same shape as amp, bool,
    or None; n_iter: conjugate-gradient iterations (static). For the shared signal the
    estimate is first reduced to one per source (``shared_estimate``), left out where every
    antenna's is flagged.
    """
    if is_shared(constants):
        # A shared cell is left out where every antenna's estimate is.
        every = None if flags is None else np.all(np.asarray(flags, bool), axis=0, keepdims=True)
        amp, flags = shared_estimate(constants, amp, flags), every
    hidden = jnp.broadcast_to(constants.mask == 0, jnp.shape(amp))
    flags = hidden if flags is None else hidden | jnp.asarray(flags, bool)
    z = _fourier.fit_estimate(
        amp,
        flags,
        constants.mean,
        noise,
        _amplitude(constants),
        constants.dft_freq,
        constants.dft_time,
        n_iter,
    )
    return RfiSignalParams(z)


def shared_estimate(constants: RfiSignalConstants, amp, flags=None) -> np.ndarray:
    """The shared signal u (1, n_src, n_freq, n_time) that best explains per-antenna estimates
    ``amp`` (n_ant, n_src, n_freq, n_time) through the factor, in magnitude:
    u = sum_a |factor_a| |amp_a| / sum_a factor_a^2 (least squares on |s_a| = |factor_a| |u|;
    the product of two antennas' signals, all the data constrain, is real for a shared signal,
    so the estimates' phases carry nothing). Cells where no antenna's factor is above zero, or
    flagged, are 0 (NaN-free)."""
    factor = np.abs(np.asarray(constants.factor, np.float64))
    magnitude = np.abs(np.asarray(amp))
    good = np.isfinite(magnitude) if flags is None else np.isfinite(magnitude) & ~np.asarray(flags)
    weight = np.where(good, factor, 0.0)
    num = np.sum(weight * np.where(good, magnitude, 0.0), axis=0, keepdims=True)
    den = np.sum(weight**2, axis=0, keepdims=True)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
