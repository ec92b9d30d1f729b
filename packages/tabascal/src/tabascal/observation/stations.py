"""Array layouts: an SKA-Low-like station generator and readers of user layout files.

Positions leave this module as ITRF (m), the frame of :mod:`tabascal.observation.geometry`.
Local layouts are east-north-up (ENU, m) about a WGS84 reference point.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tabascal.observation.geometry import enu_to_itrf

GOLDEN_ANGLE = np.pi * (3.0 - np.sqrt(5.0))
# Station pitch in diameters. Vogel's spiral puts nearest neighbours 0.873 pitch apart (measured
# for 2 to 1000 points), so 1.72 keeps every pair at least 1.5 diameters apart.
SPACING = 1.72


@dataclass(frozen=True)
class ArrayReference:
    """A WGS84 reference point: geodetic latitude and longitude (deg), height (m)."""

    lat_deg: float
    lon_deg: float
    height_m: float

    def enu_to_itrf(self, enu) -> np.ndarray:
        """ENU offsets (n, 3) m about this point to ITRF (n, 3) m."""
        return enu_to_itrf(enu, np.deg2rad(self.lat_deg), np.deg2rad(self.lon_deg), self.height_m)


# Centre of the SKA-Low array at Inyarrimanha Ilgari Bundara, Western Australia (approximate).
SKA_LOW_SITE = ArrayReference(lat_deg=-26.82472, lon_deg=116.76444, height_m=377.8)


def _sunflower(n: int, radius_m: float) -> np.ndarray:
    """n points spread evenly over a disc (Vogel's spiral): (n, 2) m."""
    k = np.arange(n)
    r = radius_m * np.sqrt((k + 0.5) / n)
    return np.stack([r * np.cos(k * GOLDEN_ANGLE), r * np.sin(k * GOLDEN_ANGLE)], axis=-1)


def _cluster(n: int, spacing_m: float) -> np.ndarray:
    """n stations on a ring, neighbours ``spacing_m`` apart (one at the centre if n = 1)."""
    if n == 1:
        return np.zeros((1, 2))
    ring = max(spacing_m, spacing_m / (2 * np.sin(np.pi / n)))
    angle = 2 * np.pi * np.arange(n) / n
    return ring * np.stack([np.cos(angle), np.sin(angle)], axis=-1)


def ska_low_like_enu(
    n_stations: int,
    *,
    max_radius_m: float = 37_500.0,
    station_diameter_m: float = 38.0,
    core_fraction: float = 224 / 512,
    n_arms: int = 3,
    cluster_size: int = 6,
    arm_winding_rad: float = 1.5,
) -> np.ndarray:
    """Deterministic SKA-Low-like layout: a dense core plus clusters on logarithmic spiral arms.

    ``round(core_fraction * n)`` stations (SKA-Low: 224 of 512) fill a disc on Vogel's spiral,
    one station per (SPACING * diameter)^2 of area (224 stations give a core radius of ~550 m, near
    SKA-Low's). The rest sit in clusters of ``cluster_size`` stations, placed in turn on
    ``n_arms`` logarithmic spirals at radii spaced logarithmically from just outside the core
    to ``max_radius_m`` (37.5 km on three arms gives baselines up to ~65 km); each arm turns by
    ``arm_winding_rad`` over its length. Where that would crowd clusters on an arm, they move
    outwards (past ``max_radius_m`` if need be), so no two stations are closer than 1.5
    diameters. Returns ENU offsets (n_stations, 3) float64 m with up = 0.
    """
    if n_stations < 2:
        raise ValueError(f"ska_low_like_enu: need at least 2 stations, got {n_stations}")
    spacing = SPACING * station_diameter_m
    n_core = min(n_stations, max(1, round(core_fraction * n_stations)))
    core_radius = spacing * np.sqrt(n_core / np.pi)
    xy = [_sunflower(n_core, core_radius)]
    n_outer = n_stations - n_core
    n_clusters = -(-n_outer // cluster_size)
    r_in = core_radius + 4 * spacing
    if n_outer and max_radius_m <= r_in:
        raise ValueError(
            f"ska_low_like_enu: max_radius_m={max_radius_m} m does not reach past the core "
            f"({r_in:.0f} m for {n_core} core stations); raise it or the core fraction"
        )
    placed = 0
    last_radius = np.full(n_arms, -np.inf)
    for c in range(n_clusters):
        q = (c + 1) / n_clusters
        # a cluster spans two pitches; three keep neighbours on an arm a pitch apart
        r = max(r_in * (max_radius_m / r_in) ** q, last_radius[c % n_arms] + 3 * spacing)
        last_radius[c % n_arms] = r
        theta = 2 * np.pi * (c % n_arms) / n_arms + arm_winding_rad * q
        size = min(cluster_size, n_outer - placed)
        xy.append(r * np.array([np.cos(theta), np.sin(theta)]) + _cluster(size, spacing))
        placed += size
    xy = np.concatenate(xy)
    return np.concatenate([xy, np.zeros((n_stations, 1))], axis=1)


def ska_low_like_itrf(n_stations: int, reference: ArrayReference = SKA_LOW_SITE, **kwargs):
    """:func:`ska_low_like_enu` placed at ``reference``: ITRF (n_stations, 3) float64 m."""
    return reference.enu_to_itrf(ska_low_like_enu(n_stations, **kwargs))


def read_layout(
    path: str | Path, frame: str = "enu", reference: ArrayReference | None = None
) -> tuple[np.ndarray, tuple[str, ...] | None]:
    """Read station positions from a text file.

    One station a line: ``x y z`` or ``name x y z`` (whitespace or commas); blank lines and
    ``#`` comments are skipped. ``frame`` is ``"itrf"`` (geocentric m) or ``"enu"`` (m east,
    north, up of ``reference``, which is then required). Returns (ITRF (n, 3) float64 m, names
    or None when the file gives none).
    """
    if frame not in ("enu", "itrf"):
        raise ValueError(f"read_layout: frame must be 'enu' or 'itrf', got {frame!r}")
    if frame == "enu" and reference is None:
        raise ValueError(f"read_layout: {path} is in ENU, so a reference position is required")
    rows, names = [], []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        fields = re.split(r"[,\s]+", line.split("#", 1)[0].strip())
        if fields == [""]:
            continue
        if len(fields) == 4:
            names.append(fields.pop(0))
        try:
            if len(fields) != 3:
                raise ValueError
            rows.append([float(f) for f in fields])
        except ValueError:
            raise ValueError(
                f"read_layout: {path}, line {number}: expected 'x y z' or 'name x y z' "
                f"in metres, got {line.strip()!r}"
            ) from None
    if len(rows) < 2:
        raise ValueError(f"read_layout: {path} holds {len(rows)} station(s); need at least 2")
    if names and len(names) != len(rows):
        raise ValueError(f"read_layout: {path}: either every station has a name or none has")
    xyz = np.array(rows)
    itrf = reference.enu_to_itrf(xyz) if frame == "enu" else xyz
    if frame == "itrf" and np.any(np.linalg.norm(itrf, axis=1) < 6.3e6):
        raise ValueError(
            f"read_layout: {path} is not geocentric ITRF (a station lies under 6300 km from the "
            "Earth's centre); use frame='enu' with a reference for local coordinates"
        )
    return itrf, (tuple(names) if names else None)
