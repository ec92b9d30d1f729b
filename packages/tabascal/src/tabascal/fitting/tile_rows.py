"""One tile of an observation as an observation of its own (``TileRows``, a
``blockwise.RowSource``): every array with a time or channel axis cut to the tile's fitted
integrations and channels, everything else as it is.

The tile keeps the observation's clock: its ``times_s`` are the observation's own (seconds
from the observation's start, not the tile's), so that ``epoch_utc`` and ``gast0_rad`` still
place them, and the satellites' and aircraft's positions are those of the whole observation at
those times.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import numpy as np

from tabascal.fitting.tiles import Tile
from tabascal.parallel import blockwise
from tabascal.store.format import Observation, ObservationMeta, Truth, row_blocks


def _cut(tile: Tile) -> tuple[slice, slice]:
    """(channels, integrations) of the tile's fitted ranges."""
    return slice(*tile.freq), slice(*tile.time)


def window_meta(meta: ObservationMeta, tile: Tile) -> ObservationMeta:
    """The metadata of ``tile`` of the observation of ``meta`` (an ObservationMeta or an
    Observation): its integrations' ``times_s`` and its channels' ``freqs_hz``."""
    channels, times = _cut(tile)
    whole = {f.name: getattr(meta, f.name) for f in fields(ObservationMeta)}
    return ObservationMeta(
        **{
            **whole,
            "times_s": np.asarray(meta.times_s)[times],
            "freqs_hz": np.asarray(meta.freqs_hz)[channels],
        }
    )


def _window_noise(noise: np.ndarray, tile: Tile) -> np.ndarray:
    """A noise of (), (n,) or (n, n_freq) for the tile's channels."""
    noise = np.asarray(noise)
    return noise[:, _cut(tile)[0]] if noise.ndim == 2 else noise


def _window_truth(truth: Truth | None, tile: Tile) -> Truth | None:
    if truth is None:
        return None
    channels, times = _cut(tile)
    return Truth(
        sky_vis=truth.sky_vis[:, channels, times],
        rfi_vis=truth.rfi_vis[:, channels, times],
        gains=truth.gains[:, channels, times],
        rfi_amp=truth.rfi_amp[..., channels, times],
        rfi_eirp_w_hz=truth.rfi_eirp_w_hz[:, channels, times],
        source_ra_rad=truth.source_ra_rad,
        source_dec_rad=truth.source_dec_rad,
        source_flux_jy=truth.source_flux_jy[:, channels],
    )


def window_observation(obs: Observation, tile: Tile) -> Observation:
    """``tile`` of ``obs`` (its rows as they are): vis, flags, noise and truth cut to the
    tile's channels and integrations."""
    channels, times = _cut(tile)
    return Observation(
        **vars(window_meta(obs, tile)),
        vis=np.asarray(obs.vis)[:, channels, times],
        flags=np.asarray(obs.flags)[:, channels, times],
        noise=_window_noise(obs.noise, tile),
        rows=obs.rows,
        n_bl_total=obs.n_bl_total,
        truth=_window_truth(obs.truth, tile),
    )


def _joined(parts: list[Observation], meta: ObservationMeta) -> Observation:
    """Blocks of consecutive rows of one observation as one, with ``meta``'s metadata."""
    first = parts[0]
    noise = first.noise if np.ndim(first.noise) == 0 else np.concatenate([p.noise for p in parts])
    truth = first.truth
    if truth is not None:
        truth = dataclasses.replace(
            truth,
            sky_vis=np.concatenate([p.truth.sky_vis for p in parts]),
            rfi_vis=np.concatenate([p.truth.rfi_vis for p in parts]),
        )
    return Observation(
        **vars(meta),
        vis=np.concatenate([p.vis for p in parts]),
        flags=np.concatenate([p.flags for p in parts]),
        noise=noise,
        rows=slice(0, meta.n_bl),
        n_bl_total=meta.n_bl,
        truth=truth,
    )


@dataclass(frozen=True)
class TileRows:
    """The rows of ``rows`` (a ``blockwise.RowSource`` of the whole observation: ``StoreRows``
    or ``MemoryRows``) cut to ``tile``; ``meta``: the tile's (``window_meta``). Make it with
    ``TileRows.of``."""

    rows: object
    tile: Tile
    meta: ObservationMeta

    @classmethod
    def of(cls, rows, tile: Tile) -> TileRows:
        return cls(rows, tile, window_meta(rows.meta, tile))

    @property
    def noise_per_channel(self) -> bool:
        return self.rows.noise_per_channel

    @property
    def has_truth(self) -> bool:
        return self.rows.has_truth

    def read(self, rows: np.ndarray) -> blockwise.HostRows | None:
        host = self.rows.read(rows)
        if host is None:
            return None
        channels, times = _cut(self.tile)
        return blockwise.HostRows(
            host.vis[:, channels, times],
            host.flags[:, channels, times],
            _window_noise(host.noise, self.tile),
        )

    def read_truth(self, rows: np.ndarray):
        """Raw data and truth of ``rows`` within the tile (``results.TruthRows``)."""
        truth = self.rows.read_truth(rows)
        channels, times = _cut(self.tile)
        return type(truth)(
            truth.vis[:, channels, times],
            truth.sky_vis[:, channels, times],
            truth.rfi_vis[:, channels, times],
            truth.gains[:, channels, times],
        )

    def whole(self) -> Observation:
        """Every row of the tile in memory, with the tile's metadata (its emitters those of
        ``meta``); a store is read a chunk of rows at a time, so that no more than the tile
        and one chunk of the whole observation are held at once."""
        if isinstance(self.rows, blockwise.MemoryRows):
            obs = window_observation(self.rows.obs, self.tile)
            return dataclasses.replace(obs, orbits=self.meta.orbits)
        from tabascal.store import StoreReader

        reader = StoreReader(self.rows.path, allow_missing=self.rows.allow_missing)
        parts = [
            window_observation(reader.read(block), self.tile)
            for block in row_blocks(reader.info.n_bl, reader.info.chunk_rows)
        ]
        return _joined(parts, self.meta)
