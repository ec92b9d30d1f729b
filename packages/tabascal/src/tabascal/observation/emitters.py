"""Emitters other than satellites, and every emitter of an observation as one set.

Each kind has the :class:`~tabascal.observation.geometry.Orbits` protocol: positions in the
inertial frame and their time derivatives, so the delays, sightlines, beam factors and angular
speeds of ``geometry`` take them as they take satellites. What differs is only the trajectory:

- :class:`GroundEmitters`: transmitters fixed to the Earth at WGS84 positions (broadcast
  towers, base stations). In the inertial frame each turns with the Earth, like an antenna:
  ``x(t) = Rz(GAST(t)) x_itrf``, with the same exact derivatives.
- :class:`AircraftTracks`: emitters on tracks given as samples of time, latitude, longitude and
  height (as ADS-B decoders write them). Each track's ITRF position is a cubic spline through
  its samples (``scipy.interpolate.CubicSpline``, not-a-knot ends: it passes through every
  sample and reproduces a straight line at constant speed exactly); the inertial position is
  the spline turned with the Earth, its derivatives by Leibniz's rule on the rotation's and the
  spline's. Outside its samples' span a track holds its end position and is out of view.
- :class:`Emitters`: several sets as one, in order (satellites first), with each emitter's
  kind (``kinds``); ``split`` and ``join`` take an observation's emitters apart by kind and
  put them together again.

Which emitters are in view (``visible``): a satellite or an aircraft above a minimum elevation
at the array centre (an aircraft only within its track's span); a ground transmitter always,
since it sits at the horizon by nature and reaches the stations along the ground.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from math import comb

import numpy as np

from tabascal import TabascalError
from tabascal.observation import geometry as geo

logger = logging.getLogger(__name__)

#: The kinds of emitter, as ``Emitters.kinds`` names them.
KINDS = ("satellite", "ground", "aircraft")

#: A gap between a track's samples longer than this (s) is reported when the track is read:
#: ADS-B positions come about every second, and the spline across a long gap is a guess.
TRACK_GAP_S = 10.0


def _names(names, n: int, what: str) -> tuple[str, ...] | None:
    if names is None:
        return None
    names = tuple(str(x) for x in names)
    if len(names) != n:
        raise ValueError(f"{what}: {len(names)} names for {n} emitters")
    return names


@dataclass(frozen=True, eq=False)
class GroundEmitters:
    """Transmitters at fixed WGS84 positions: lat_rad, lon_rad, height_m, each (n,) float64;
    gast0_rad: the observation's Greenwich sidereal angle at its start (the inertial frame's
    orientation); names: optional n strings."""

    lat_rad: np.ndarray
    lon_rad: np.ndarray
    height_m: np.ndarray
    gast0_rad: float
    names: tuple[str, ...] | None = None

    def __post_init__(self):
        arrays = [np.atleast_1d(np.asarray(getattr(self, f), np.float64)) for f in _GROUND]
        n = arrays[0].shape[0]
        for field, a in zip(_GROUND, arrays, strict=True):
            if a.shape != (n,) or not np.all(np.isfinite(a)):
                raise ValueError(f"GroundEmitters: {field} must be ({n},) finite values")
            object.__setattr__(self, field, a)
        if np.any(np.abs(self.lat_rad) > np.pi / 2):
            raise ValueError("GroundEmitters: every latitude must be within [-90, 90] deg")
        object.__setattr__(self, "names", _names(self.names, n, "GroundEmitters"))

    @property
    def n_sat(self) -> int:
        return self.lat_rad.shape[0]

    @property
    def itrf(self) -> np.ndarray:
        """(n, 3) ITRF positions, m."""
        return geo.geodetic_to_itrf(self.lat_rad, self.lon_rad, self.height_m).reshape(-1, 3)

    def label(self, s: int) -> str:
        return self.names[s] if self.names is not None else f"ground transmitter {s}"

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray:
        """(n_deriv + 1, n, n_time, 3) float64, m/s^k: turning with the Earth."""
        return geo.antenna_inertial(self.itrf, times_s, self.gast0_rad, n_deriv)

    def present(self, times_s) -> np.ndarray:
        """(n, n_time) bool: always."""
        return np.ones((self.n_sat, np.asarray(times_s).shape[0]), bool)


_GROUND = ("lat_rad", "lon_rad", "height_m")


@dataclass(frozen=True, eq=False)
class Track:
    """One emitter's track: times_s (m,) s from the observation start, strictly increasing;
    itrf (m, 3) ITRF positions at those times, m. At least two samples."""

    times_s: np.ndarray
    itrf: np.ndarray

    def __post_init__(self):
        t = np.asarray(self.times_s, np.float64).reshape(-1)
        x = np.asarray(self.itrf, np.float64)
        if x.shape != (t.size, 3):
            raise ValueError(f"Track: itrf has shape {x.shape}, expected ({t.size}, 3)")
        if t.size < 2:
            raise ValueError("Track: a track needs at least two samples")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(x))):
            raise ValueError("Track: times and positions must be finite")
        if np.any(np.diff(t) <= 0):
            at = int(np.flatnonzero(np.diff(t) <= 0)[0])
            raise ValueError(
                f"Track: sample times must increase (sample {at + 1} at {t[at + 1]} s is not "
                f"after sample {at} at {t[at]} s)"
            )
        object.__setattr__(self, "times_s", t)
        object.__setattr__(self, "itrf", x)

    @classmethod
    def from_geodetic(cls, times_s, lat_rad, lon_rad, height_m) -> Track:
        return cls(times_s, geo.geodetic_to_itrf(lat_rad, lon_rad, height_m).reshape(-1, 3))

    def gaps(self, longer_than_s: float = TRACK_GAP_S) -> list[tuple[float, float]]:
        """The (start, end) times (s) of the gaps between samples longer than ``longer_than_s``."""
        step = np.diff(self.times_s)
        return [
            (float(self.times_s[i]), float(self.times_s[i + 1]))
            for i in np.flatnonzero(step > longer_than_s)
        ]

    @cached_property
    def _spline(self):
        """The cubic spline through the samples, built once: the geometry asks for positions
        many times (a bisection of the view's edges calls it some forty times)."""
        from scipy.interpolate import CubicSpline

        return CubicSpline(self.times_s, self.itrf, axis=0, bc_type="not-a-knot")

    def itrf_at(self, times_s, n_deriv: int = 0) -> np.ndarray:
        """(n_deriv + 1, n_time, 3): the spline's position and derivatives at ``times_s``,
        held at the ends outside the samples' span (derivatives zero there)."""
        spline = self._spline
        t = np.asarray(times_s, np.float64)
        inside = (t >= self.times_s[0]) & (t <= self.times_s[-1])
        held = np.clip(t, self.times_s[0], self.times_s[-1])
        out = [spline(held)]
        for k in range(1, n_deriv + 1):
            out.append(np.where(inside[:, None], spline(held, k), 0.0))
        return np.stack(out)


@dataclass(frozen=True, eq=False)
class AircraftTracks:
    """Emitters on tracks (``Track``, one each); gast0_rad as for ``GroundEmitters``."""

    tracks: tuple[Track, ...]
    gast0_rad: float
    names: tuple[str, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "tracks", tuple(self.tracks))
        object.__setattr__(self, "names", _names(self.names, len(self.tracks), "AircraftTracks"))

    @property
    def n_sat(self) -> int:
        return len(self.tracks)

    def label(self, s: int) -> str:
        return self.names[s] if self.names is not None else f"aircraft {s}"

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray:
        """(n_deriv + 1, n, n_time, 3) float64, m/s^k: x = Rz(theta) p, so by Leibniz
        x^(k) = sum_j C(k, j) Rz^(k-j) p^(j), where Rz^(m) = OMEGA^m Rz(theta + m pi / 2) on
        the equatorial plane (nothing on z for m >= 1)."""
        t = np.asarray(times_s, np.float64)
        theta = geo.gast(t, self.gast0_rad)
        out = np.zeros((n_deriv + 1, self.n_sat, t.size, 3))
        for s, track in enumerate(self.tracks):
            p = track.itrf_at(t, n_deriv)
            for k in range(n_deriv + 1):
                for j in range(k + 1):
                    out[k, s] += comb(k, j) * geo.earth_turn(p[j], theta, k - j)
        return out

    def present(self, times_s) -> np.ndarray:
        """(n, n_time) bool: within each track's samples' span."""
        t = np.asarray(times_s, np.float64)
        return np.stack([(t >= tr.times_s[0]) & (t <= tr.times_s[-1]) for tr in self.tracks])


@dataclass(frozen=True, eq=False)
class Emitters:
    """Several sets of emitters as one, in the order given (``parts``, each with the
    ``Orbits`` protocol); ``kinds``: each part's kind, one of ``KINDS``."""

    parts: tuple
    kinds_of_parts: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "parts", tuple(self.parts))
        object.__setattr__(self, "kinds_of_parts", tuple(self.kinds_of_parts))
        if len(self.parts) != len(self.kinds_of_parts):
            raise ValueError("Emitters: one kind per part")
        unknown = set(self.kinds_of_parts) - set(KINDS)
        if unknown:
            raise ValueError(f"Emitters: kinds {sorted(unknown)} are not among {KINDS}")

    @property
    def n_sat(self) -> int:
        return sum(p.n_sat for p in self.parts)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Each emitter's kind, (n_sat,)."""
        return tuple(
            k for p, k in zip(self.parts, self.kinds_of_parts, strict=True) for _ in range(p.n_sat)
        )

    @property
    def names(self) -> tuple[str, ...] | None:
        if all(p.names is None for p in self.parts):
            return None
        return tuple(self.label(s) for s in range(self.n_sat))

    def _locate(self, s: int) -> tuple[object, int]:
        for part in self.parts:
            if s < part.n_sat:
                return part, s
            s -= part.n_sat
        raise IndexError(f"emitter {s} is not among the {self.n_sat}")

    def part_of(self, kind: str):
        """The part of kind ``kind`` (None where there is none)."""
        found = [p for p, k in zip(self.parts, self.kinds_of_parts, strict=True) if k == kind]
        return found[0] if found else None

    def label(self, s: int) -> str:
        part, i = self._locate(s)
        return part.label(i)

    def inertial(self, times_s, n_deriv: int = 0) -> np.ndarray:
        n_time = np.asarray(times_s).shape[0]
        if not self.parts:
            return np.zeros((n_deriv + 1, 0, n_time, 3))
        return np.concatenate([p.inertial(times_s, n_deriv) for p in self.parts], axis=1)


def kinds(orbits) -> tuple[str, ...]:
    """Each emitter's kind: ``orbits.kinds`` for ``Emitters``, else every one a satellite."""
    return tuple(orbits.kinds) if isinstance(orbits, Emitters) else ("satellite",) * orbits.n_sat


def visible(ant_itrf, orbits, times_s, gast0_rad: float, min_elevation_rad: float) -> np.ndarray:
    """(n_sat, n_time) bool: each emitter in view at ``times_s`` (the module docstring):
    satellites and aircraft above ``min_elevation_rad`` at the array centre (aircraft within
    their tracks' spans), ground transmitters always."""
    times = np.asarray(times_s, np.float64)
    if not isinstance(orbits, Emitters):
        return geo.satellite_elevation(ant_itrf, orbits, times, gast0_rad) > min_elevation_rad
    rows = []
    for part, kind in zip(orbits.parts, orbits.kinds_of_parts, strict=True):
        if kind == "ground":
            rows.append(part.present(times))
            continue
        up = geo.satellite_elevation(ant_itrf, part, times, gast0_rad) > min_elevation_rad
        rows.append(up & part.present(times) if kind == "aircraft" else up)
    return np.concatenate(rows, axis=0) if rows else np.zeros((0, times.size), bool)


def split(orbits) -> tuple[object, GroundEmitters | None, AircraftTracks | None]:
    """An observation's emitters as (satellites, ground transmitters, aircraft): ``orbits``
    itself and two Nones unless it is an ``Emitters``."""
    if not isinstance(orbits, Emitters):
        return orbits, None, None
    return orbits.part_of("satellite"), orbits.part_of("ground"), orbits.part_of("aircraft")


def join(satellites, ground: GroundEmitters | None = None, aircraft: AircraftTracks | None = None):
    """The inverse of ``split``: the satellites alone where there is nothing else (so an
    observation of satellites keeps its orbits as they were), else one ``Emitters`` holding
    the satellites, then the ground transmitters, then the aircraft."""
    others = [(p, k) for p, k in ((ground, "ground"), (aircraft, "aircraft")) if p is not None]
    others = [(p, k) for p, k in others if p.n_sat]
    if not others:
        return satellites
    parts = [(satellites, "satellite"), *others]
    return Emitters(tuple(p for p, _ in parts), tuple(k for _, k in parts))


class EmitterFileError(TabascalError, ValueError):
    """A ground-transmitter or track file that cannot be read; the message names the file, the
    line and what is wrong."""


# The columns a file's header may name for each field, as ADS-B decoders and the OpenSky
# Network's state vectors write them (the first found is used). Heights in feet are converted.
_LAT = ("lat_deg", "lat", "latitude")
_LON = ("lon_deg", "lon", "longitude")
_TRACK_COLUMNS = {
    "time": ("time", "time_utc", "timestamp"),
    "lat": _LAT,
    "lon": _LON,
    "height_m": ("height_m", "alt_m", "altitude_m", "geoaltitude"),
    "height_ft": ("alt_ft", "altitude_ft", "altitude"),
    "id": ("name", "callsign", "icao24", "id", "flight"),
}
_GROUND_COLUMNS = {
    "name": ("name",),
    "lat": _LAT,
    "lon": _LON,
    "height_m": ("height_m", "alt_m", "altitude_m"),
}
FEET = 0.3048


def _csv_rows(path) -> tuple[dict[str, int], list[tuple[int, list[str]]]]:
    """The header's columns (lower case, by position) and the data lines (number, fields) of a
    comma-separated file, ``#`` comments and blank lines left out."""
    try:
        with open(path, newline="") as f:
            lines = [(n, row) for n, row in enumerate(csv.reader(f), start=1)]
    except OSError as err:
        raise EmitterFileError(f"{path}: cannot be read ({err.strerror or err})") from None
    lines = [
        (n, [x.strip() for x in row]) for n, row in lines if row and any(x.strip() for x in row)
    ]
    lines = [(n, row) for n, row in lines if not row[0].startswith("#")]
    if not lines:
        raise EmitterFileError(f"{path}: holds no header line")
    header = {name.lower(): i for i, name in enumerate(lines[0][1])}
    return header, lines[1:]


def _column(path, header: dict[str, int], choices: tuple[str, ...], what: str, required=True):
    for name in choices:
        if name in header:
            return header[name]
    if required:
        raise EmitterFileError(
            f"{path}: no column for {what}; name one of {', '.join(choices)} in the header line"
        )
    return None


def _number(path, line: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EmitterFileError(f"{path}, line {line}: {what} {text!r} is not a number") from None
    if not np.isfinite(value):
        raise EmitterFileError(f"{path}, line {line}: {what} {text!r} is not finite")
    return value


def read_ground(path, gast0_rad: float) -> GroundEmitters:
    """Ground transmitters from a comma-separated file with a header line naming ``name``,
    ``lat_deg``, ``lon_deg`` and ``height_m`` (WGS84; ``lat``, ``latitude`` and the like are
    taken too), one transmitter a line."""
    header, lines = _csv_rows(path)
    cols = {k: _column(path, header, v, k, k != "name") for k, v in _GROUND_COLUMNS.items()}
    names, lat, lon, height = [], [], [], []
    for n, row in lines:
        if len(row) < len(header):
            raise EmitterFileError(
                f"{path}, line {n}: {len(row)} fields, the header names {len(header)}"
            )
        names.append(row[cols["name"]] if cols["name"] is not None else f"ground {len(names)}")
        lat.append(_number(path, n, row[cols["lat"]], "latitude"))
        lon.append(_number(path, n, row[cols["lon"]], "longitude"))
        height.append(_number(path, n, row[cols["height_m"]], "height"))
        if abs(lat[-1]) > 90:
            raise EmitterFileError(f"{path}, line {n}: latitude {lat[-1]} deg is beyond +-90")
    if not names:
        raise EmitterFileError(f"{path}: holds no transmitter")
    return GroundEmitters(np.deg2rad(lat), np.deg2rad(lon), height, gast0_rad, names=names)


def _seconds(path, line: int, text: str, epoch) -> float:
    """A time as seconds after ``epoch`` (a UTC datetime): ISO 8601 (UTC unless it says
    otherwise) or seconds since 1970-01-01 UTC (Unix time, as ADS-B decoders write it)."""
    try:
        return float(text) - epoch.timestamp()
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise EmitterFileError(
            f"{path}, line {line}: time {text!r} is neither ISO 8601 nor Unix seconds"
        ) from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return (when - epoch).total_seconds()


def read_tracks(path, epoch_utc: str, gast0_rad: float, times_s=None) -> AircraftTracks:
    """Aircraft tracks from a comma-separated file of time, latitude, longitude and height,
    one position a line, as ADS-B decoders write them.

    The header line names the columns: ``time`` (ISO 8601, UTC unless marked, or Unix
    seconds), ``lat_deg``, ``lon_deg`` and ``height_m`` (WGS84 height; ``geoaltitude`` as the
    OpenSky Network writes it, or ``alt_ft`` in feet), and optionally the aircraft
    (``callsign``, ``icao24``, ``name``...) where the file holds several. Lines without a
    position (empty fields, as decoders write between position messages) are skipped; a
    position repeated at the same time is kept once. Each aircraft's samples are sorted by
    time; gaps longer than ``TRACK_GAP_S`` are logged, and where ``times_s`` (the observation's
    integration centres) is given, so is an aircraft whose track covers none of them.
    """
    epoch = datetime.fromisoformat(epoch_utc)
    epoch = epoch if epoch.tzinfo else epoch.replace(tzinfo=UTC)
    header, lines = _csv_rows(path)
    cols = {
        k: _column(path, header, v, k, k in ("time", "lat", "lon"))
        for k, v in _TRACK_COLUMNS.items()
    }
    if cols["height_m"] is None and cols["height_ft"] is None:
        choices = _TRACK_COLUMNS["height_m"] + _TRACK_COLUMNS["height_ft"]
        raise EmitterFileError(
            f"{path}: no column for the height; name one of {', '.join(choices)} in the header"
        )
    height_col, scale = (
        (cols["height_m"], 1.0) if cols["height_m"] is not None else (cols["height_ft"], FEET)
    )
    samples: dict[str, list[tuple[float, float, float, float]]] = {}
    for n, row in lines:
        if len(row) < len(header):
            raise EmitterFileError(
                f"{path}, line {n}: {len(row)} fields, the header names {len(header)}"
            )
        fields = (row[cols["time"]], row[cols["lat"]], row[cols["lon"]], row[height_col])
        if any(not x for x in fields[1:]):
            continue
        who = row[cols["id"]] if cols["id"] is not None else "aircraft"
        t = _seconds(path, n, fields[0], epoch)
        lat = _number(path, n, fields[1], "latitude")
        lon = _number(path, n, fields[2], "longitude")
        height = _number(path, n, fields[3], "height") * scale
        samples.setdefault(who or "aircraft", []).append((t, lat, lon, height))
    if not samples:
        raise EmitterFileError(f"{path}: holds no position")
    tracks, names = [], []
    for who, rows in samples.items():
        rows = np.array(sorted(set(rows)))
        _, first = np.unique(rows[:, 0], return_index=True)
        rows = rows[first]
        if rows.shape[0] < 2:
            raise EmitterFileError(f"{path}: {who} has one position; a track needs two or more")
        track = Track.from_geodetic(
            rows[:, 0], np.deg2rad(rows[:, 1]), np.deg2rad(rows[:, 2]), rows[:, 3]
        )
        for start, end in track.gaps():
            logger.warning(
                "%s: %s's track has no position from %.1f s to %.1f s after the start; the "
                "spline bridges the gap",
                path,
                who,
                start,
                end,
            )
        if times_s is not None and not np.any(
            (np.asarray(times_s) >= track.times_s[0]) & (np.asarray(times_s) <= track.times_s[-1])
        ):
            logger.warning(
                "%s: %s's track (%.1f s to %.1f s after the start) covers no integration",
                path,
                who,
                track.times_s[0],
                track.times_s[-1],
            )
        tracks.append(track)
        names.append(who)
    return AircraftTracks(tracks, gast0_rad, names=names)
