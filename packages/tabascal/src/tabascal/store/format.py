"""Names, dataclasses and sizes of the observation store format (see :mod:`tabascal.store`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tabascal import TabascalError
from tabascal.observation.geometry import Orbits

FORMAT = "tabascal.observation"
FORMAT_VERSION = 1
ORBIT_FIELDS = ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad")
TLE_ATTR = "satellite_tle"  # group attribute of stores whose satellites are TLE element sets
SCALAR_ATTRS = ("gast0_rad", "int_time", "chan_width", "ra_rad", "dec_rad", "dish_diameter_m")
CHUNK_BYTES = 16 * 2**20  # target size of one vis chunk
TRUTH_PER_ANTENNA = (
    "gains",
    "rfi_amp",
    "rfi_eirp_w_hz",
    "source_ra_rad",
    "source_dec_rad",
    "source_flux_jy",
)
TRUTH_DTYPES = {"gains": np.complex64, "rfi_amp": np.float32}  # the rest are float64


class StoreError(TabascalError, ValueError):
    """A path that is not a valid observation store; the message says what is wrong."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Truth:
    """What the simulator put in: visibilities of the rows read, per-antenna and sky truth.

    sky_vis, rfi_vis: (n_rows, n_freq, n_time) complex64 Jy, before gains and noise.
    gains: (n_ant, n_freq, n_time) complex64. rfi_amp: (n_ant, n_sat, n_freq, n_time) float32
    sqrt(Jy), the real amplitude A of ``S = A exp(2 pi i f tau)`` at cell centres (signed: the
    Airy voltage pattern changes sign across nulls). rfi_eirp_w_hz: (n_sat, n_freq, n_time)
    float64 W/Hz. source_ra_rad, source_dec_rad: (n_src,). source_flux_jy: (n_src, n_freq).
    """

    sky_vis: np.ndarray
    rfi_vis: np.ndarray
    gains: np.ndarray
    rfi_amp: np.ndarray
    rfi_eirp_w_hz: np.ndarray
    source_ra_rad: np.ndarray
    source_dec_rad: np.ndarray
    source_flux_jy: np.ndarray


@dataclass(frozen=True, eq=False, kw_only=True)
class ObservationMeta:
    """Everything but the visibility rows.

    a1, a2: (n_bl,) int32. ant_itrf: (n_ant, 3) float64 m. dish_diameter_m: station diameter.
    times_s: (n_time,) cell centres, s from the start. int_time: s. freqs_hz: (n_freq,) channel
    centres. chan_width: Hz. gast0_rad: Greenwich sidereal angle at the start; epoch_utc: the
    start, ISO 8601. ra_rad, dec_rad: phase centre. orbits: the satellites (CircularOrbits or
    tabascal.observation.tle.TleOrbits; none is ``CircularOrbits([], [], [], [])``). metadata:
    JSON dict.
    """

    a1: np.ndarray
    a2: np.ndarray
    ant_itrf: np.ndarray
    dish_diameter_m: float
    times_s: np.ndarray
    int_time: float
    freqs_hz: np.ndarray
    chan_width: float
    gast0_rad: float
    epoch_utc: str
    ra_rad: float
    dec_rad: float
    orbits: Orbits
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def n_bl(self) -> int:
        return self.a1.shape[0]

    @property
    def n_ant(self) -> int:
        return self.ant_itrf.shape[0]

    @property
    def n_freq(self) -> int:
        return self.freqs_hz.shape[0]

    @property
    def n_time(self) -> int:
        return self.times_s.shape[0]

    @property
    def n_sat(self) -> int:
        return self.orbits.n_sat


@dataclass(frozen=True, eq=False, kw_only=True)
class Observation(ObservationMeta):
    """An observation, or the block of baseline ``rows`` read from one.

    a1, a2 (and so n_bl), vis, flags, a per-baseline noise and the truth visibilities cover the
    rows read; every other array is complete. vis: (n_rows, n_freq, n_time) complex64 Jy.
    flags: the same shape, bool, True where the data are bad. noise: float64, () or (n_rows,),
    the standard deviation of each of the real and imaginary parts (Jy). rows: the slice of the
    store's rows. n_bl_total: baselines in the whole store. truth: None when there is none.
    """

    vis: np.ndarray
    flags: np.ndarray
    noise: np.ndarray
    rows: slice
    n_bl_total: int
    truth: Truth | None = None

    @property
    def meta(self) -> ObservationMeta:
        return ObservationMeta(**{f.name: getattr(self, f.name) for f in fields(ObservationMeta)})


@dataclass(frozen=True)
class StoreInfo:
    """Sizes of a store, read from its metadata alone."""

    n_bl: int
    n_ant: int
    n_freq: int
    n_time: int
    n_sat: int
    chunk_rows: int
    noise_per_baseline: bool
    has_truth: bool
    format_version: int


def row_blocks(n_rows: int, block_rows: int):
    """Consecutive slices of at most ``block_rows`` covering ``range(n_rows)``."""
    for start in range(0, n_rows, block_rows):
        yield slice(start, min(start + block_rows, n_rows))


def default_chunk_rows(n_freq: int, n_time: int) -> int:
    """Rows per chunk so that one complex64 vis chunk is about 16 MiB."""
    return max(1, CHUNK_BYTES // (8 * n_freq * n_time))
