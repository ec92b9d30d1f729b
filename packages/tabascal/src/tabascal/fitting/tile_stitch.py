"""The tiles of a tiled run stitched into one results.zarr (``stitch``), from the finished
tiles' own, each in ``tiles/<name>/`` of the output folder.

What the whole results.zarr holds: every cube (``results.CUBES``, and ``rfi_vis_by_satellite``
where every tile wrote it and the whole is within ``output.per_satellite``'s budget) and the
gains (antenna, channel, time) stitched cell by cell; a1, a2, times_s and freqs_hz of the whole
observation; and ``noise``, the noise each cell's tile fitted with, as (n_bl,) where that is
one value per baseline throughout, else (n_bl, n_freq): per channel it is the noise of the tile
owning the channel; where time tiles fitted with different noises (``data.noise: estimate``) it
is their inverse-variance mean over the integrations they own, the one noise per cell that
export-ms's weights can take. Figures with neither a time nor a channel axis (the fitted orbit
corrections, the model's groups, each tile's estimated noise) stay in the tiles' own folders.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tabascal.fitting import results, satellites
from tabascal.fitting.output_folder import RESULTS, TILES
from tabascal.fitting.tiles import Tile
from tabascal.store.format import default_chunk_rows, row_blocks


@dataclasses.dataclass(frozen=True)
class Stitched:
    """What stitching found: the whole gains (n_ant, n_freq, n_time); the reduced chi-squared
    of the stitched residual over each cell's tile noise; the mean of the whole ``noise``
    array; each tile's unflagged cells over its fitted ranges; the ``rfi_vis_by_satellite``
    report (``satellites.output_plan``'s)."""

    gains: np.ndarray
    chi2: float
    noise_mean: float
    tile_points: list[int]
    by_satellite: dict


def _open(folder: Path):
    import zarr

    return zarr.open_group(str(folder / RESULTS), mode="r")


def _whole_noise(grid: list[Tile], stores: list, n_bl: int, n_freq: int) -> np.ndarray:
    """The whole results' ``noise`` (see the module's docstring): (n_bl,) where every tile's
    is per baseline and the channel tiles agree, else (n_bl, n_freq)."""
    bands: dict[tuple[int, int], np.ndarray] = {}
    for tile, store in zip(grid, stores, strict=True):
        noise = np.asarray(store["noise"][...], np.float64)
        channels = tile.core_within()[0]
        band = bands.setdefault(tile.core_time, np.empty((n_bl, n_freq)))
        band[:, slice(*tile.core_freq)] = noise[:, None] if noise.ndim == 1 else noise[:, channels]
    owned = [b - a for a, b in bands]
    band_noise = list(bands.values())
    if all(np.array_equal(b, band_noise[0]) for b in band_noise):
        whole = band_noise[0]
    else:
        weight = np.asarray(owned, np.float64)[:, None, None]
        inverse = np.sum(weight / np.stack(band_noise) ** 2, axis=0) / weight.sum()
        whole = 1 / np.sqrt(inverse)
    per_baseline = all(store["noise"].ndim == 1 for store in stores)
    if per_baseline and np.all(whole == whole[:, :1]):
        return np.ascontiguousarray(whole[:, 0])
    return whole


def _cell_noise(grid: list[Tile], noises: list[np.ndarray], rows: slice, shape) -> np.ndarray:
    """Each cell's tile noise for baseline ``rows``, (n, n_freq, n_time)."""
    out = np.empty(shape, np.float64)
    for tile, noise in zip(grid, noises, strict=True):
        channels = tile.core_within()[0]
        own = noise[rows, None] if noise.ndim == 1 else noise[rows, channels]
        out[:, slice(*tile.core_freq), slice(*tile.core_time)] = own[..., None]
    return out


def _core_block(array, tile: Tile, rows: slice, lead: tuple = ()) -> np.ndarray:
    """The core of ``tile`` of a tile's results array (lead + (n_bl, channels, times))."""
    channels, times = tile.core_within()
    return array[(*lead, rows, channels, times)]


def stitch(out_dir: Path, grid: list[Tile], meta, output) -> Stitched:
    """Write ``out_dir``'s results.zarr from the finished tiles' (each in
    ``out_dir/tiles/<name>``), every cell from the tile whose core holds it, atomically
    (``results.write_results``); ``output``: the run's ``OutputSettings``."""
    stores = [_open(out_dir / TILES / tile.name) for tile in grid]
    n_bl, n_freq, n_time = meta.n_bl, meta.n_freq, meta.n_time
    noises = [np.asarray(store["noise"][...], np.float64) for store in stores]
    sums = {"chi2": 0.0, "points": 0, "tile_points": [0] * len(grid)}
    step = default_chunk_rows(n_freq, n_time)

    def cube_blocks():
        for rows in row_blocks(n_bl, step):
            n = rows.stop - rows.start
            cubes = {}
            for name in results.CUBES:
                cube = np.empty((n, n_freq, n_time), stores[0][name].dtype)
                for i, (tile, store) in enumerate(zip(grid, stores, strict=True)):
                    if name == "flags":
                        flags = store["flags"][rows]
                        sums["tile_points"][i] += int(np.count_nonzero(~flags))
                        part = flags[:, *tile.core_within()]
                    else:
                        part = _core_block(store[name], tile, rows)
                    cube[:, slice(*tile.core_freq), slice(*tile.core_time)] = part
                cubes[name] = cube
            noise = _cell_noise(grid, noises, rows, (n, n_freq, n_time))
            kept = ~cubes["flags"]
            sums["chi2"] += float(np.sum(np.abs(cubes["residual"][kept]) ** 2 / noise[kept] ** 2))
            sums["points"] += int(np.count_nonzero(kept))
            yield np.arange(rows.start, rows.stop), cubes

    gains = np.empty((meta.n_ant, n_freq, n_time), stores[0]["gains"].dtype)
    for tile, store in zip(grid, stores, strict=True):
        gains[:, slice(*tile.core_freq), slice(*tile.core_time)] = store["gains"][
            :, *tile.core_within()
        ]
    whole_noise = _whole_noise(grid, stores, n_bl, n_freq)
    whole = {
        "gains": gains,
        "a1": np.asarray(meta.a1, np.int32),
        "a2": np.asarray(meta.a2, np.int32),
        "times_s": np.asarray(meta.times_s),
        "freqs_hz": np.asarray(meta.freqs_hz),
        "noise": whole_noise.astype(stores[0]["noise"].dtype),
    }
    report = satellites.output_plan(
        output.per_satellite,
        output.per_satellite_mb,
        meta.n_sat,
        (n_bl, n_freq, n_time),
        stores[0]["sky_vis"].dtype,
    )
    lacking = [t.name for t, s in zip(grid, stores, strict=True) if satellites.ARRAY not in s]
    if report["written"] and lacking:
        reason = f"tiles {', '.join(lacking)} were fitted without it; fit them again (--overwrite)"
        report = {**report, "written": False, "reason": reason}
    stacked = _stacked(grid, stores, n_bl, n_freq, n_time) if report["written"] else None
    results.write_results(out_dir / RESULTS, cube_blocks(), whole, n_bl, stacked)
    return Stitched(
        gains=gains,
        chi2=sums["chi2"] / (2 * max(sums["points"], 1)),
        noise_mean=float(np.mean(whole_noise)),
        tile_points=sums["tile_points"],
        by_satellite=report,
    )


def _stacked(grid, stores, n_bl: int, n_freq: int, n_time: int) -> results.Stacked:
    """The tiles' ``rfi_vis_by_satellite`` stitched, one (satellite, block of rows) at a
    time."""
    first = stores[0][satellites.ARRAY]
    n_sat = first.shape[0]

    def blocks():
        for k in range(n_sat):
            for rows in row_blocks(n_bl, default_chunk_rows(n_freq, n_time)):
                cube = np.empty((rows.stop - rows.start, n_freq, n_time), first.dtype)
                for tile, store in zip(grid, stores, strict=True):
                    part = _core_block(store[satellites.ARRAY], tile, rows, (k,))
                    cube[:, slice(*tile.core_freq), slice(*tile.core_time)] = part
                yield k, np.arange(rows.start, rows.stop), cube

    return results.Stacked(satellites.ARRAY, n_sat, blocks(), dict(first.attrs))


def fitted_blocks(path: Path):
    """(rows, sky, RFI) of the stitched results, a chunk of rows at a time."""
    import zarr

    group = zarr.open_group(str(path), mode="r")
    n_bl, n_freq, n_time = group["sky_vis"].shape
    for rows in row_blocks(n_bl, default_chunk_rows(n_freq, n_time)):
        yield np.arange(rows.start, rows.stop), group["sky_vis"][rows], group["rfi_vis"][rows]
