"""Reading and checking observation stores.

Opening a store checks its structure, its arrays' shapes and that every chunk it should hold is
there, before anything large is read: zarr reads an absent chunk as the fill value, so a partial
copy would otherwise read as zero visibilities or as all flagged. Every read is wrapped so that
a chunk that does not decode (a checksum mismatch, a truncated file) is reported with its array
and rows instead of a codec's traceback.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec

from tabascal.observation import emitters
from tabascal.observation.geometry import CircularOrbits
from tabascal.observation.orbit_offsets import OffsetOrbits
from tabascal.observation.tle import TleError, TleOrbits
from tabascal.store.format import (
    AIRCRAFT_GROUP,
    EMITTERS_FORMAT_VERSION,
    EVERY_CHUNK_ATTR,
    FLAGGABLE,
    FORMAT,
    FORMAT_VERSION,
    GROUND_FIELDS,
    GROUND_GROUP,
    OLDER_STORE_CHECKED,
    ORBIT_FIELDS,
    ORBIT_OFFSETS_ATTR,
    SCALAR_ATTRS,
    TLE_ATTR,
    TRUTH_PER_ANTENNA,
    ChunkDamage,
    Observation,
    ObservationMeta,
    StoreError,
    StoreInfo,
    StoreVerification,
    Truth,
    chunk_label,
    row_blocks,
    row_ranges,
)

logger = logging.getLogger(__name__)

REQUIRED = ("vis", "flags", "noise", "a1", "a2", "ant_itrf", "times_s", "freqs_hz")
MAX_LISTED = 6  # ranges of missing rows named in a message before "and N more"
RECOPY = "copy the store again (tabascal inspect --verify STORE lists every damaged chunk)"


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
    if version not in (FORMAT_VERSION, EMITTERS_FORMAT_VERSION):
        _fail(
            path,
            f"format_version {version!r} is not supported; this tabascal reads versions "
            f"{FORMAT_VERSION} and {EMITTERS_FORMAT_VERSION}",
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


def _emitter_counts(path, group: zarr.Group) -> tuple[int, int, int]:
    """How many satellites, ground transmitters and aircraft the store holds."""
    if TLE_ATTR in group.attrs:
        n_satellites = len(_tle_lines(path, dict(group.attrs))[0])
    else:
        n_satellites = group["satellites/altitude_m"].shape[0]
    n_ground = group[f"{GROUND_GROUP}/lat_rad"].shape[0] if GROUND_GROUP in group else 0
    starts = f"{AIRCRAFT_GROUP}/track_start"
    n_aircraft = group[starts].shape[0] - 1 if starts in group else 0
    return n_satellites, n_ground, n_aircraft


def _expected_shapes(group: zarr.Group, n_bl, n_ant, n_freq, n_time, counts) -> dict:
    n_satellites, n_ground, n_aircraft = counts
    n_sat = sum(counts)
    expected = {
        "a2": (n_bl,),
        "ant_itrf": (n_ant, 3),
        "vis": (n_bl, n_freq, n_time),
        "flags": (n_bl, n_freq, n_time),
    }
    if TLE_ATTR not in group.attrs:
        expected |= {f"satellites/{f}": (n_satellites,) for f in ORBIT_FIELDS}
    if GROUND_GROUP in group:
        expected |= {f"{GROUND_GROUP}/{f}": (n_ground,) for f in GROUND_FIELDS}
    if AIRCRAFT_GROUP in group:
        n_samples = group[f"{AIRCRAFT_GROUP}/times_s"].shape[0]
        expected |= {
            f"{AIRCRAFT_GROUP}/track_start": (n_aircraft + 1,),
            f"{AIRCRAFT_GROUP}/times_s": (n_samples,),
            f"{AIRCRAFT_GROUP}/itrf": (n_samples, 3),
        }
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


def _shapes(path, group: zarr.Group) -> StoreInfo:
    """The store's sizes, its arrays' shapes and dtypes checked (no chunk is read)."""
    n_bl, n_ant = group["a1"].shape[0], group["ant_itrf"].shape[0]
    n_freq, n_time = group["freqs_hz"].shape[0], group["times_s"].shape[0]
    counts = _emitter_counts(path, group)
    n_sat = sum(counts)
    for name, shape in _expected_shapes(group, n_bl, n_ant, n_freq, n_time, counts).items():
        if name not in group:
            _fail(path, f"array '{name}' is missing")
        if group[name].shape != shape:
            _fail(
                path,
                f"array '{name}' has shape {group[name].shape}, expected {shape} (n_bl={n_bl} "
                f"from a1, n_ant={n_ant} from ant_itrf, n_freq={n_freq} from freqs_hz, "
                f"n_time={n_time} from times_s, n_sat={n_sat} emitters: {counts[0]} from "
                f"satellites/altitude_m, {counts[1]} ground, {counts[2]} aircraft)",
            )
    noise_shape = group["noise"].shape
    if noise_shape not in ((), (n_bl,), (n_bl, n_freq)):
        _fail(
            path,
            f"array 'noise' has shape {noise_shape}, expected () or ({n_bl},) or "
            f"({n_bl}, {n_freq}) (per baseline and channel)",
        )
    if group["vis"].dtype.kind != "c" or group["flags"].dtype != np.bool_:
        _fail(
            path,
            f"vis must be complex and flags bool, got {group['vis'].dtype} and "
            f"{group['flags'].dtype}",
        )
    return StoreInfo(
        n_bl=n_bl,
        n_ant=n_ant,
        n_freq=n_freq,
        n_time=n_time,
        n_sat=n_sat,
        chunk_rows=group["vis"].chunks[0],
        noise_per_baseline=len(noise_shape) >= 1,
        has_truth="truth" in group,
        format_version=int(group.attrs["format_version"]),
        noise_per_channel=len(noise_shape) == 2,
    )


def _arrays(group: zarr.Group) -> dict[str, zarr.Array]:
    """Every array of the store by name (``truth/sky_vis``): the required ones in their order
    (vis first), then the others sorted."""
    found = {name: a for name, a in group.members(max_depth=None) if isinstance(a, zarr.Array)}
    order = {name: k for k, name in enumerate(REQUIRED)}
    return dict(sorted(found.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def _region(array: zarr.Array, chunk: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(
        slice(c * n, min((c + 1) * n, size))
        for c, n, size in zip(chunk, array.chunks, array.shape, strict=True)
    )


def _chunks(array: zarr.Array, rows: slice | None = None):
    """The grid coordinates of the array's chunks (those holding ``rows`` of axis 0 when
    given) with the region of the array each holds."""
    for chunk in itertools.product(*(range(n) for n in array.cdata_shape)):
        region = _region(array, chunk)
        if (
            rows is None
            or not region
            or (region[0].start < rows.stop and rows.start < region[0].stop)
        ):
            yield chunk, region


def _damage(name: str, chunk, region, problem: str) -> ChunkDamage:
    return ChunkDamage(name, chunk, tuple((s.start, s.stop) for s in region), problem)


def _missing_chunks(path, group: zarr.Group) -> tuple[ChunkDamage, ...]:
    """The chunks the store should hold but lacks.

    A store whose attribute ``every_chunk_written`` is true holds every chunk of every array:
    any absent one is missing. An older store's writer let zarr leave out chunks equal to the
    fill value, which all-flagged flags and all-zero truth chunks may legitimately be, so there
    only vis and noise are checked: noise is never zero, and a vis chunk is all zero only where
    its data were zeroed out, which ``allow_missing`` reads as flagged anyway. The store is a
    directory: each chunk is a file named by zarr's chunk key.
    """
    arrays = _arrays(group)
    if not group.attrs.get(EVERY_CHUNK_ATTR):
        arrays = {name: a for name, a in arrays.items() if name in OLDER_STORE_CHECKED}
    return tuple(
        _damage(name, chunk, region, "missing")
        for name, array in arrays.items()
        for chunk, region in _chunks(array)
        if not (Path(path) / array.path / array.metadata.encode_chunk_key(chunk)).is_file()
    )


def _missing_text(group: zarr.Group, missing: tuple[ChunkDamage, ...]) -> str:
    """``array vis is missing 2 of 8 chunks (rows 0-119, 240-359); array flags ...``."""
    parts = []
    for name in dict.fromkeys(d.array for d in missing):
        mine = [d for d in missing if d.array == name]
        if mine[0].rows is None:
            places = ", ".join(f"chunk {chunk_label(d.chunk)}" for d in mine[:MAX_LISTED])
            if len(mine) > MAX_LISTED:
                places += f", and {len(mine) - MAX_LISTED} more"
        else:
            merged: list[list[int]] = []
            for start, stop in sorted({d.rows for d in mine}):
                if merged and start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], stop)
                else:
                    merged.append([start, stop])
            places = row_ranges(merged, MAX_LISTED)
        parts.append(
            f"array {name} is missing {len(mine)} of {group[name].nchunks} chunks ({places})"
        )
    return "; ".join(parts)


def _refuse_missing(path, group: zarr.Group, missing, allow_missing: bool) -> None:
    if not missing:
        return
    unflaggable = [
        name for name in dict.fromkeys(d.array for d in missing) if name not in FLAGGABLE
    ]
    if allow_missing and not unflaggable:
        return
    if unflaggable:
        advice = (
            f"only missing vis and flags chunks can be read as flagged (allow_missing), "
            f"{', '.join(unflaggable)} cannot: {RECOPY}"
        )
    else:
        advice = (
            f"{RECOPY}, or pass allow_missing=True (--allow-missing on the command line) to "
            "read their cells as flagged"
        )
    if not group.attrs.get(EVERY_CHUNK_ATTR) and any(d.array == "vis" for d in missing):
        advice += (
            " (this store was written before tabascal kept every chunk, so an all-zero vis "
            "chunk may have been left out on purpose; allow_missing reads it as flagged)"
        )
    _fail(path, f"{_missing_text(group, missing)}; {advice}")


def _lost_cells(missing, rows: slice, shape: tuple[int, ...]) -> np.ndarray | None:
    """shape = (rows.stop - rows.start, n_freq, n_time) bool: the cells of ``rows`` whose vis or
    flags chunk is missing; None when there is none."""
    lost = None
    for d in missing:
        if d.array not in FLAGGABLE:
            continue
        (first, last), *cells = d.region
        start, stop = max(first, rows.start), min(last, rows.stop)
        if start < stop:
            lost = np.zeros(shape, bool) if lost is None else lost
            lost[(slice(start - rows.start, stop - rows.start), *(slice(*c) for c in cells))] = True
    return lost


def _problem(array: zarr.Array, err: Exception) -> str:
    # zarr's crc32c codec raises a ValueError saying the checksums do not match; a truncated
    # chunk of a checksummed array fails the same way.
    if any(isinstance(c, Crc32cCodec) for c in array.compressors) and "checksum" in str(err):
        return "checksum mismatch"
    return f"cannot be decoded ({type(err).__name__}: {err})"


def _undecodable(name: str, array: zarr.Array, chunk, region) -> ChunkDamage | None:
    try:
        array[region]
    except Exception as err:  # any codec's failure: zstd, crc32c, a short buffer
        return _damage(name, chunk, region, _problem(array, err))
    return None


def _read(path, group: zarr.Group, name: str, rows: slice | None = None) -> np.ndarray:
    """``group[name]`` (its ``rows`` of axis 0 when given); a chunk that does not decode is a
    StoreError naming the array, its rows and its chunk."""
    array = group[name]
    try:
        return array[...] if rows is None else array[rows]
    except MemoryError:
        raise
    except Exception as err:
        for chunk, region in _chunks(array, rows):
            found = _undecodable(name, array, chunk, region)
            if found is not None:
                raise StoreError(f"{path}: {found}; {RECOPY}") from None
        raise StoreError(
            f"{path}: array {name} cannot be read ({type(err).__name__}: {err})"
        ) from err


def _check_antennas(path, group: zarr.Group, info: StoreInfo) -> None:
    a1, a2 = _read(path, group, "a1"), _read(path, group, "a2")
    if info.n_bl and (min(a1.min(), a2.min()) < 0 or max(a1.max(), a2.max()) >= info.n_ant):
        _fail(path, f"a1/a2 hold antenna indices outside [0, {info.n_ant})")


def _orbits(path, group: zarr.Group):
    """The orbits as handed to a fit: the stored ones, displaced where the store says so."""
    base = _stored_orbits(path, group)
    offsets = group.attrs.get(ORBIT_OFFSETS_ATTR)
    if offsets is None:
        return base
    try:
        return OffsetOrbits(base, offsets["time_offset_s"], offsets["ric_offset_m"])
    except (KeyError, TypeError, ValueError) as err:
        _fail(path, f"attribute '{ORBIT_OFFSETS_ATTR}': {err}")


def _stored_orbits(path, group: zarr.Group):
    """The store's emitters: its satellites, joined by its ground transmitters and aircraft
    where it has them (``observation.emitters.join``)."""
    attrs = dict(group.attrs)
    names = attrs.get("satellite_names")
    n_satellites, n_ground, n_aircraft = _emitter_counts(path, group)
    cut = np.cumsum([0, n_satellites, n_ground, n_aircraft])
    own = [None if names is None else tuple(names[a:b]) for a, b in itertools.pairwise(cut)]
    satellites = _stored_satellites(path, group, own[0])
    gast0 = float(attrs["gast0_rad"])
    ground = aircraft = None
    try:
        if n_ground:
            fields = {f: _read(path, group, f"{GROUND_GROUP}/{f}") for f in GROUND_FIELDS}
            ground = emitters.GroundEmitters(**fields, gast0_rad=gast0, names=own[1])
        if n_aircraft:
            starts = _read(path, group, f"{AIRCRAFT_GROUP}/track_start")
            times = _read(path, group, f"{AIRCRAFT_GROUP}/times_s")
            itrf = _read(path, group, f"{AIRCRAFT_GROUP}/itrf")
            if starts[0] != 0 or starts[-1] != times.size or np.any(np.diff(starts) < 0):
                raise ValueError(
                    f"{AIRCRAFT_GROUP}/track_start must rise from 0 to the {times.size} samples"
                )
            tracks = [emitters.Track(times[a:b], itrf[a:b]) for a, b in itertools.pairwise(starts)]
            aircraft = emitters.AircraftTracks(tracks, gast0, names=own[2])
    except ValueError as err:
        _fail(path, f"its ground transmitters or aircraft tracks are not valid: {err}")
    return emitters.join(satellites, ground, aircraft)


def _stored_satellites(path, group: zarr.Group, names):
    attrs = dict(group.attrs)
    if TLE_ATTR not in attrs:
        fields = {f: _read(path, group, f"satellites/{f}") for f in ORBIT_FIELDS}
        return CircularOrbits(**fields, names=names)
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


class StoreReader:
    """An observation store opened for reading: structure, shapes and chunks checked once.

    A store missing chunks is refused, naming each array and its missing rows, unless
    ``allow_missing``: then missing vis and flags chunks read as flagged cells (how many is
    logged as a warning and kept in ``missing_cells``); missing chunks of any other array are
    refused all the same. ``missing``: the missing chunks found.
    """

    def __init__(self, path, *, allow_missing: bool = False):
        self.path = path
        self._group = _open_group(path)
        self.info = _shapes(path, self._group)
        self.missing = _missing_chunks(path, self._group)
        _refuse_missing(path, self._group, self.missing, allow_missing)
        _check_antennas(path, self._group, self.info)
        i = self.info
        lost = (
            _lost_cells(self.missing, rows, (rows.stop - rows.start, i.n_freq, i.n_time))
            for rows in row_blocks(i.n_bl, i.chunk_rows)
        )
        self.missing_cells = sum(int(cells.sum()) for cells in lost if cells is not None)
        if self.missing_cells:
            n_cells = i.n_bl * i.n_freq * i.n_time
            logger.warning(
                "%s: reading %d of %d cells (%.2f %%) as flagged: %s",
                path,
                self.missing_cells,
                n_cells,
                100 * self.missing_cells / n_cells,
                _missing_text(self._group, self.missing),
            )

    def _meta_fields(self, rows: slice) -> dict:
        path, group = self.path, self._group
        attrs = dict(group.attrs)
        return dict(
            a1=_read(path, group, "a1", rows),
            a2=_read(path, group, "a2", rows),
            ant_itrf=_read(path, group, "ant_itrf"),
            times_s=_read(path, group, "times_s"),
            freqs_hz=_read(path, group, "freqs_hz"),
            epoch_utc=str(attrs["epoch_utc"]),
            orbits=_orbits(path, group),
            metadata=dict(attrs.get("metadata") or {}),
            **{name: float(attrs[name]) for name in SCALAR_ATTRS},
        )

    def meta(self) -> ObservationMeta:
        """Everything but the visibilities (a1, a2 complete)."""
        return ObservationMeta(**self._meta_fields(slice(0, self.info.n_bl)))

    def read(self, rows: slice | None = None, *, truth: bool = True) -> Observation:
        """Baseline ``rows`` (a contiguous slice; all when None); only the chunks holding them
        are read. ``truth=False`` skips the truth group."""
        path, group, info = self.path, self._group, self.info
        rows = slice(0, info.n_bl) if rows is None else rows
        start, stop, step = rows.indices(info.n_bl)
        if step != 1:
            raise ValueError(f"read_observation: rows must be contiguous, got step {step}")
        rows = slice(start, max(start, stop))
        logger.debug("reading baseline rows %d..%d of %s", rows.start, rows.stop, path)
        noise = _read(path, group, "noise", rows if info.noise_per_baseline else None)
        flags = _read(path, group, "flags", rows)
        lost = _lost_cells(self.missing, rows, flags.shape)
        if lost is not None:
            flags |= lost
        found = None
        if truth and info.has_truth:
            found = Truth(
                sky_vis=_read(path, group, "truth/sky_vis", rows),
                rfi_vis=_read(path, group, "truth/rfi_vis", rows),
                **{name: _read(path, group, f"truth/{name}") for name in TRUTH_PER_ANTENNA},
            )
        return Observation(
            **self._meta_fields(rows),
            vis=_read(path, group, "vis", rows),
            flags=flags,
            noise=np.asarray(noise, dtype=np.float64),
            rows=rows,
            n_bl_total=info.n_bl,
            truth=found,
        )


def store_info(path, *, allow_missing: bool = False) -> StoreInfo:
    """Sizes of the store at ``path``, from its metadata (no visibility is read; the chunk
    files are listed, see :class:`StoreReader`)."""
    return StoreReader(path, allow_missing=allow_missing).info


def read_meta(path, *, allow_missing: bool = False) -> ObservationMeta:
    """Everything but the visibilities (a1, a2 complete); see :class:`StoreReader`."""
    return StoreReader(path, allow_missing=allow_missing).meta()


def read_observation(
    path, rows: slice | None = None, *, truth: bool = True, allow_missing: bool = False
) -> Observation:
    """Read baseline ``rows`` (a contiguous slice; all when None) of the store at ``path``.

    Only the chunks holding those rows are read. ``truth=False`` skips the truth group.
    ``allow_missing``: read missing vis and flags chunks as flagged cells instead of refusing
    the store (see :class:`StoreReader`).
    """
    return StoreReader(path, allow_missing=allow_missing).read(rows, truth=truth)


def verify_store(path) -> StoreVerification:
    """Read every chunk of every array of the store at ``path`` and report each that is missing
    or does not decode. Raises StoreError only when the store's structure itself is wrong (not
    a store, an array missing or misshapen)."""
    group = _open_group(path)
    _shapes(path, group)
    arrays = _arrays(group)
    missing = {(d.array, d.chunk): d for d in _missing_chunks(path, group)}
    damage, n_chunks = [], 0
    for name, array in arrays.items():
        for chunk, region in _chunks(array):
            n_chunks += 1
            found = missing.get((name, chunk)) or _undecodable(name, array, chunk, region)
            if found is not None:
                damage.append(found)
    checksums = all(any(isinstance(c, Crc32cCodec) for c in a.compressors) for a in arrays.values())
    return StoreVerification(tuple(damage), len(arrays), n_chunks, checksums)
