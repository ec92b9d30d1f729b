"""``tabascal run`` over a grid of (time x frequency) tiles (config section ``tiles``).

Each tile (``tiles.plan_tiles``) is fitted in turn as an observation of its own
(``tile_rows.TileRows``) by the untiled run, into ``tiles/<name>/`` of the output folder, which
is then a run's output folder like any other (results.zarr, summary.json, config.yaml,
checkpoints, plots). The tiles are then stitched into the output folder's own results.zarr, each
(baseline, channel, time) cell from the tile whose core holds it, and its summary.json.

What the whole results.zarr holds: every cube (``results.CUBES``, and ``rfi_vis_by_satellite``
where every tile wrote it and the whole is within ``output.per_satellite``'s budget) and the
gains (antenna, channel, time) stitched cell by cell; a1, a2, times_s and freqs_hz of the whole
observation; and ``noise``, the noise each cell's tile fitted with, as (n_bl,) where that is
one value per baseline throughout, else (n_bl, n_freq): per channel it is the noise of the tile
owning the channel; where time tiles fitted with different noises (``data.noise: estimate``) it
is their inverse-variance mean over the integrations they own, the one noise per cell that
export-ms's weights can take. Figures with neither a time nor a channel axis (the fitted orbit
corrections, the model's groups, each tile's estimated noise) stay in the tiles' own folders.

summary.json's whole-observation figures: ``chi2_final`` recomputed over the stitched residual
(each cell over its tile's noise), ``truth`` recomputed from the stitched cubes and gains
against the store's truth (as an untiled run computes it), ``chi2_init`` the tiles' initial
figures weighted by their unflagged cells (over their fitted ranges: the overlaps are counted
in every tile that fits them); ``steps``, ``seconds_fit`` and ``fit.passes`` summed over the
tiles, ``per_device_peak_bytes`` their largest per device. ``tiles`` holds each tile's ranges
and figures, and ``tile_grid`` the grid.

``--resume`` takes every tile whose summary.json exists as finished (it is written last) and
leaves it as it is, resumes a tile that left a checkpoint from it, and fits the others afresh.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from tabascal.config import ConfigError, dump_yaml
from tabascal.fitting import results, satellites
from tabascal.fitting.checkpoint import CHECKPOINT_NAME
from tabascal.fitting.output_folder import (
    CHECKPOINTS,
    RESULTS,
    SUMMARY,
    TILES,
    prepare_output,
    write_atomically,
)
from tabascal.fitting.run_plan import RunPlan, Tiling
from tabascal.fitting.tile_rows import TileRows
from tabascal.fitting.tiles import Tile, overlap_integrations
from tabascal.parallel import processes
from tabascal.store.format import default_chunk_rows, row_blocks

logger = logging.getLogger(__name__)

#: The tiling of each tile's own fit: one tile, itself.
ONE_TILE = Tiling(time=1, freq=1, overlap_s=0.0, overlap_channels=0)


def run_tiles(
    fit_one: Callable,
    source,
    out_dir: Path,
    plan: RunPlan,
    grid: list[Tile],
    *,
    resume: bool,
    overwrite: bool,
    progress: bool,
) -> dict:
    """Fit the tiles ``grid`` of ``source`` (a ``blockwise.RowSource`` of the whole
    observation) one after another with ``fit_one`` (the untiled ``job.run``: ``fit_one(rows,
    out_dir, plan, resume=, overwrite=, progress=)``), each into ``out_dir/tiles/<name>``;
    stitch them into ``out_dir``'s results.zarr and summary.json; return the summary."""
    began = time.perf_counter()
    if processes.process_count() > 1:
        raise ConfigError(
            f"tiles: a tiled run fits in one process, not {processes.process_count()}; set "
            "tiles.time and tiles.freq to 1 for a run over several processes"
        )
    out_dir = Path(out_dir)
    with prepare_output(out_dir, resume=resume, overwrite=overwrite, tiled=True):
        write_atomically(out_dir / "config.yaml", dump_yaml(plan.as_config()))
        tile_plan = dataclasses.replace(plan, tiles=ONE_TILE)
        entries = []
        for tile in grid:
            folder = out_dir / TILES / tile.name
            finished = resume and (folder / SUMMARY).is_file()
            if finished:
                logger.info(
                    "tile %d of %d (%s): finished earlier", tile.index + 1, len(grid), tile.name
                )
                summary = json.loads((folder / SUMMARY).read_text())
            else:
                logger.info("tile %d of %d (%s): fitting", tile.index + 1, len(grid), tile.name)
                own_checkpoint = (folder / CHECKPOINTS / CHECKPOINT_NAME).is_file()
                summary = fit_one(
                    TileRows.of(source, tile),
                    folder,
                    tile_plan,
                    resume=resume and own_checkpoint,
                    # what a tile interrupted before its first checkpoint left
                    overwrite=resume and not own_checkpoint and folder.exists(),
                    progress=progress,
                )
                summary = json.loads(json.dumps(dict(summary)))
            entries.append((tile, summary, not finished))
        fitted_s = time.perf_counter() - began
        (out_dir / SUMMARY).unlink(missing_ok=True)
        stitched = stitch(out_dir, grid, source.meta, plan.output)
        truth = None
        # In double precision the gains are applied in float64, as the tiles' own figures are.
        double = plan.model.precision == "double" or jax.config.jax_enable_x64
        if source.has_truth:
            with jax.enable_x64(double):
                truth = results.truth_metrics(
                    _fitted_blocks(out_dir / RESULTS),
                    stitched.gains,
                    source.read_truth,
                    source.meta,
                    stitched.noise_mean,
                )
        summary = _summary(entries, stitched, truth, plan, source.meta.int_time)
        stitching_s = time.perf_counter() - began - fitted_s
        summary["timings"] = {
            "tiles_s": fitted_s,
            "stitching_s": stitching_s,
            "total_s": time.perf_counter() - began,
        }
        write_atomically(out_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return summary


@dataclasses.dataclass(frozen=True)
class Stitched:
    """What stitching found: the whole gains (n_ant, n_freq, n_time); the reduced chi-squared
    of the stitched residual over each cell's tile noise, and the unflagged cells it is over;
    the mean of the whole ``noise`` array; each tile's unflagged cells over its fitted ranges;
    the ``rfi_vis_by_satellite`` report (``satellites.output_plan``'s)."""

    gains: np.ndarray
    chi2: float
    n_points: int
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
                cube = None
                for i, (tile, store) in enumerate(zip(grid, stores, strict=True)):
                    if cube is None:
                        cube = np.empty((n, n_freq, n_time), store[name].dtype)
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

    gains = None
    for tile, store in zip(grid, stores, strict=True):
        if gains is None:
            gains = np.empty((meta.n_ant, n_freq, n_time), store["gains"].dtype)
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
        report = {**report, "written": False, "reason": f"tiles {', '.join(lacking)} lack it"}
    stacked = _stacked(grid, stores, n_bl, n_freq, n_time) if report["written"] else None
    results.write_results(out_dir / RESULTS, cube_blocks(), whole, n_bl, stacked)
    return Stitched(
        gains=gains,
        chi2=sums["chi2"] / (2 * max(sums["points"], 1)),
        n_points=sums["points"],
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


def _fitted_blocks(path: Path):
    """(rows, sky, RFI) of the stitched results, a chunk of rows at a time."""
    import zarr

    group = zarr.open_group(str(path), mode="r")
    n_bl, n_freq, n_time = group["sky_vis"].shape
    for rows in row_blocks(n_bl, default_chunk_rows(n_freq, n_time)):
        yield np.arange(rows.start, rows.stop), group["sky_vis"][rows], group["rfi_vis"][rows]


def _weighted(values, weights) -> float | None:
    """The mean of ``values`` weighted by ``weights``; None where there are no weights."""
    total = float(np.sum(weights))
    return float(np.dot(values, weights) / total) if total > 0 else None


def _satellite_table(tables: list[list[dict]], cells: list[int], integrations: list[int]):
    """Each satellite's entry over the tiles: ``peak_over_noise`` the largest of the tiles',
    ``rms_over_noise`` the root of their mean squares weighted by their unflagged ``cells``,
    ``in_view_fraction`` their mean weighted by their ``integrations`` (both over the tiles'
    fitted ranges)."""
    if not tables or not tables[0]:
        return []
    out = []
    for s, first in enumerate(tables[0]):
        entries = [table[s] for table in tables]
        mean_square = _weighted([e["rms_over_noise"] ** 2 for e in entries], cells)
        out.append(
            {
                "index": first["index"],
                "name": first["name"],
                "peak_over_noise": max(e["peak_over_noise"] for e in entries),
                "rms_over_noise": None if mean_square is None else mean_square**0.5,
                "in_view_fraction": _weighted(
                    [e["in_view_fraction"] for e in entries], integrations
                ),
            }
        )
    return out


def _fit_figures(summaries: list[dict]) -> dict:
    """summary.json's ``fit`` over the tiles: steps and passes summed (passes None where a
    tile did not count them), and how many tiles stopped for each reason."""
    fits = [s.get("fit") or {} for s in summaries]
    passes = [f.get("passes") for f in fits]
    stopped = Counter(f.get("stopped") for f in fits)
    return {
        "steps": sum(int(f.get("steps", 0)) for f in fits),
        "passes": None if None in passes else float(sum(passes)),
        "stopped": ", ".join(f"{why} x{n}" for why, n in stopped.items()),
        "seconds": sum(float(f.get("seconds", 0.0)) for f in fits),
    }


def _tile_entry(tile: Tile, summary: dict, fitted_now: bool) -> dict:
    """A tile's entry in the whole summary's ``tiles``: its ranges and its own figures."""
    own = ("chi2_init", "chi2_final", "steps", "seconds_fit", "fit", "per_device_peak_bytes")
    entry = {**tile.as_dict(), "fitted": "now" if fitted_now else "earlier"}
    entry.update({key: summary.get(key) for key in own})
    for key in ("truth", "orbits"):
        if summary.get(key):
            entry[key] = summary[key]
    entry["seconds_total"] = (summary.get("timings") or {}).get("total_s")
    return entry


def _summary(entries, stitched: Stitched, truth, plan: RunPlan, int_time: float) -> dict:
    """The whole observation's summary.json from the tiles' (``entries``: (tile, its summary,
    fitted now)) and the stitching's figures; see the module's docstring."""
    grid = [tile for tile, _, _ in entries]
    summaries = [summary for _, summary, _ in entries]
    first = summaries[0]
    peaks = np.max([s["per_device_peak_bytes"] for s in summaries], axis=0)
    # The step memory and collectives reported are those of the tile whose step needs most.
    largest = max(summaries, key=lambda s: sum(s["step_memory"].values()))
    now = [s.get("compile") or {} for _, s, fitted in entries if fitted]
    integrations = [tile.time[1] - tile.time[0] for tile in grid]
    fit = _fit_figures(summaries)
    out = {
        "chi2_init": _weighted([s["chi2_init"] for s in summaries], stitched.tile_points),
        "chi2_final": stitched.chi2,
        "steps": fit["steps"],
        "seconds_fit": sum(float(s["seconds_fit"]) for s in summaries),
        "fit": fit,
        "n_devices": first["n_devices"],
        "n_processes": first["n_processes"],
        "shard_axis": first["shard_axis"],
        "reuse_plan": first["reuse_plan"],
        "read_by_block": first["read_by_block"],
        "per_device_peak_bytes": [int(b) for b in peaks],
        "step_memory": largest["step_memory"],
        "collectives": largest["collectives"],
        "tile_grid": {
            "time": len({tile.core_time for tile in grid}),
            "freq": len({tile.core_freq for tile in grid}),
            "n_tiles": len(grid),
            "overlap_s": plan.tiles.overlap_s,
            "overlap_integrations": overlap_integrations(plan.tiles.overlap_s, int_time),
            "overlap_channels": plan.tiles.overlap_channels,
        },
        "tiles": [_tile_entry(*entry) for entry in entries],
    }
    if truth is not None:
        out["truth"] = truth
    out["satellites"] = _satellite_table(
        [s.get("satellites") or [] for s in summaries], stitched.tile_points, integrations
    )
    out["rfi_vis_by_satellite"] = stitched.by_satellite
    out["data"] = {"noise": plan.data.noise, "noise_per_channel": plan.data.noise_per_channel}
    out["compile"] = {
        "compiled": sum(c.get("compiled", 0) for c in now),
        "cache_hits": sum(c.get("cache_hits", 0) for c in now),
        "seconds": sum(c.get("seconds", 0.0) for c in now),
        "cache": now[0].get("cache") if now else None,
    }
    return out
