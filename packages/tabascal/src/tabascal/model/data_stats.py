"""Statistics of the observed data that the model's set-up reads, mergeable across row blocks.

The set-up needs a handful of scalars from the visibilities: the RFI signal-to-noise that
sizes the fine sampling (largest unflagged |V| over the smallest noise), the typical RFI level
(the 99th percentile of unflagged |V|), the sky prior's floor (the median noise) and the number
of unflagged points. A noise per baseline and channel counts as one value per (baseline,
channel): its minimum is the smallest cell's and its median the median over those values, each
counted once whatever the number of integrations or flags of its channel. A multi-process run
holds only its own rows, so every statistic here is built from one block of rows
(``from_rows``) and combined with another block's (``merge``): maxima, minima, counts and
histograms, never a sort of all the data.

Percentiles come from fixed logarithmic histograms (``BINS_PER_OCTAVE`` bins per factor of two
over 2^-64 .. 2^64, the same bins in every block, so merging adds counts), interpolated within
the bin: within 2.2 % of the exact percentile, the bin's width, and unaffected by the order in
which blocks arrive.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

BINS_PER_OCTAVE = 32
OCTAVES = (-64, 64)
N_BINS = BINS_PER_OCTAVE * (OCTAVES[1] - OCTAVES[0])
_CHUNK_CELLS = 1 << 22  # cells per pass over the rows: bounds the temporaries to ~50 MB


def log_histogram(values: np.ndarray) -> np.ndarray:
    """(N_BINS,) int64 counts of ``values`` (>= 0) in the fixed log bins; 0 and below go to bin 0,
    values past 2^64 to the last bin."""
    with np.errstate(divide="ignore"):
        position = (np.log2(np.asarray(values, np.float64)) - OCTAVES[0]) * BINS_PER_OCTAVE
    index = np.clip(np.nan_to_num(position, nan=0.0, neginf=0.0), 0, N_BINS - 1).astype(np.int64)
    return np.bincount(index.ravel(), minlength=N_BINS)


def histogram_percentile(counts: np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0..100) of the values counted in ``counts`` (``log_histogram``),
    interpolated log-linearly within its bin, with the rank ``q/100 (N - 1)`` of numpy's
    default (linear) method. NaN when nothing was counted."""
    total = int(counts.sum())
    if total == 0:
        return float("nan")
    rank = q / 100.0 * (total - 1)
    cumulative = np.cumsum(counts)
    b = int(np.searchsorted(cumulative, rank, side="right"))
    before = cumulative[b - 1] if b else 0
    fraction = (rank - before + 0.5) / counts[b]
    return float(2.0 ** (OCTAVES[0] + (b + fraction) / BINS_PER_OCTAVE))


class DataStats(NamedTuple):
    """Mergeable statistics of a block of rows (see the module docstring).

    peak_abs: largest unflagged |vis| (data units); min_noise: smallest noise std of the rows;
    n_points: unflagged cells; abs_counts: (N_BINS,) log histogram of unflagged |vis|;
    noise_counts: (N_BINS,) log histogram of the rows' noise std (one count per value: per row,
    or per row and channel).
    """

    peak_abs: float
    min_noise: float
    n_points: int
    abs_counts: np.ndarray
    noise_counts: np.ndarray

    @classmethod
    def from_rows(cls, vis, flags, noise) -> DataStats:
        """Statistics of the rows ``vis`` (n_rows, n_freq, n_time) complex, ``flags`` (same
        shape, bool, True where bad) and ``noise`` (n_rows,) or (n_rows, n_freq) std of the
        real and imaginary parts. Flagged cells are never read (they may hold NaN)."""
        vis, flags = np.asarray(vis), np.asarray(flags, bool)
        noise = np.asarray(noise, np.float64).reshape(-1)
        rows_per_pass = max(1, _CHUNK_CELLS // max(1, vis[0].size if len(vis) else 1))
        peak, n_points = 0.0, 0
        abs_counts = np.zeros(N_BINS, np.int64)
        for start in range(0, vis.shape[0], rows_per_pass):
            rows = slice(start, start + rows_per_pass)
            use = ~flags[rows]
            magnitude = np.abs(vis[rows][use])
            peak = max(peak, float(magnitude.max(initial=0.0)))
            n_points += int(magnitude.size)
            abs_counts += log_histogram(magnitude) if magnitude.size else 0
        return cls(
            peak_abs=peak,
            min_noise=float(noise.min(initial=np.inf)),
            n_points=n_points,
            abs_counts=abs_counts,
            noise_counts=log_histogram(noise),
        )

    def merge(self, other: DataStats) -> DataStats:
        """The statistics of both blocks of rows together."""
        return DataStats(
            peak_abs=max(self.peak_abs, other.peak_abs),
            min_noise=min(self.min_noise, other.min_noise),
            n_points=self.n_points + other.n_points,
            abs_counts=self.abs_counts + other.abs_counts,
            noise_counts=self.noise_counts + other.noise_counts,
        )

    @property
    def snr(self) -> float:
        """Largest unflagged |vis| over the smallest noise: an upper bound on the RFI power
        over the noise, which sizes the fine sampling (``rfi_vis.plan_groups``)."""
        return self.peak_abs / self.min_noise

    @property
    def noise_median(self) -> float:
        return histogram_percentile(self.noise_counts, 50.0)

    def rfi_level(self, n_src: int) -> float:
        """Typical per-antenna RFI amplitude (sqrt of data units).

        On the shortest baselines the RFI barely decorrelates, so |V| ~ n_src |A|^2 there; the
        99th percentile of unflagged |V| stands in for it.
        """
        return float(np.sqrt(max(histogram_percentile(self.abs_counts, 99.0), 1e-30) / n_src))


class MeanPower(NamedTuple):
    """Mergeable mean of |x|^2 over rows: total = sum |x|^2, count = rows."""

    total: float
    count: int

    @classmethod
    def from_rows(cls, values) -> MeanPower:
        values = np.asarray(values)
        return cls(float(np.sum(np.abs(values) ** 2)), int(values.size))

    def merge(self, other: MeanPower) -> MeanPower:
        return MeanPower(self.total + other.total, self.count + other.count)

    @property
    def rms(self) -> float:
        return float(np.sqrt(self.total / self.count)) if self.count else 0.0
