"""Names, dataclasses and sizes of the observation store format (see :mod:`tabascal.store`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tabascal import TabascalError
from tabascal.observation.geometry import Orbits

FORMAT = "tabascal.observation"
FORMAT_VERSION = 1
# The version of a store holding ground transmitters or aircraft (``GROUND_GROUP``,
# ``AIRCRAFT_GROUP``): a reader that knows only version 1 refuses it by its version rather than
# reading its satellites alone. Every other store stays version 1.
EMITTERS_FORMAT_VERSION = 2
ORBIT_FIELDS = ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad")
TLE_ATTR = "satellite_tle"  # group attribute of stores whose satellites are TLE element sets
# The attribute of a store whose satellites' orbits, as handed to a fit, are the stored orbits
# displaced (``observation.orbit_offsets.OffsetOrbits``): {"time_offset_s": [n_sat],
# "ric_offset_m": [n_sat][3]}. The stored orbits are the true ones.
ORBIT_OFFSETS_ATTR = "orbit_offsets"
# Emitters beside the satellites (``observation.emitters``), after them in the store's emitter
# order: ground transmitters (each one's WGS84 position: GROUND_FIELDS, (n_ground,)) and
# aircraft (their tracks' samples one after another: times_s (n_samples,) s from the start,
# itrf (n_samples, 3) m, and track_start (n_aircraft + 1,): where each track's samples begin).
GROUND_GROUP = "emitters/ground"
GROUND_FIELDS = ("lat_rad", "lon_rad", "height_m")
AIRCRAFT_GROUP = "emitters/aircraft"
# Group attribute, true in stores whose writer kept every chunk (zarr leaves out a chunk equal to
# the fill value unless told not to): in those an absent chunk always means a damaged store.
EVERY_CHUNK_ATTR = "every_chunk_written"
# Arrays whose axis 0 is the baseline: their chunks are named by rows.
BASELINE_ARRAYS = ("vis", "flags", "noise", "a1", "a2", "truth/sky_vis", "truth/rfi_vis")
# Arrays whose missing chunks can be read as flagged cells (``allow_missing``).
FLAGGABLE = ("vis", "flags")
# Arrays of an older store (no EVERY_CHUNK_ATTR) whose absent chunks are taken as damage: the
# others may have been left out for holding the fill value only (all-flagged flags, zero truth).
OLDER_STORE_CHECKED = ("vis", "noise")
# Allowed relative jitter of channel widths and of the steps between channel centres.
CHANNEL_RTOL = 1e-6
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
    centres, ascending and evenly spaced (``chan_spacing``). chan_width: each channel's width
    (Hz), at most the spacing: channels selected or decimated in frequency are narrower than
    their spacing. gast0_rad: Greenwich sidereal angle at the start; epoch_utc: the
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
    def chan_spacing(self) -> float:
        """The step between channel centres (Hz): ``chan_width`` for one channel or for
        channels side by side (centres within ``CHANNEL_RTOL`` of one width apart, so that
        contiguous channels give the width itself, bit for bit), else the centres' mean step.
        The frequency grid of the model's priors is spaced by it; smearing within a channel
        and the noise follow ``chan_width``."""
        if self.n_freq < 2:
            return self.chan_width
        step = float(self.freqs_hz[-1] - self.freqs_hz[0]) / (self.n_freq - 1)
        if abs(step - self.chan_width) <= CHANNEL_RTOL * self.chan_width:
            return self.chan_width
        return step

    @property
    def n_sat(self) -> int:
        return self.orbits.n_sat


@dataclass(frozen=True, eq=False, kw_only=True)
class Observation(ObservationMeta):
    """An observation, or the block of baseline ``rows`` read from one.

    a1, a2 (and so n_bl), vis, flags, a per-baseline noise and the truth visibilities cover the
    rows read; every other array is complete. vis: (n_rows, n_freq, n_time) complex64 Jy.
    flags: the same shape, bool, True where the data are bad. noise: float64, (), (n_rows,) or
    (n_rows, n_freq), the standard deviation of each of the real and imaginary parts (Jy), one
    value for every cell, per baseline, or per baseline and channel (the same in every
    integration). rows: the slice of the
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
    """Sizes of a store, read from its metadata alone. noise_per_baseline: the noise has a
    baseline axis, (n_bl,) or (n_bl, n_freq); noise_per_channel: and a channel axis too."""

    n_bl: int
    n_ant: int
    n_freq: int
    n_time: int
    n_sat: int
    chunk_rows: int
    noise_per_baseline: bool
    has_truth: bool
    format_version: int
    noise_per_channel: bool = False


@dataclass(frozen=True)
class ChunkDamage:
    """One chunk of a store's array that is missing or does not decode.

    array: the array's name (e.g. ``truth/sky_vis``); chunk: the chunk's coordinates in the
    array's chunk grid; region: the part of the array it holds, a (start, stop) per axis;
    problem: ``missing``, ``checksum mismatch`` or ``cannot be decoded (...)``.
    """

    array: str
    chunk: tuple[int, ...]
    region: tuple[tuple[int, int], ...]
    problem: str

    @property
    def rows(self) -> tuple[int, int] | None:
        """(start, stop) of the baseline rows the chunk holds; None for other arrays."""
        return self.region[0] if self.array in BASELINE_ARRAYS and self.region else None

    def __str__(self) -> str:
        where = "" if self.rows is None else f", {row_ranges([self.rows])}"
        return f"array {self.array}{where} (chunk {chunk_label(self.chunk)}): {self.problem}"


@dataclass(frozen=True)
class StoreVerification:
    """What ``verify_store`` found: every damaged chunk, in the order of the arrays' names,
    among ``n_chunks`` chunks of ``n_arrays`` arrays; ``checksums``: whether every array
    carries a crc32c checksum (stores written before they did decode a bit flip silently)."""

    damage: tuple[ChunkDamage, ...]
    n_arrays: int
    n_chunks: int
    checksums: bool


def chunk_label(chunk: tuple[int, ...]) -> str:
    """A chunk's grid coordinates as zarr names its file, e.g. ``2/0/0``."""
    return "/".join(map(str, chunk)) or "0"


def row_ranges(ranges, most: int = 6) -> str:
    """Row ranges, (start, stop) each, as text with the last row of each included:
    ``rows 0-119, 240-359`` or ``row 5``; past ``most`` ranges, ``and N more``."""
    spans = [str(start) if stop - start == 1 else f"{start}-{stop - 1}" for start, stop in ranges]
    if len(spans) > most:
        spans = [*spans[:most], f"and {len(spans) - most} more"]
    one_row = len(ranges) == 1 and ranges[0][1] - ranges[0][0] == 1
    return ("row " if one_row else "rows ") + ", ".join(spans)


def row_blocks(n_rows: int, block_rows: int):
    """Consecutive slices of at most ``block_rows`` covering ``range(n_rows)``."""
    for start in range(0, n_rows, block_rows):
        yield slice(start, min(start + block_rows, n_rows))


def default_chunk_rows(n_freq: int, n_time: int) -> int:
    """Rows per chunk so that one complex64 vis chunk is about 16 MiB."""
    return max(1, CHUNK_BYTES // (8 * n_freq * n_time))
