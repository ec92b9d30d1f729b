"""Writing observation stores atomically, whole or block of baseline rows by block."""

from __future__ import annotations

import logging
import shutil
import uuid
from datetime import datetime
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from tabascal.observation.tle import TleOrbits
from tabascal.store.format import (
    EVERY_CHUNK_ATTR,
    FORMAT,
    FORMAT_VERSION,
    ORBIT_FIELDS,
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

    ``noise`` is the scalar noise (Jy), or None to give a per-baseline noise with each block.
    ``truth``: whether truth visibilities come with each block and :meth:`write_truth` is
    called. Use as a context manager::

        with ObservationWriter(path, meta, noise=0.5) as writer:
            for rows in row_blocks(meta.n_bl, writer.chunk_rows):
                writer.write_rows(rows.start, vis=vis[rows], flags=flags[rows])

    The store is built in a hidden sibling directory and renamed to ``path`` when the block
    exits without an exception and every row (and the truth) was written; otherwise the
    directory is removed. An existing ``path`` is an error unless ``overwrite``.
    """

    def __init__(
        self,
        path,
        meta: ObservationMeta,
        *,
        noise: float | None = None,
        truth: bool = False,
        overwrite: bool = False,
        chunk_rows: int | None = None,
    ):
        self.path = Path(path)
        self.meta = meta
        self.noise = noise
        self.truth = truth
        self.overwrite = overwrite
        chunk_rows = chunk_rows or default_chunk_rows(meta.n_freq, meta.n_time)
        self.chunk_rows = max(1, min(chunk_rows, meta.n_bl))
        self._tmp: Path | None = None

    def __enter__(self) -> ObservationWriter:
        if self.path.exists() and not self.overwrite:
            raise FileExistsError(f"{self.path} already exists; pass overwrite to replace it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.parent / f".{self.path.name}.partial-{uuid.uuid4().hex[:12]}"
        try:
            self._group = self._create(zarr.open_group(self._tmp, mode="w-"))
        except BaseException:
            self._discard()
            raise
        self._written = np.zeros(self.meta.n_bl, dtype=bool)
        self._truth_written = False
        return self

    def _create(self, group: zarr.Group) -> zarr.Group:
        m = self.meta
        group.attrs.update(
            {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                EVERY_CHUNK_ATTR: True,
                "epoch_utc": m.epoch_utc,
                "satellite_names": list(m.orbits.names) if m.orbits.names else None,
                "metadata": m.metadata,
                **{name: float(getattr(m, name)) for name in SCALAR_ATTRS},
                **_tle_attrs(m),
            }
        )
        small = {
            "a1": np.asarray(m.a1, dtype=np.int32),
            "a2": np.asarray(m.a2, dtype=np.int32),
            "ant_itrf": np.asarray(m.ant_itrf, dtype=np.float64),
            "times_s": np.asarray(m.times_s, dtype=np.float64),
            "freqs_hz": np.asarray(m.freqs_hz, dtype=np.float64),
        }
        if not isinstance(m.orbits, TleOrbits):
            small |= {f"satellites/{f}": getattr(m.orbits, f) for f in ORBIT_FIELDS}
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
            self._arrays["noise"] = group.create_array(
                "noise", shape=(m.n_bl,), chunks=(self.chunk_rows,), dtype=float, **ARRAY_OPTIONS
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
        noise: (n_rows,) when the writer has no scalar noise, else None.
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
        if (noise is None) != (self.noise is not None) or (
            noise is not None and np.shape(noise) != (n_rows,)
        ):
            raise ValueError(
                "write_rows: give a per-baseline noise of shape (n_rows,) exactly when the "
                "writer was created with noise=None"
            )
        for name, block in blocks.items():
            dtype = bool if name == "flags" else np.complex64
            self._arrays[name][rows] = np.asarray(block, dtype=dtype)
        if noise is not None:
            self._arrays["noise"][rows] = np.asarray(noise, dtype=np.float64)
        self._written[rows] = True

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
        except BaseException:
            self._discard()
            raise
        return False

    def _publish(self):
        old = None
        if self.path.exists():
            old = self.path.parent / f".{self.path.name}.replaced-{uuid.uuid4().hex[:12]}"
            self.path.rename(old)
        try:
            self._tmp.rename(self.path)
        except BaseException:
            if old is not None:
                old.rename(self.path)
            raise
        self._tmp = None
        if old is not None:
            shutil.rmtree(old)
        log.info("wrote %s", self.path)

    def _discard(self):
        if self._tmp is not None and self._tmp.exists():
            shutil.rmtree(self._tmp)
        self._tmp = None


def _tle_attrs(meta: ObservationMeta) -> dict:
    """The TLE attribute of a store whose orbits are TLE element sets (else nothing).

    The orbits are rebuilt from the store's own epoch and sidereal angle when read, so they
    must be the observation's.
    """
    orbits = meta.orbits
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
    per_baseline = np.ndim(obs.noise) == 1
    t = obs.truth
    with ObservationWriter(
        path,
        obs.meta,
        noise=None if per_baseline else float(obs.noise),
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
