"""The noise a run fits with (config key ``data.noise``): the store's, or estimated from the
data when the run starts.

A store from elsewhere, or one imported with a placeholder SIGMA of 1, need not be imported
again: with ``data.noise: estimate`` each baseline's noise is replaced, before the model is
built, by the estimate import-ms makes with ``--noise estimate``
(:mod:`tabascal.measurement_set.noise`): the robust spread of differences of adjacent
integrations (adjacent channels when there is one integration), fitted to per-antenna factors.
With ``data.noise_per_channel: true`` the estimate is per baseline and channel, as import-ms
makes it with ``--noise estimate --noise-per-channel``: within each channel, from adjacent
integrations, with per-antenna factors fitted channel by channel. The rows are read a store
chunk at a time; in a run of several processes each process reads a share of the chunks, and
the per-baseline figures are gathered so that every process fits the same factors. The
estimate then stands in for the store's noise wherever the run reads rows: the statistics that
size the model, the likelihood, the reduced chi-squared.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import jax
import numpy as np

from tabascal.config import ConfigError
from tabascal.measurement_set import noise as ms_noise
from tabascal.measurement_set.reader import SCATTER_WARNING
from tabascal.parallel import blockwise, processes
from tabascal.store.format import default_chunk_rows

logger = logging.getLogger(__name__)

NOISE_SOURCES = ("store", "estimate")


@dataclass(frozen=True)
class EstimatedNoise:
    """The rows of ``rows`` (a ``blockwise.RowSource``) with the noise (n_bl,) or (n_bl,
    n_freq) float64 ``noise`` in place of their own; ``record``: what summary.json says of
    it."""

    rows: object
    noise: np.ndarray
    record: dict

    @property
    def meta(self):
        return self.rows.meta

    @property
    def noise_per_channel(self) -> bool:
        return self.noise.ndim == 2

    def read(self, rows: np.ndarray) -> blockwise.HostRows:
        host = self.rows.read(rows)
        if host is None:
            return None
        return host._replace(noise=self.noise[np.asarray(rows, np.int64)])

    @property
    def has_truth(self) -> bool:
        return self.rows.has_truth

    def read_truth(self, rows: np.ndarray):
        return self.rows.read_truth(rows)

    def whole(self, obs):
        """``obs``, every row of ``rows``, with the estimated noise."""
        return dataclasses.replace(obs, noise=self.noise)


def _baseline_estimates(source, axis: int, rows_per_read: int | None, per_channel: bool):
    """Per-baseline estimates, their sample counts and the source's own noise, each (n_bl,)
    (per channel: (n_bl, n_freq)), from this process's share of the row chunks, gathered from
    every process."""
    meta = source.meta
    step = rows_per_read or default_chunk_rows(meta.n_freq, meta.n_time)
    starts = range(0, meta.n_bl, step)
    n_processes, here = processes.process_count(), jax.process_index()
    # Each row is read by one process; the others leave it 0, so the gathered sum is its value.
    found = np.zeros((3, meta.n_bl, meta.n_freq) if per_channel else (3, meta.n_bl))
    for start in starts[here::n_processes]:
        rows = np.arange(start, min(start + step, meta.n_bl))
        host = source.read(rows)
        if per_channel:
            estimate, n_samples = ms_noise.channel_noise(host.vis, host.flags)
            own = np.broadcast_to(host.noise.reshape(rows.size, -1), estimate.shape)
        else:
            estimate, n_samples = ms_noise.baseline_noise(host.vis, host.flags, axis)
            own = host.noise if host.noise.ndim == 1 else np.median(host.noise, axis=1)
        found[:, rows] = estimate, n_samples, own
    noise_bl, n_samples, own = processes.gather_exact(found).sum(axis=0)
    return noise_bl, n_samples.astype(np.int64), own


def estimate(source, rows_per_read: int | None = None, *, per_channel: bool = False):
    """``source`` with its noise replaced by the estimate from its data (see the module), an
    ``EstimatedNoise``; per_channel: per baseline and channel. Raises ConfigError when no
    baseline has enough unflagged samples, or a per-channel estimate one integration."""
    meta = source.meta
    axis, along = (2, "integrations") if meta.n_time > 1 else (1, "channels")
    if per_channel and meta.n_time == 1:
        raise ConfigError(
            "data.noise_per_channel: true estimates each channel's noise from differences of "
            "adjacent integrations, and the observation has one; set "
            "data.noise_per_channel: false (adjacent channels give one noise per baseline)"
        )
    noise_bl, n_samples, own = _baseline_estimates(source, axis, rows_per_read, per_channel)
    fit_noise = ms_noise.antenna_noise_per_channel if per_channel else ms_noise.antenna_noise
    try:
        fit = fit_noise(noise_bl, n_samples, meta.a1, meta.a2, meta.n_ant)
    except ValueError as err:
        raise ConfigError(
            f"data.noise: estimate: cannot estimate the noise from differences of adjacent "
            f"{along}: {err}; give the noise in the store and set data.noise: store"
        ) from None
    record = {
        "noise": "estimate",
        "per_channel": per_channel,
        "axis": along,
        "median_noise_estimated": float(np.median(fit.noise)),
        "median_noise_store": float(np.median(own)),
        "scatter": fit.scatter,
        "expected_scatter": fit.expected_scatter,
    }
    if fit.scatter > SCATTER_WARNING * fit.expected_scatter:
        logger.warning(
            "data.noise: estimate: the baselines' noise estimates scatter by %.1f %% about "
            "per-antenna factors, %.1f times what their sampling gives (%.1f %%): some "
            "baselines hold signal that changes between adjacent %s by more than the noise, "
            "which raises their estimate",
            100 * fit.scatter,
            fit.scatter / fit.expected_scatter,
            100 * fit.expected_scatter,
            along,
        )
    logger.info(
        "noise estimated from adjacent-%s differences: median %.4g against the store's %.4g; "
        "the baselines' estimates scatter by %.1f %% about per-antenna factors (%.1f %% "
        "expected from their samples)",
        along,
        record["median_noise_estimated"],
        record["median_noise_store"],
        100 * fit.scatter,
        100 * fit.expected_scatter,
    )
    return EstimatedNoise(source, fit.noise, record)


def noise_source(source, *, noise: str, noise_per_channel: bool):
    """The rows the run fits: ``source`` itself (``noise`` store, the config's
    ``data.noise``), or with its noise estimated from its data (``estimate``; per baseline and
    channel with ``noise_per_channel``). Refuses ``noise_per_channel`` with the store's noise,
    whose form is the store's."""
    if noise != "estimate":
        if noise_per_channel:
            raise ConfigError(
                "data.noise_per_channel: true asks for the estimate per channel, but data.noise "
                "is store, whose noise is taken in the form the store holds it; set "
                "data.noise: estimate, or data.noise_per_channel: false"
            )
        return source
    with processes.stage("estimating the noise from the data"):
        return estimate(source, per_channel=noise_per_channel)


def summary(source) -> dict:
    """summary.json's ``data``: where the noise came from (and, estimated, its medians and
    whether it is per channel); the store's noise per baseline and channel adds
    ``per_channel: true``."""
    if isinstance(source, EstimatedNoise):
        return dict(source.record)
    if source.noise_per_channel:
        return {"noise": "store", "per_channel": True}
    return {"noise": "store"}
