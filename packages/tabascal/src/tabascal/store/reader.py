"""Reading and checking observation stores."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import zarr

from tabascal.observation.geometry import CircularOrbits
from tabascal.observation.tle import TleError, TleOrbits
from tabascal.store.format import (
    FORMAT,
    FORMAT_VERSION,
    ORBIT_FIELDS,
    SCALAR_ATTRS,
    TLE_ATTR,
    TRUTH_PER_ANTENNA,
    Observation,
    ObservationMeta,
    StoreError,
    StoreInfo,
    Truth,
)

logger = logging.getLogger(__name__)

REQUIRED = ("vis", "flags", "noise", "a1", "a2", "ant_itrf", "times_s", "freqs_hz")


def _fail(path, message: str):
    raise StoreError(f"{path}: {message}")


def _open_group(path) -> zarr.Group:
    path = Path(path)
    if not path.exists():
        _fail(path, "does not exist")
    try:
        group = zarr.open_group(path, mode="r")
    except Exception as err:  # zarr raises several types for "no group here"
        _fail(path, f"is not a tabascal observation store (not a zarr group: {err})")
    attrs = dict(group.attrs)
    if attrs.get("format") != FORMAT:
        _fail(
            path,
            "is a zarr group but not a tabascal observation store (attribute 'format' is "
            f"{attrs.get('format')!r}, expected {FORMAT!r})",
        )
    version = attrs.get("format_version")
    if version != FORMAT_VERSION:
        _fail(
            path,
            f"format_version {version!r} is not supported; this tabascal reads version "
            f"{FORMAT_VERSION}",
        )
    for name in (*SCALAR_ATTRS, "epoch_utc"):
        if name not in attrs:
            _fail(path, f"attribute '{name}' is missing")
    orbit_arrays = () if TLE_ATTR in attrs else tuple(f"satellites/{f}" for f in ORBIT_FIELDS)
    for name in (*REQUIRED, *orbit_arrays):
        if name not in group:
            _fail(path, f"array '{name}' is missing")
    return group


def _tle_lines(path, attrs) -> tuple[list, list]:
    tle = attrs[TLE_ATTR]
    lines = (tle.get("line1"), tle.get("line2")) if isinstance(tle, dict) else (None, None)
    if not all(isinstance(x, list) for x in lines) or len(lines[0]) != len(lines[1]):
        _fail(path, f"attribute '{TLE_ATTR}' must hold lists 'line1' and 'line2' of equal length")
    return lines


def _expected_shapes(group: zarr.Group, n_bl, n_ant, n_freq, n_time, n_sat) -> dict:
    expected = {
        "a2": (n_bl,),
        "ant_itrf": (n_ant, 3),
        "vis": (n_bl, n_freq, n_time),
        "flags": (n_bl, n_freq, n_time),
    }
    if TLE_ATTR not in group.attrs:
        expected |= {f"satellites/{f}": (n_sat,) for f in ORBIT_FIELDS}
    if "truth" in group:
        n_src = group["truth/source_ra_rad"].shape[0] if "truth/source_ra_rad" in group else 0
        expected |= {
            "truth/sky_vis": (n_bl, n_freq, n_time),
            "truth/rfi_vis": (n_bl, n_freq, n_time),
            "truth/gains": (n_ant, n_freq, n_time),
            "truth/rfi_amp": (n_ant, n_sat, n_freq, n_time),
            "truth/rfi_eirp_w_hz": (n_sat, n_freq, n_time),
            "truth/source_ra_rad": (n_src,),
            "truth/source_dec_rad": (n_src,),
            "truth/source_flux_jy": (n_src, n_freq),
        }
    return expected


def _checked(path) -> tuple[zarr.Group, StoreInfo]:
    """Open a store read-only and check its structure and shapes (reads a1 and a2 only)."""
    group = _open_group(path)
    n_bl, n_ant = group["a1"].shape[0], group["ant_itrf"].shape[0]
    n_freq, n_time = group["freqs_hz"].shape[0], group["times_s"].shape[0]
    if TLE_ATTR in group.attrs:
        n_sat = len(_tle_lines(path, dict(group.attrs))[0])
    else:
        n_sat = group["satellites/altitude_m"].shape[0]
    for name, shape in _expected_shapes(group, n_bl, n_ant, n_freq, n_time, n_sat).items():
        if name not in group:
            _fail(path, f"array '{name}' is missing")
        if group[name].shape != shape:
            _fail(
                path,
                f"array '{name}' has shape {group[name].shape}, expected {shape} (n_bl={n_bl} "
                f"from a1, n_ant={n_ant} from ant_itrf, n_freq={n_freq} from freqs_hz, "
                f"n_time={n_time} from times_s, n_sat={n_sat} from satellites/altitude_m)",
            )
    if group["noise"].shape not in ((), (n_bl,)):
        _fail(path, f"array 'noise' has shape {group['noise'].shape}, expected () or ({n_bl},)")
    if group["vis"].dtype.kind != "c" or group["flags"].dtype != np.bool_:
        _fail(
            path,
            f"vis must be complex and flags bool, got {group['vis'].dtype} and "
            f"{group['flags'].dtype}",
        )
    a1, a2 = group["a1"][:], group["a2"][:]
    if n_bl and (min(a1.min(), a2.min()) < 0 or max(a1.max(), a2.max()) >= n_ant):
        _fail(path, f"a1/a2 hold antenna indices outside [0, {n_ant})")
    info = StoreInfo(
        n_bl=n_bl,
        n_ant=n_ant,
        n_freq=n_freq,
        n_time=n_time,
        n_sat=n_sat,
        chunk_rows=group["vis"].chunks[0],
        noise_per_baseline=group["noise"].shape == (n_bl,),
        has_truth="truth" in group,
        format_version=FORMAT_VERSION,
    )
    return group, info


def store_info(path) -> StoreInfo:
    """Sizes of the store at ``path``, from its metadata (no visibility is read)."""
    return _checked(path)[1]


def _orbits(path, group: zarr.Group):
    attrs = dict(group.attrs)
    names = attrs.get("satellite_names")
    names = tuple(names) if names is not None else None
    if TLE_ATTR not in attrs:
        return CircularOrbits(**{f: group[f"satellites/{f}"][:] for f in ORBIT_FIELDS}, names=names)
    line1, line2 = _tle_lines(path, attrs)
    try:
        return TleOrbits(
            line1=tuple(line1),
            line2=tuple(line2),
            epoch_utc=str(attrs["epoch_utc"]),
            gast0_rad=float(attrs["gast0_rad"]),
            names=names,
            ut1_utc_s=float(attrs[TLE_ATTR].get("ut1_utc_s", 0.0)),
        )
    except TleError as err:
        _fail(path, f"attribute '{TLE_ATTR}': {err}")


def _meta_fields(path, group: zarr.Group, rows: slice) -> dict:
    attrs = dict(group.attrs)
    orbits = _orbits(path, group)
    return dict(
        a1=group["a1"][rows],
        a2=group["a2"][rows],
        ant_itrf=group["ant_itrf"][:],
        times_s=group["times_s"][:],
        freqs_hz=group["freqs_hz"][:],
        epoch_utc=str(attrs["epoch_utc"]),
        orbits=orbits,
        metadata=dict(attrs.get("metadata") or {}),
        **{name: float(attrs[name]) for name in SCALAR_ATTRS},
    )


def read_meta(path) -> ObservationMeta:
    """Everything but the visibilities (a1, a2 complete)."""
    group, info = _checked(path)
    return ObservationMeta(**_meta_fields(path, group, slice(0, info.n_bl)))


def read_observation(path, rows: slice | None = None, *, truth: bool = True) -> Observation:
    """Read baseline ``rows`` (a contiguous slice; all when None) of the store at ``path``.

    Only the chunks holding those rows are read. ``truth=False`` skips the truth group.
    """
    group, info = _checked(path)
    rows = slice(0, info.n_bl) if rows is None else rows
    start, stop, step = rows.indices(info.n_bl)
    if step != 1:
        raise ValueError(f"read_observation: rows must be contiguous, got step {step}")
    rows = slice(start, max(start, stop))
    logger.debug("reading baseline rows %d..%d of %s", rows.start, rows.stop, path)
    noise = group["noise"][rows] if info.noise_per_baseline else group["noise"][()]
    found = None
    if truth and info.has_truth:
        t = group["truth"]
        found = Truth(
            sky_vis=t["sky_vis"][rows],
            rfi_vis=t["rfi_vis"][rows],
            **{name: t[name][...] for name in TRUTH_PER_ANTENNA},
        )
    return Observation(
        **_meta_fields(path, group, rows),
        vis=group["vis"][rows],
        flags=group["flags"][rows],
        noise=np.asarray(noise, dtype=np.float64),
        rows=rows,
        n_bl_total=info.n_bl,
        truth=found,
    )
