"""Writing observation stores atomically, whole or block of baseline rows by block.

A store is built in a hidden sibling directory, ``.NAME.partial-HOST-PID-TOKEN``, and renamed
to its name when complete, so that a process killed at any moment leaves either no store or a
whole one under that name. The sibling names the host and process that made it: the next
writer of the same name removes what a process no longer running left behind
(:func:`clear_leftovers`) and leaves a live one's alone.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import signal
import socket
import uuid
from datetime import datetime
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from tabascal.observation import emitters
from tabascal.observation.orbit_offsets import OffsetOrbits
from tabascal.observation.tle import TleOrbits
from tabascal.store.format import (
    AIRCRAFT_GROUP,
    EMITTERS_FORMAT_VERSION,
    EVERY_CHUNK_ATTR,
    FORMAT,
    FORMAT_VERSION,
    GROUND_FIELDS,
    GROUND_GROUP,
    ORBIT_FIELDS,
    ORBIT_OFFSETS_ATTR,
    SCALAR_ATTRS,
    TLE_ATTR,
    TRUTH_DTYPES,
    TRUTH_PER_ANTENNA,
    Observation,
    ObservationMeta,
    StoreError,
    default_chunk_rows,
)

log = logging.getLogger(__name__)

#: Testing hook: ``TABASCAL_KILL_AT=POINT:N`` makes the process SIGKILL itself the N-th time it
#: reaches ``POINT`` (see :func:`kill_point`), to check what an interruption there leaves.
KILL_AT_ENV = "TABASCAL_KILL_AT"
#: With it, ``TABASCAL_KILL_MARKER=FILE``: only the process that removes FILE is killed, so that
#: of several processes (Dask workers, and the one that replaces a killed worker) one dies once.
KILL_MARKER_ENV = "TABASCAL_KILL_MARKER"
_kill_counts: dict[str, int] = {}

#: The errors of a write that ran out of room: the disk is full or the quota is spent.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_UNWRITABLE = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}
#: What a writer keeps beside a store while it works: the store being built, the simulator's
#: scratch, and a store moved aside to be replaced.
LEFTOVER_KINDS = ("partial", "scratch", "replaced")
_LEFTOVER = re.compile(
    rf"(?P<kind>{'|'.join(LEFTOVER_KINDS)})-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{{8}}"
)

# Options of every array. zarr leaves out a chunk equal to the fill value unless told to write
# empty chunks: writing every one makes an absent chunk always mean a damaged store. crc32c, the
# last byte codec, makes a changed chunk fail to decode instead of reading as other numbers
# (a flipped byte inside zstd's output otherwise decodes silently).
ARRAY_OPTIONS = {
    "compressors": (ZstdCodec(), Crc32cCodec()),
    "config": {"write_empty_chunks": True},
}


class ObservationWriter:
    """Write a new store block of baseline rows by block; it appears under ``path`` only whole.

    ``noise`` is the scalar noise (Jy), or None to give a per-baseline noise with each block:
    (n_rows,), or (n_rows, n_freq) per baseline and channel with ``noise_per_channel``.
    ``truth``: whether truth visibilities come with each block and :meth:`write_truth` is
    called. Use as a context manager::

        with ObservationWriter(path, meta, noise=0.5) as writer:
            for rows in row_blocks(meta.n_bl, writer.chunk_rows):
                writer.write_rows(rows.start, vis=vis[rows], flags=flags[rows])

    The store is built in a hidden sibling directory (:func:`temporary_sibling`) and renamed
    to ``path`` when the block exits without an exception and every row (and the truth) was
    written; otherwise the directory is removed. An existing ``path`` is an error unless
    ``overwrite``; what killed writers of ``path`` left is cleared first
    (:func:`clear_leftovers`). A folder that cannot be written, or a disk that fills up, is a
    StoreError saying so (nothing is then left under ``path``).
    """

    def __init__(
        self,
        path,
        meta: ObservationMeta,
        *,
        noise: float | None = None,
        noise_per_channel: bool = False,
        truth: bool = False,
        overwrite: bool = False,
        chunk_rows: int | None = None,
    ):
        if noise_per_channel and noise is not None:
            raise ValueError(
                "ObservationWriter: a noise per channel comes with each block; give noise=None"
            )
        self.path = Path(path)
        self.meta = meta
        self.noise = noise
        self.noise_per_channel = noise_per_channel
        self.truth = truth
        self.overwrite = overwrite
        chunk_rows = chunk_rows or default_chunk_rows(meta.n_freq, meta.n_time)
        self.chunk_rows = max(1, min(chunk_rows, meta.n_bl))
        self._tmp: Path | None = None

    def __enter__(self) -> ObservationWriter:
        clear_leftovers(self.path)
        if self.path.exists() and not self.overwrite:
            raise FileExistsError(f"{self.path} already exists; pass overwrite to replace it")
        self._tmp = make_temporary_folder(self.path, "partial")
        try:
            self._group = self._create(zarr.open_group(self._tmp, mode="w-"))
        except BaseException as err:
            self._discard()
            _raise_as_store_error(self.path, err)
            raise
        self._written = np.zeros(self.meta.n_bl, dtype=bool)
        self._truth_written = False
        return self

    def _create(self, group: zarr.Group) -> zarr.Group:
        m = self.meta
        group.attrs.update(
            {
                "format": FORMAT,
                "format_version": _format_version(m.orbits),
                EVERY_CHUNK_ATTR: True,
                "epoch_utc": m.epoch_utc,
                "satellite_names": list(m.orbits.names) if m.orbits.names else None,
                "metadata": m.metadata,
                **{name: float(getattr(m, name)) for name in SCALAR_ATTRS},
                **_tle_attrs(m),
                **_offset_attrs(m.orbits),
            }
        )
        small = {
            "a1": np.asarray(m.a1, dtype=np.int32),
            "a2": np.asarray(m.a2, dtype=np.int32),
            "ant_itrf": np.asarray(m.ant_itrf, dtype=np.float64),
            "times_s": np.asarray(m.times_s, dtype=np.float64),
            "freqs_hz": np.asarray(m.freqs_hz, dtype=np.float64),
        }
        satellites, ground, aircraft = emitters.split(_stored_orbits(m.orbits))
        if not isinstance(satellites, TleOrbits):
            small |= {f"satellites/{f}": getattr(satellites, f) for f in ORBIT_FIELDS}
        small |= _other_emitters(ground, aircraft)
        for name, data in small.items():
            group.create_array(name, data=data, **ARRAY_OPTIONS)
        cube, chunks = (m.n_bl, m.n_freq, m.n_time), (self.chunk_rows, m.n_freq, m.n_time)
        # The handles keep the write options (an array opened again from the group would not).
        self._arrays = {
            "vis": group.create_array(
                "vis", shape=cube, chunks=chunks, dtype=np.complex64, **ARRAY_OPTIONS
            ),
            "flags": group.create_array(
                "flags", shape=cube, chunks=chunks, dtype=bool, fill_value=True, **ARRAY_OPTIONS
            ),
        }
        if self.noise is None:
            channels = (m.n_freq,) if self.noise_per_channel else ()
            self._arrays["noise"] = group.create_array(
                "noise",
                shape=(m.n_bl, *channels),
                chunks=(self.chunk_rows, *channels),
                dtype=float,
                **ARRAY_OPTIONS,
            )
        else:
            group.create_array("noise", data=np.asarray(float(self.noise)), **ARRAY_OPTIONS)
        if self.truth:
            for name in ("truth/sky_vis", "truth/rfi_vis"):
                self._arrays[name] = group.create_array(
                    name, shape=cube, chunks=chunks, dtype=np.complex64, **ARRAY_OPTIONS
                )
        return group

    def write_rows(self, start: int, *, vis, flags, noise=None, sky_vis=None, rfi_vis=None):
        """Write rows ``start : start + len(vis)``.

        vis, flags (and sky_vis, rfi_vis when the writer keeps truth): (n_rows, n_freq, n_time);
        noise: (n_rows,) when the writer has no scalar noise ((n_rows, n_freq) when it was
        created with noise_per_channel), else None.
        """
        m = self.meta
        n_rows = np.shape(vis)[0]
        rows = slice(start, start + n_rows)
        if start < 0 or rows.stop > m.n_bl:
            raise ValueError(f"write_rows: rows {start}:{rows.stop} are outside [0, {m.n_bl})")
        blocks = {"vis": vis, "flags": flags}
        if self.truth:
            blocks |= {"truth/sky_vis": sky_vis, "truth/rfi_vis": rfi_vis}
        elif sky_vis is not None or rfi_vis is not None:
            raise ValueError("write_rows: this writer keeps no truth; create it with truth=True")
        for name, block in blocks.items():
            if block is None or np.shape(block) != (n_rows, m.n_freq, m.n_time):
                raise ValueError(
                    f"write_rows: '{name}' has shape {np.shape(block)}, expected "
                    f"({n_rows}, {m.n_freq}, {m.n_time})"
                )
        noise_shape = (n_rows, m.n_freq) if self.noise_per_channel else (n_rows,)
        if (noise is None) != (self.noise is not None) or (
            noise is not None and np.shape(noise) != noise_shape
        ):
            raise ValueError(
                f"write_rows: noise has shape {np.shape(noise)}; give a per-baseline noise of "
                "shape (n_rows,) (with noise_per_channel (n_rows, n_freq)) exactly when the "
                "writer was created with noise=None"
            )
        for name, block in blocks.items():
            dtype = bool if name == "flags" else np.complex64
            self._arrays[name][rows] = np.asarray(block, dtype=dtype)
        if noise is not None:
            self._arrays["noise"][rows] = np.asarray(noise, dtype=np.float64)
        self._written[rows] = True
        kill_point("store-rows")

    def write_truth(
        self, *, gains, rfi_amp, rfi_eirp_w_hz, source_ra_rad, source_dec_rad, source_flux_jy
    ):
        """Write the per-antenna and sky truth (shapes as in :class:`tabascal.store.Truth`)."""
        if not self.truth:
            raise ValueError("write_truth: this writer keeps no truth; create it with truth=True")
        values = dict(
            gains=gains,
            rfi_amp=rfi_amp,
            rfi_eirp_w_hz=rfi_eirp_w_hz,
            source_ra_rad=source_ra_rad,
            source_dec_rad=source_dec_rad,
            source_flux_jy=source_flux_jy,
        )
        for name, value in values.items():
            dtype = TRUTH_DTYPES.get(name, np.float64)
            self._group.create_array(
                f"truth/{name}", data=np.asarray(value, dtype=dtype), **ARRAY_OPTIONS
            )
        self._truth_written = True

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self._discard()
            _raise_as_store_error(self.path, exc)
            return False
        try:
            missing = np.flatnonzero(~self._written)
            if missing.size:
                raise StoreError(
                    f"{self.path}: {missing.size} of {self.meta.n_bl} rows were never written "
                    f"(first {missing[0]}); nothing was stored"
                )
            if self.truth and not self._truth_written:
                raise StoreError(f"{self.path}: write_truth was never called; nothing was stored")
            self._publish()
        except BaseException as err:
            self._discard()
            _raise_as_store_error(self.path, err)
            raise
        return False

    def _publish(self):
        publish_folder(self._tmp, self.path, overwrite=self.overwrite)
        self._tmp = None
        log.info("wrote %s", self.path)

    def _discard(self):
        if self._tmp is not None and self._tmp.exists():
            shutil.rmtree(self._tmp)
        self._tmp = None


def publish_folder(tmp: Path, path: Path, *, overwrite: bool) -> None:
    """Rename the finished folder ``tmp`` (a ``temporary_sibling``) to ``path``. Replacing
    takes two renames (a directory cannot be renamed over a non-empty one): a kill between
    them leaves the old folder in a ``.replaced-`` sibling, which ``clear_leftovers`` puts
    back. Without ``overwrite`` a ``path`` that appeared meanwhile is never replaced."""
    kill_point("store-publish")
    old = None
    if overwrite and path.exists():
        old = temporary_sibling(path, "replaced")
        path.rename(old)
        kill_point("store-replace")
    try:
        # Without overwrite this is also the check that no other writer got there first: a
        # directory is not renamed over a non-empty one.
        tmp.rename(path)
    except OSError as err:
        if old is not None:
            old.rename(path)
        if err.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
            raise FileExistsError(
                f"{path} appeared while this store was being written (another write to the same "
                "name?); nothing was stored"
            ) from err
        raise
    if old is not None:
        shutil.rmtree(old)


def kill_point(point: str) -> None:
    """Testing hook: SIGKILL this process the N-th time it reaches ``point`` when
    ``$TABASCAL_KILL_AT`` is ``POINT:N`` (N = 1 without ``:N``); nothing otherwise.

    Points: ``store-rows`` (a block of rows written), ``store-publish`` (a store complete,
    not yet renamed into place), ``store-replace`` (an overwritten store moved aside, the new
    one not yet in place); the fit's are in ``tabascal.fitting``: ``checkpoint``,
    ``results-block``, ``results-replace`` and ``output-file``. With ``$TABASCAL_KILL_MARKER``
    naming a file, the process is killed only if it is the one to remove that file; another
    reaching the point after goes on.
    """
    wanted = os.environ.get(KILL_AT_ENV)
    if not wanted:
        return
    name, _, count = wanted.partition(":")
    if name != point:
        return
    _kill_counts[point] = _kill_counts.get(point, 0) + 1
    if _kill_counts[point] < int(count or 1):
        return
    marker = os.environ.get(KILL_MARKER_ENV)
    if marker:
        try:
            os.unlink(marker)
        except FileNotFoundError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def why_unwritable(err: BaseException) -> str | None:
    """In words, why a write failed with ``err`` when the user can do something about it (a
    full disk or quota, a read-only or forbidden folder); None for any other error."""
    return _UNWRITABLE.get(err.errno) if isinstance(err, OSError) else None


def _raise_as_store_error(path: Path, err: BaseException) -> None:
    """Raise ``err`` as a StoreError that names the folder and the reason, when
    ``why_unwritable`` has one; return otherwise (the caller re-raises ``err``)."""
    reason = why_unwritable(err)
    if reason is None:
        return
    if err.errno in NO_SPACE:
        raise StoreError(
            f"{path}: {reason} in {path.parent} while writing the store ({err}); the partial "
            f"store was removed and {path} is as it was: free some space and run again"
        ) from err
    raise StoreError(
        f"cannot write the store {path} into {path.parent}: {reason} ({err}); choose an "
        "output in a folder you can write to"
    ) from err


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "unknown"


def temporary_sibling(path, kind: str) -> Path:
    """A new hidden name beside ``path`` for this process's temporary ``kind`` (one of
    ``LEFTOVER_KINDS``): ``.NAME.KIND-HOST-PID-TOKEN``, naming the process that owns it."""
    path = Path(path)
    token = uuid.uuid4().hex[:8]
    return path.parent / f".{path.name}.{kind}-{_host()}-{os.getpid()}-{token}"


def make_temporary_folder(path, kind: str) -> Path:
    """Create and return a ``temporary_sibling`` folder of ``path`` (and ``path``'s parent);
    a folder that cannot be written is a StoreError naming it, before any work."""
    path = Path(path)
    folder = temporary_sibling(path, kind)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
    except OSError as err:
        _raise_as_store_error(path, err)
        raise
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clear_leftovers(path) -> None:
    """Clear what writers of ``path`` that were killed left beside it, each with a warning.

    A ``.partial-`` or ``.scratch-`` sibling of a process no longer running on this host is
    removed; a ``.replaced-`` one (a store moved aside by an overwrite) is renamed back to
    ``path`` when ``path`` is absent, else removed. Leftovers of live processes are left
    alone, and so are another host's: a process there cannot be checked from here.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return
    prefix = f".{path.name}."
    for entry in sorted(path.parent.iterdir()):
        match = entry.name.startswith(prefix) and _LEFTOVER.fullmatch(entry.name[len(prefix) :])
        if not match:
            continue
        pid, host = int(match["pid"]), match["host"]
        if host != _host():
            log.warning(
                "%s was left by process %d on host %s, which cannot be checked from here; "
                "remove it once no write of %s is running there",
                entry,
                pid,
                host,
                path,
            )
            continue
        if _alive(pid):
            continue
        if match["kind"] == "replaced" and not path.exists():
            entry.rename(path)
            log.warning(
                "%s: put back the store that an interrupted overwrite (process %d, no longer "
                "running) had moved aside to %s",
                path,
                pid,
                entry.name,
            )
            continue
        shutil.rmtree(entry, ignore_errors=True)
        log.warning(
            "%s %s, left by an interrupted write of %s (process %d, no longer running)",
            "could not remove" if entry.exists() else "removed",
            entry,
            path,
            pid,
        )


def _stored_orbits(orbits):
    """The orbits a store holds: displaced orbits are stored as their base and offsets."""
    return orbits.base if isinstance(orbits, OffsetOrbits) else orbits


def _format_version(orbits) -> int:
    """EMITTERS_FORMAT_VERSION for a store holding ground transmitters or aircraft, else
    FORMAT_VERSION."""
    _, ground, aircraft = emitters.split(_stored_orbits(orbits))
    return FORMAT_VERSION if ground is None and aircraft is None else EMITTERS_FORMAT_VERSION


def _other_emitters(ground, aircraft) -> dict:
    """The arrays of the ground transmitters and aircraft tracks (``reader._other_emitters``
    reads them): each transmitter's WGS84 position, and the tracks' samples one after another
    with where each track starts (and, last, where the samples end)."""
    arrays = {}
    if ground is not None:
        arrays |= {f"{GROUND_GROUP}/{f}": getattr(ground, f) for f in GROUND_FIELDS}
    if aircraft is not None:
        counts = [track.times_s.size for track in aircraft.tracks]
        arrays |= {
            f"{AIRCRAFT_GROUP}/times_s": np.concatenate([t.times_s for t in aircraft.tracks]),
            f"{AIRCRAFT_GROUP}/itrf": np.concatenate([t.itrf for t in aircraft.tracks]),
            f"{AIRCRAFT_GROUP}/track_start": np.cumsum([0, *counts]).astype(np.int64),
        }
    return arrays


def _offset_attrs(orbits) -> dict:
    if not isinstance(orbits, OffsetOrbits):
        return {}
    offsets = {
        "time_offset_s": [float(t) for t in orbits.time_offset_s],
        "ric_offset_m": [[float(x) for x in row] for row in orbits.ric_offset_m],
    }
    return {ORBIT_OFFSETS_ATTR: offsets}


def _tle_attrs(meta: ObservationMeta) -> dict:
    """The TLE attribute of a store whose orbits are TLE element sets (else nothing).

    The orbits are rebuilt from the store's own epoch and sidereal angle when read, so they
    must be the observation's.
    """
    orbits = emitters.split(_stored_orbits(meta.orbits))[0]
    if not isinstance(orbits, TleOrbits):
        return {}
    same_epoch = datetime.fromisoformat(orbits.epoch_utc) == datetime.fromisoformat(meta.epoch_utc)
    if not same_epoch or not np.isclose(orbits.gast0_rad, meta.gast0_rad, rtol=0, atol=1e-12):
        raise ValueError(
            f"the TLE orbits were built for epoch {orbits.epoch_utc} and gast0_rad "
            f"{orbits.gast0_rad}, the observation starts {meta.epoch_utc} with gast0_rad "
            f"{meta.gast0_rad}; build them with the observation's (tle.load_tle_orbits)"
        )
    lines = {"line1": list(orbits.line1), "line2": list(orbits.line2)}
    return {TLE_ATTR: {**lines, "ut1_utc_s": orbits.ut1_utc_s}}


def write_observation(path, obs: Observation, *, overwrite: bool = False, chunk_rows=None) -> None:
    """Write a complete observation (all rows) atomically; see :class:`ObservationWriter`."""
    if obs.rows != slice(0, obs.n_bl_total) or obs.n_bl != obs.n_bl_total:
        raise ValueError("write_observation: the observation must hold every row of its store")
    per_baseline = np.ndim(obs.noise) >= 1
    t = obs.truth
    with ObservationWriter(
        path,
        obs.meta,
        noise=None if per_baseline else float(obs.noise),
        noise_per_channel=np.ndim(obs.noise) == 2,
        truth=t is not None,
        overwrite=overwrite,
        chunk_rows=chunk_rows,
    ) as writer:
        writer.write_rows(
            0,
            vis=obs.vis,
            flags=obs.flags,
            noise=obs.noise if per_baseline else None,
            sky_vis=None if t is None else t.sky_vis,
            rfi_vis=None if t is None else t.rfi_vis,
        )
        if t is not None:
            writer.write_truth(**{name: getattr(t, name) for name in TRUTH_PER_ANTENNA})
