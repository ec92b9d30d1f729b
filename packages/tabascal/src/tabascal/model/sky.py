"""Sky visibilities: a per-baseline complex Fourier Gaussian process over (channel, time).

For baseline b, with whitened complex modes z[b] ~ CN(0, 1) (see ``_fourier``),

    V[b, f, t] = mean[b] + scale[b] sum_{k, j} w_f[b, k] w_t[b, j] z[b, k, j]
                           exp(2 pi i (k f / N_f + j t / N_t))

with a separable power spectrum w_f[b, k]^2 w_t[b, j]^2, each factor normalised to sum 1 over its
kept modes, so the prior variance E|V - mean|^2 is exactly scale[b]^2 in every cell.

* **Frequency**: flat up to a per-baseline delay knee and Gaussian beyond, in delay
  eta = k / (N_f chan_width) (``_fourier.edge_spectrum``): knee[b] = max(knee_factor
  delay_s[b], 1 / (4 n_freq chan_width)), roll-off std rolloff * knee[b]. A source within the
  field reaches the baseline's two antennas at most delay_s[b] apart (``geometry.max_sky_delay_s``),
  so its visibility winds at most that many cycles per Hz. With ``bandwidth_hz`` set instead,
  every baseline shares the Gaussian kernel exp(-dnu^2 / (2 bandwidth_hz^2)), spectrum
  exp(-2 pi^2 bandwidth_hz^2 eta^2).
* **Time**: the same edge in fringe rate: knee[b] = max(knee_factor fringe_rate_hz[b],
  1 / (4 n_time int_time)), roll-off std rolloff * knee[b]. The sky's own fringe rate is
  bounded by the baseline's maximum sky fringe rate, so power is kept up to it and falls off
  quickly beyond.

The floors, a quarter of a cycle over the data's extent on each axis, keep the knee away from
zero. A baseline whose sky turns through less than about a quarter of a cycle across the band
(or the observation) keeps one mode on that axis, the constant: the first non-zero mode of a
lattice padded to twice the axis lies at twice the floor, where the roll-off has fallen below
the cutoff. The station beam attenuates the sources towards the field's edge, where the bounds
are reached, so such a baseline's sky is flat to well within the noise. (The former fixed
200 kHz kernel and a floor of one cycle in time kept 5 x 7 modes a baseline on the demo: the
RFI-free demo's fit took 7% of the noise's variance into the sky, reduced chi-squared 0.933;
with the bounds 0.993. docs/science.md, "The sky's degrees of freedom".)

Padding (``_fourier.padded_size``): each axis from the decorrelation lag of its smallest knee
(envelope exp(-2 pi^2 (rolloff knee)^2 tau^2)), capped at doubling the axis. The lattice is
shared, so its padding follows the shortest baseline while the box follows the longest:
uncapped, a zero-fringe-rate baseline would stretch the lattice to several times the axis and
the long baselines' box with it. With the cap, a process correlated over more than the
observation keeps some correlation between its two ends (the data pin such slow terms anyway).

Mode box: one shape (n_kf, n_kt) for all baselines, each axis from its largest knee, truncated
where the relative power falls below ``cutoff``. A baseline's modes below the cutoff of its own
spectrum get zero weight: their parameters only feel the prior.

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
      bandwidth_hz: None (each baseline's delay knee from the field, the default), or one
        correlation bandwidth (Hz) of a Gaussian kernel in frequency for every baseline. A sky
        field of radius theta seen on a baseline of length |b| decorrelates over about
        c / (2 pi |b| theta): 190 kHz for 1.5 km and 10 degrees.
      knee_factor: the knees as multiples of the baseline's maximum sky fringe rate (time)
        and delay (frequency).
      rolloff: std of the Gaussian roll-off beyond a knee, as a fraction of the knee.
      cutoff: relative power (per axis) below which modes are dropped, in (0, 1).
      wrap_tolerance: wrapped correlation allowed by the padding, in (0, 1).

    The prior's scale is not a setting of its own: ``make_constants`` takes it per baseline
    (``joint.ModelConfig.sky_sigma``, or estimated from the data).
    """

    bandwidth_hz: float | None = option_field(
        None,
        "correlation bandwidth in frequency; null = each baseline's from its largest sky delay",
        "Hz",
        min=1.0,
    )
    knee_factor: float = option_field(
        1.0, "knees, multiples of the baseline's largest sky fringe rate and delay", min=0.01
    )
    rolloff: float = option_field(0.25, "roll-off beyond the knee, fraction of the knee", min=0.01)
    cutoff: float = option_field(
        1.0e-3, "relative power below which modes are dropped", min=1e-12, max=0.5
    )
    wrap_tolerance: float = 1.0e-3

    def __post_init__(self):
        for name in ("bandwidth_hz", "knee_factor", "rolloff"):
            if name == "bandwidth_hz" and self.bandwidth_hz is None:
                continue
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
    weight_freq: (n_bl, n_kf) real; weight_time: (n_bl, n_kt) real; scale: (n_bl,) real;
    mean: (n_bl,) complex.
    """

    dft_freq: jax.Array
    dft_time: jax.Array
    weight_freq: jax.Array
    weight_time: jax.Array
    scale: jax.Array
    mean: jax.Array


#: SkyConstants fields with a leading baseline axis (sharded with the baselines).
BASELINE_FIELDS = ("weight_freq", "weight_time", "scale", "mean")


#: The knees' floor in cycles over the data's extent on each axis (module docstring).
FLOOR_CYCLES = 0.25


def _knee(config: SkyConfig, bound: np.ndarray, n: int, delta: float) -> np.ndarray:
    """knee_factor x the per-baseline bound, at least FLOOR_CYCLES over n cells of ``delta``."""
    return np.maximum(config.knee_factor * bound, FLOOR_CYCLES / (n * delta))


def _check_bound(values, name: str, unit: str) -> np.ndarray:
    rate = np.asarray(values, dtype=np.float64)
    if rate.ndim != 1 or rate.size == 0:
        raise ValueError(f"{name} has shape {rate.shape}; expected (n_bl,) with n_bl > 0")
    if not np.all(np.isfinite(rate) & (rate >= 0)):
        bad = int(np.flatnonzero(~(np.isfinite(rate) & (rate >= 0)))[0])
        raise ValueError(f"{name}[{bad}] = {rate[bad]!r}; it must be finite and >= 0 {unit}")
    return rate


def _check_bounds(config: SkyConfig, fringe_rate_hz, delay_s):
    rate = _check_bound(fringe_rate_hz, "fringe_rate_hz", "Hz")
    if config.bandwidth_hz is not None:
        return rate, None
    if delay_s is None:
        raise ValueError(
            "the sky's frequency knee follows each baseline's largest sky delay: pass delay_s "
            "(n_bl,) in s (geometry.max_sky_delay_s), or set SkyConfig.bandwidth_hz"
        )
    delay = _check_bound(delay_s, "delay_s", "s")
    if delay.shape != rate.shape:
        raise ValueError(
            f"delay_s has shape {delay.shape} and fringe_rate_hz {rate.shape}; "
            "both are (n_bl,) for the same baselines"
        )
    return rate, delay


def _edge_lattice(config: SkyConfig, knee: np.ndarray, n: int, delta: float) -> tuple[int, int]:
    """(N, J) of an edge spectrum: padding from the smallest knee, box from the largest."""
    length = 1.0 / (2.0 * np.pi * config.rolloff * knee.min())
    n_padded = _fourier.padded_size(
        n, delta, _fourier.decorrelation_lag(length, config.wrap_tolerance), n
    )
    x = np.arange((n_padded + 1) // 2) / (n_padded * delta)
    power = _fourier.edge_spectrum(x, knee.max(), config.rolloff * knee.max())
    return n_padded, _fourier.kept_half_width(power, config.cutoff, n_padded)


def _edge_weights(config, knee, n_padded, delta, half_width) -> np.ndarray:
    """Unit-variance amplitudes (n_bl, 2J + 1) of each baseline's edge spectrum, zero below
    the cutoff."""
    x = _fourier.mode_frequencies(n_padded, delta, half_width)
    knee = knee[:, None]
    power = _fourier.edge_spectrum(np.abs(x), knee, config.rolloff * knee)
    return _fourier.normalised_weights(np.where(power >= config.cutoff, power, 0.0))


def make_grid(
    config: SkyConfig,
    fringe_rate_hz,
    n_freq: int,
    n_time: int,
    chan_width: float,
    int_time: float,
    *,
    delay_s=None,
) -> SkyGrid:
    """Padded lattice and mode box for all baselines (host, float64).

    fringe_rate_hz, delay_s: (n_bl,) maximum sky fringe rate (Hz) and delay (s) of every
    baseline of the observation (``geometry.max_sky_fringe_rate``, ``max_sky_delay_s``), all of
    them, not one block: the padding follows the smallest knee and the box the largest.
    delay_s may be None when ``config.bandwidth_hz`` is set.
    chan_width: channel spacing (Hz); int_time: integration time (s).
    """
    rate, delay = _check_bounds(config, fringe_rate_hz, delay_s)
    if n_freq < 1 or n_time < 1 or not (chan_width > 0 and int_time > 0):
        raise ValueError(
            f"sky grid: n_freq={n_freq}, n_time={n_time}, chan_width={chan_width}, "
            f"int_time={int_time}; expected positive sizes and spacings"
        )
    if delay is None:
        n_f, half_f = _fourier.gaussian_lattice(
            n_freq, chan_width, config.bandwidth_hz, config.cutoff, config.wrap_tolerance, n_freq
        )
    else:
        n_f, half_f = _edge_lattice(
            config, _knee(config, delay, n_freq, chan_width), n_freq, chan_width
        )
    n_t, half_t = _edge_lattice(config, _knee(config, rate, n_time, int_time), n_time, int_time)
    return SkyGrid(n_freq, n_time, float(chan_width), float(int_time), n_f, n_t, half_f, half_t)


def make_constants(
    config: SkyConfig,
    grid: SkyGrid,
    fringe_rate_hz,
    *,
    delay_s=None,
    scale=1.0,
    mean=0.0,
    dtype=np.float64,
) -> SkyConstants:
    """Constants of ``forward`` for a set of baselines (all of them, or one block of rows).

    fringe_rate_hz, delay_s: (n_bl,) maximum sky fringe rate (Hz) and delay (s) of these
    baselines (delay_s may be None when ``config.bandwidth_hz`` is set).
    scale: prior std of |V - mean| per cell, scalar or (n_bl,) (data units, e.g. Jy).
    mean: scalar or (n_bl,) complex constant per baseline (e.g. ``mean_from_data``).
    dtype: real dtype, float32 or float64; complex arrays get the matching complex dtype.
    """
    rate, delay = _check_bounds(config, fringe_rate_hz, delay_s)
    n_bl = rate.size
    real = np.dtype(dtype)
    cplx = np.result_type(real, np.complex64)
    scale = np.broadcast_to(scale, (n_bl,))
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError("sky scale must be finite and > 0 for every baseline")
    mean = np.broadcast_to(np.asarray(mean, dtype=np.complex128), (n_bl,))
    if delay is None:
        weight_freq = _fourier.gaussian_weights(
            grid.n_freq_padded, grid.chan_width, grid.half_freq, config.bandwidth_hz
        )
        weight_freq = np.broadcast_to(weight_freq, (n_bl, weight_freq.size))
    else:
        knee_f = _knee(config, delay, grid.n_freq, grid.chan_width)
        weight_freq = _edge_weights(
            config, knee_f, grid.n_freq_padded, grid.chan_width, grid.half_freq
        )
    knee_t = _knee(config, rate, grid.n_time, grid.int_time)
    weight_time = _edge_weights(config, knee_t, grid.n_time_padded, grid.int_time, grid.half_time)
    return SkyConstants(
        dft_freq=jnp.asarray(
            _fourier.dft_matrix(grid.n_freq, grid.n_freq_padded, grid.half_freq), cplx
        ),
        dft_time=jnp.asarray(
            _fourier.dft_matrix(grid.n_time, grid.n_time_padded, grid.half_time), cplx
        ),
        weight_freq=jnp.asarray(weight_freq, real),
        weight_time=jnp.asarray(weight_time, real),
        scale=jnp.asarray(scale, real),
        mean=jnp.asarray(mean, cplx),
    )


def init(constants: SkyConstants, key: jax.Array | None = None) -> SkyParams:
    """Whitened sky parameters: zeros (V = mean) or, given a PRNG key, a prior draw."""
    n_bl, n_kt = constants.weight_time.shape
    shape = (n_bl, 2, constants.weight_freq.shape[1], n_kt)
    return SkyParams(_whitened.draw(key, shape, constants.weight_time.dtype))


def _amplitude(constants: SkyConstants) -> jax.Array:
    """scale[b] w_f[k] w_t[b, j], shape (n_bl, n_kf, n_kt) real."""
    return (
        constants.scale[:, None, None]
        * constants.weight_freq[:, :, None]
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
