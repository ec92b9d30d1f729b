"""The noise of visibilities: from a Measurement Set's SIGMA or WEIGHT columns, or estimated
from the visibilities themselves. Plain numpy (no casacore), so it serves any source of data.

tabascal's noise is the standard deviation of each of the real and imaginary parts of a
visibility (:mod:`tabascal.model.likelihood`), one value per baseline, or one per baseline and
channel.

**Columns.** CASA's SIGMA is that standard deviation and ``WEIGHT = 1 / SIGMA^2``, so a weight
gives ``noise = 1 / sqrt(WEIGHT)`` (infinite where the weight is 0). Since CASA 4.2.2 SIGMA
and SIGMA_SPECTRUM describe DATA and WEIGHT and WEIGHT_SPECTRUM describe CORRECTED_DATA
(calibration rescales the weights, not the sigmas); a per-channel column is preferred to its
per-row one (:func:`noise_columns`). Many writers fill these columns with placeholders (SIGMA
= 1 and WEIGHT = 1 everywhere, or WEIGHT holding sample counts): :func:`is_placeholder` says
when a column says nothing of the noise's scale.

**Estimate.** Adjacent cells of a baseline, along time (or frequency), differ by their noise
and by how much the signal changes between them. Where the signal changes by less than the
noise from one cell to the next, the difference ``d = v[k+1] - v[k]`` of two unflagged cells
is noise of standard deviation ``sqrt(2) sigma`` in each of its real and imaginary parts, and
the median of their absolute values is robust to the cells where it does not (RFI, impulses).
Differences of noise have zero mean, so the absolute values are taken about zero rather than
about the sample median, which would absorb part of the noise: with 26 samples the estimate
is then 1.4 % high instead of 7 % low (20000 simulated baselines each). Per baseline::

    sigma = MAD_TO_STD * median(|Re d|, |Im d|) / sqrt(2)

whose relative scatter is ``1.17 / sqrt(n)`` for n samples (the median's efficiency is 37 % of
the standard deviation's for Gaussian samples; Rousseeuw & Croux 1993, JASA 88, 1273). What
the rest does to it (simulated, 200 baselines of 64 x 30 cells each): a signal changing by
0.25, 0.5, 1 or 2 sigma between every pair of adjacent cells raises it by 1, 3, 12 or 51 %;
impulses in 1, 5 or 20 % of the cells by 1, 6 or 23 %. A signal that winds faster than the
noise in most cells (a bright satellite fringing on long baselines, say) therefore needs the
noise from elsewhere.

**Per-antenna factors.** By the radiometer equation the noise of baseline (p, q) is
``sqrt(SEFD_p SEFD_q / (2 chan_width int_time))``, so ``log sigma_pq = (x_p + x_q) / 2`` with
one x per antenna. :func:`antenna_noise` fits the per-baseline estimates to that by weighted
least squares in log (weights the sample counts, to which the inverse variance of a log
estimate is proportional; each log corrected for its mean, ``-LOG_BIAS / n``) and returns the
fitted value of every baseline: a baseline's noise then rests on all the baselines of its two
antennas instead of its own few samples. On the test data's HERA-19 file (3 integrations, 256
channels: 1024 samples a baseline) the per-baseline estimates spread by 15 % (uncalibrated
antennas differ) and by 3.5 % about the fit, as their sampling (3.7 %) predicts; on the MWA
file (2 integrations, 13 unflagged channels: 26 samples) by 22 % about it, their sampling's
23 %. The factors explain the variation between baselines, and with the MWA file's sizes they
cut a baseline's error from 23 % to 3 % (simulated: test_measurement_set_noise.py).

**Per channel.** A receiver's noise varies across the band (its bandpass, the sky's spectrum,
the band's edges), so each channel may have a noise of its own: :func:`channel_noise` makes
the same estimate within each channel, from differences of adjacent integrations only (a
channel's noise cannot be told from the next channel's by differencing across them), and
:func:`antenna_noise_per_channel` fits per-antenna factors to each channel's estimates. With
n_time integrations a cell's estimate rests on ``2 (n_time - 1)`` samples: 15 % scatter at 30
integrations, 1.17 / sqrt(58), before the fit pools a channel's baselines.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

MAD_TO_STD = 1.4826  # 1 / Phi^-1(3/4): a Gaussian's median absolute deviation is 0.6745 sigma
MIN_SAMPLES = 10  # fewest samples for a baseline's estimate to enter the fit (37 % scatter)
LOG_BIAS = 0.33  # E[log estimate / sigma] = -LOG_BIAS / n for n = 16 to 100 samples (within
# 0.06; 200000 simulated baselines each): the median's small-sample bias less the log's
SAMPLING_SCATTER = 1.17  # relative scatter of one estimate, times sqrt(n samples)
SPECTRUM_COLUMNS = ("SIGMA_SPECTRUM", "WEIGHT_SPECTRUM")
ROW_COLUMNS = ("SIGMA", "WEIGHT")


def noise_columns(data_column: str, present) -> list[str]:
    """The noise columns of ``present`` (names) that describe ``data_column``, best first:
    for CORRECTED_DATA WEIGHT_SPECTRUM then WEIGHT (CASA's convention since 4.2.2, see the
    module); for any other column SIGMA_SPECTRUM, WEIGHT_SPECTRUM, SIGMA, then WEIGHT (a
    per-channel column before a per-row one, a sigma before a weight)."""
    if data_column == "CORRECTED_DATA":
        order = ("WEIGHT_SPECTRUM", "WEIGHT")
    else:
        order = ("SIGMA_SPECTRUM", "WEIGHT_SPECTRUM", "SIGMA", "WEIGHT")
    return [name for name in order if name in present]


def noise_from_column(name: str, values: np.ndarray) -> np.ndarray:
    """The noise standard deviation (float64, same shape) that column ``name`` holds:
    SIGMA(_SPECTRUM) as it is, WEIGHT(_SPECTRUM) as ``1 / sqrt(WEIGHT)`` (inf where 0)."""
    values = np.asarray(values, dtype=np.float64)
    if name.startswith("SIGMA"):
        return values
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(values)


def quadratic_mean(noise: np.ndarray, usable: np.ndarray):
    """Per-baseline noise from the noise of its cells (or rows): the quadratic mean over the
    usable ones, over every finite positive one where a baseline has none usable.

    noise: (n_bl, ...) float64; usable: the same shape, bool (unflagged, with a finite positive
    noise). Returns the noise (n_bl,) float64 (NaN where a baseline has no finite positive
    value) and its spread (n_bl,), (largest - smallest) / quadratic mean over those cells.
    """
    n_bl = noise.shape[0]
    noise = noise.reshape(n_bl, -1)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(noise) & (noise > 0)
    usable = usable.reshape(n_bl, -1) & valid
    none = ~usable.any(axis=1)
    usable[none] = valid[none]
    counts = usable.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.sqrt(np.sum(np.where(usable, noise, 0.0) ** 2, axis=1) / counts)
    kept = np.where(usable, noise, np.nan)
    some = counts > 0
    spread = np.zeros(n_bl)
    spread[some] = (np.nanmax(kept[some], axis=1) - np.nanmin(kept[some], axis=1)) / mean[some]
    return mean, spread


def channel_quadratic_mean(noise: np.ndarray, usable: np.ndarray):
    """Per baseline and channel noise from the noise of its cells: :func:`quadratic_mean`'s
    rule within each channel, over the integrations. A channel without a finite positive value
    on a baseline (a weight of 0 throughout, whose cells are read as flagged) takes that
    baseline's quadratic mean over its other channels.

    noise, usable: (n_bl, n_chan, n_time) as for :func:`quadratic_mean`. Returns the noise
    (n_bl, n_chan) float64 (NaN where a baseline has no finite positive value at all) and its
    spread (n_bl, n_chan) in time.
    """
    n_bl, n_chan, n_time = noise.shape
    mean, spread = quadratic_mean(
        noise.reshape(n_bl * n_chan, n_time), usable.reshape(n_bl * n_chan, n_time)
    )
    mean, spread = mean.reshape(n_bl, n_chan), spread.reshape(n_bl, n_chan)
    known = np.isfinite(mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        fill = np.sqrt(np.sum(np.where(known, mean, 0.0) ** 2, axis=1) / known.sum(axis=1))
    return np.where(known, mean, fill[:, None]), spread


def is_placeholder(name: str, lowest: float, highest: float) -> bool:
    """Whether column ``name``, whose values span [lowest, highest], says nothing of the
    noise's scale: a SIGMA of 1 everywhere is a writer's default, and a constant WEIGHT is a
    relative weight (often a sample count), not an inverse variance."""
    if lowest != highest:
        return False
    return lowest == 1 or name.startswith("WEIGHT")


def placeholder_text(found) -> str:
    """Why the columns ``found``, (name, value everywhere) pairs, are placeholders, e.g.
    ``SIGMA is 1 everywhere (a default, not a measurement)``."""
    by_value: dict[float, list[str]] = {}
    for name, value in found:
        by_value.setdefault(value, []).append(name)
    parts = []
    for value, names in by_value.items():
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        parts.append(f"{listed} {'is' if len(names) == 1 else 'are'} {value:g} everywhere")
    sigmas = any(name.startswith("SIGMA") for name, _ in found)
    weights = any(name.startswith("WEIGHT") for name, _ in found)
    if len(found) == 1:
        kind = "a default, not a measurement" if sigmas else "a relative weight, not a measurement"
    elif sigmas and weights:
        kind = "defaults and relative weights, not measurements"
    else:
        kind = "defaults, not measurements" if sigmas else "relative weights, not measurements"
    return f"{'; '.join(parts)} ({kind})"


def baseline_noise(vis: np.ndarray, flags: np.ndarray, axis: int = -1):
    """Robust noise per baseline from differences of adjacent cells along ``axis`` (see the
    module).

    vis: (n_bl, n_chan, n_time) complex; flags: the same shape, True where bad (both cells
    of a difference must be unflagged); axis: 1 (channels) or 2 / -1 (integrations).
    Returns noise (n_bl,) float64, the standard deviation of each of the real and imaginary
    parts (NaN where a baseline has no sample), and n_samples (n_bl,) int64, the real and
    imaginary parts of differences used (two a difference).
    """
    vis = np.moveaxis(np.asarray(vis), axis, -1)
    flags = np.moveaxis(np.asarray(flags, dtype=bool), axis, -1)
    n_bl = vis.shape[0]
    diff = (vis[..., 1:] - vis[..., :-1]).reshape(n_bl, -1)
    good = (~flags[..., 1:] & ~flags[..., :-1]).reshape(n_bl, -1)
    return _difference_noise(diff, good)


def _difference_noise(diff: np.ndarray, good: np.ndarray):
    """``MAD_TO_STD median(|Re d|, |Im d|) / sqrt(2)`` over the last axis of the differences
    ``diff`` where ``good``: the noise (NaN where there is no sample) and the samples used."""
    parts = np.abs(np.concatenate([diff.real, diff.imag], axis=-1), dtype=np.float64)
    good = np.concatenate([good, good], axis=-1)
    n_samples = good.sum(axis=-1)
    noise = np.full(n_samples.shape, np.nan)
    some = n_samples > 0
    median = np.nanmedian(np.where(good[some], parts[some], np.nan), axis=-1)
    noise[some] = MAD_TO_STD * median / np.sqrt(2)
    return noise, n_samples


class AntennaNoise(NamedTuple):
    """The noise of every baseline from per-antenna factors (:func:`antenna_noise`).

    noise: (n_bl,) float64, ``sqrt(s[a1] s[a2])``. antenna_factor: (n_ant,) s, the noise of a
    baseline between two antennas like p (the median of the others where antenna p has no
    baseline of at least MIN_SAMPLES samples). scatter: rms of log(estimate / noise) over the
    baselines fitted; expected_scatter: what their sampling alone gives (both ~ relative).
    """

    noise: np.ndarray
    antenna_factor: np.ndarray
    scatter: float
    expected_scatter: float


def antenna_noise(noise_bl, n_samples, a1, a2, n_ant: int) -> AntennaNoise:
    """Fit per-baseline estimates to per-antenna factors, ``sigma_pq = sqrt(s_p s_q)``.

    noise_bl, n_samples: (n_bl,) from :func:`baseline_noise`; a1, a2: (n_bl,) antenna indices
    in [0, n_ant). Weighted least squares in log with weights n_samples, over the baselines
    with at least MIN_SAMPLES samples and a finite positive estimate; the minimum-norm
    solution where the antennas' baselines do not determine each factor (two antennas, one
    baseline: both factors are that baseline's noise). Raises ValueError when no baseline has
    enough samples.
    """
    noise_bl = np.asarray(noise_bl, dtype=np.float64)
    a1, a2 = np.asarray(a1), np.asarray(a2)
    with np.errstate(invalid="ignore"):
        used = (np.asarray(n_samples) >= MIN_SAMPLES) & (noise_bl > 0) & np.isfinite(noise_bl)
    if not used.any():
        raise ValueError(
            f"no baseline has {MIN_SAMPLES} unflagged samples to estimate its noise from "
            f"(the most is {int(np.max(n_samples, initial=0))})"
        )
    w = np.where(used, n_samples, 0).astype(np.float64)
    y = np.log(np.where(used, noise_bl, 1.0)) + np.where(used, LOG_BIAS / np.maximum(w, 1), 0)
    normal = np.zeros((n_ant, n_ant))
    for p, q in ((a1, a1), (a1, a2), (a2, a1), (a2, a2)):
        np.add.at(normal, (p, q), w / 4)
    rhs = np.zeros(n_ant)
    np.add.at(rhs, a1, w * y / 2)
    np.add.at(rhs, a2, w * y / 2)
    x = np.linalg.lstsq(normal, rhs, rcond=None)[0]
    seen = np.zeros(n_ant, bool)
    seen[a1[used]] = seen[a2[used]] = True
    x[~seen] = np.median(x[seen])
    model = (x[a1] + x[a2]) / 2
    residual = (y - model)[used]
    return AntennaNoise(
        noise=np.exp(model),
        antenna_factor=np.exp(x),
        scatter=float(np.sqrt(np.average(residual**2, weights=w[used]))),
        expected_scatter=float(
            SAMPLING_SCATTER * np.sqrt(np.average(1.0 / n_samples[used], weights=w[used]))
        ),
    )


def estimate_noise(vis, flags, a1, a2, n_ant: int, axis: int = -1) -> AntennaNoise:
    """The noise of every baseline of in-memory visibilities (n_bl, n_chan, n_time):
    :func:`baseline_noise` along ``axis``, fitted by :func:`antenna_noise`."""
    noise_bl, n_samples = baseline_noise(vis, flags, axis)
    return antenna_noise(noise_bl, n_samples, a1, a2, n_ant)


def channel_noise(vis: np.ndarray, flags: np.ndarray):
    """Robust noise per baseline and channel from differences of adjacent integrations within
    each channel (:func:`baseline_noise`'s estimator, channel by channel).

    vis: (n_bl, n_chan, n_time) complex; flags: the same shape, True where bad. Returns noise
    (n_bl, n_chan) float64 (NaN where a cell has no sample) and n_samples (n_bl, n_chan) int64,
    the real and imaginary parts of differences used.
    """
    vis = np.asarray(vis)
    flags = np.asarray(flags, dtype=bool)
    return _difference_noise(vis[..., 1:] - vis[..., :-1], ~flags[..., 1:] & ~flags[..., :-1])


class ChannelNoise(NamedTuple):
    """The noise of every baseline and channel from per-antenna factors per channel
    (:func:`antenna_noise_per_channel`).

    noise: (n_bl, n_chan) float64. antenna_factor: (n_ant, n_chan). fitted: (n_chan,) bool,
    the channels with a baseline of at least MIN_SAMPLES samples; every other channel holds,
    on each baseline, the median of that baseline's fitted channels. scatter,
    expected_scatter: the rms over the fitted channels of each channel's
    :class:`AntennaNoise` figures.
    """

    noise: np.ndarray
    antenna_factor: np.ndarray
    fitted: np.ndarray
    scatter: float
    expected_scatter: float


def antenna_noise_per_channel(noise, n_samples, a1, a2, n_ant: int) -> ChannelNoise:
    """:func:`antenna_noise` channel by channel: noise, n_samples (n_bl, n_chan) from
    :func:`channel_noise`; a1, a2: (n_bl,) antenna indices in [0, n_ant). A channel with no
    baseline of MIN_SAMPLES samples (flagged throughout, say) has nothing to fit and takes each
    baseline's median over the other channels. Raises ValueError when no channel has one."""
    noise, n_samples = np.asarray(noise, np.float64), np.asarray(n_samples)
    n_bl, n_chan = noise.shape
    out = np.full((n_bl, n_chan), np.nan)
    factor = np.full((n_ant, n_chan), np.nan)
    fitted = np.zeros(n_chan, bool)
    scatter, expected = [], []
    for f in range(n_chan):
        try:
            fit = antenna_noise(noise[:, f], n_samples[:, f], a1, a2, n_ant)
        except ValueError:
            continue
        out[:, f], factor[:, f], fitted[f] = fit.noise, fit.antenna_factor, True
        scatter.append(fit.scatter)
        expected.append(fit.expected_scatter)
    if not fitted.any():
        raise ValueError(
            f"no channel has a baseline of {MIN_SAMPLES} unflagged samples to estimate its "
            f"noise from (the most is {int(np.max(n_samples, initial=0))})"
        )
    out[:, ~fitted] = np.median(out[:, fitted], axis=1, keepdims=True)
    factor[:, ~fitted] = np.median(factor[:, fitted], axis=1, keepdims=True)
    return ChannelNoise(
        noise=out,
        antenna_factor=factor,
        fitted=fitted,
        scatter=float(np.sqrt(np.mean(np.square(scatter)))),
        expected_scatter=float(np.sqrt(np.mean(np.square(expected)))),
    )
