"""``tabascal run`` over a grid of (time x frequency) tiles (config section ``tiles``).

Each tile (``tiles.plan_tiles``) is fitted as an observation of its own
(``tile_rows.TileRows``) by the untiled run (``fit_tile``), into ``tiles/<name>/`` of the
output folder, which is then a run's output folder like any other (results.zarr, summary.json,
config.yaml, checkpoints, plots): in turn in this process, or a tile a task by Dask workers
(``tiles.workers``, ``tiles.scheduler``: ``tile_workers``). The tiles are then stitched into
the output folder's own results.zarr, each (baseline, channel, time) cell from the tile whose
core holds it (``tile_stitch``, which says what the stitched results.zarr holds), and its
summary.json.

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
import yaml

from tabascal.config import ConfigError, dump_yaml, load_yaml
from tabascal.fitting import results, tile_stitch
from tabascal.fitting.checkpoint import CHECKPOINT_NAME
from tabascal.fitting.output_folder import (
    CHECKPOINTS,
    RESULTS,
    SUMMARY,
    TILES,
    OutputExistsError,
    prepare_output,
    write_atomically,
)
from tabascal.fitting.run_plan import RunPlan, Tiling
from tabascal.fitting.tile_rows import TileRows
from tabascal.fitting.tiles import Tile, overlap_integrations
from tabascal.parallel import processes

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
    out_dir, plan, resume=, overwrite=, progress=)``), or over the Dask workers that
    ``plan.tiles`` names (which fit with ``job.run``), each into ``out_dir/tiles/<name>``;
    stitch them into ``out_dir``'s results.zarr and summary.json; return the summary."""
    began = time.perf_counter()
    if processes.process_count() > 1:
        raise ConfigError(
            f"tiles: a tiled run fits in one process, not {processes.process_count()}; set "
            "tiles.time and tiles.freq to 1 for a run over several processes"
        )
    out_dir = Path(out_dir)
    with prepare_output(out_dir, resume=resume, overwrite=overwrite, tiled=True):
        tile_plan = dataclasses.replace(plan, tiles=ONE_TILE)
        if resume:
            _check_resumable(out_dir / TILES, grid, tile_plan)
        # summary.json says the outputs beside it are its run's: it goes until they are written.
        (out_dir / SUMMARY).unlink(missing_ok=True)
        write_atomically(out_dir / "config.yaml", dump_yaml(plan.as_config()))
        if plan.tiles.over_workers:
            # imported here: it imports this module, whose fit_tile its workers run
            from tabascal.fitting import tile_workers

            entries = tile_workers.fit_tiles(
                source, out_dir / TILES, tile_plan, grid, plan.tiles, resume=resume
            )
        else:
            entries = [
                _fit_or_keep(
                    fit_one, source, out_dir / TILES, tile_plan, tile, len(grid), resume, progress
                )
                for tile in grid
            ]
        fitted_s = time.perf_counter() - began
        stitched = tile_stitch.stitch(out_dir, grid, source.meta, plan.output)
        truth = _truth(source, out_dir, stitched, plan)
        summary = _summary(entries, stitched, truth, plan, source.meta.int_time)
        summary["timings"] = {
            "tiles_s": fitted_s,
            "stitching_s": time.perf_counter() - began - fitted_s,
            "total_s": time.perf_counter() - began,
        }
        write_atomically(out_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return summary


def _flat(config: dict, path: str = "") -> dict:
    """A configuration as {dotted key: value}, without ``fit.init`` (which each tile's run
    settles from its own size)."""
    out = {}
    for name, value in config.items():
        key = f"{path}.{name}" if path else name
        if isinstance(value, dict):
            out.update(_flat(value, key))
        elif key != "fit.init":
            out[key] = value
    return out


def _check_resumable(tiles_dir: Path, grid: list[Tile], plan: RunPlan) -> None:
    """Refuse, before any tile is fitted, to resume into ``tiles_dir`` the tiles of another
    grid, or tiles begun with another configuration than ``plan`` (a tile's)."""
    names = {tile.name for tile in grid}
    foreign = sorted(p.name for p in tiles_dir.iterdir() if p.name not in names)
    if foreign:
        raise OutputExistsError(
            f"--resume: {tiles_dir} holds {', '.join(foreign)}, which are not tiles of this "
            f"grid of {len(grid)} ({grid[0].name} to {grid[-1].name}); resume with the tiles "
            "settings it was run with, or pass --overwrite to start again"
        )
    wanted = _flat(yaml.safe_load(dump_yaml(plan.as_config())))
    for tile in grid:
        path = tiles_dir / tile.name / "config.yaml"
        if not path.is_file():
            continue
        begun = _flat(load_yaml(path))
        changed = sorted(k for k in begun.keys() | wanted.keys() if begun.get(k) != wanted.get(k))
        if changed:
            raise ConfigError(
                f"--resume: tile {tile.name} was begun with another configuration "
                f"({', '.join(changed)} differ from its config.yaml); resume with the "
                "configuration it was begun with, or pass --overwrite to fit every tile again"
            )


def finished_tile(tiles_dir: Path, tile: Tile, n_tiles: int) -> dict | None:
    """The summary of ``tile`` where its folder under ``tiles_dir`` holds a finished fit (its
    summary.json, written last), else None."""
    path = tiles_dir / tile.name / SUMMARY
    if not path.is_file():
        return None
    logger.info("tile %d of %d (%s): finished earlier", tile.index + 1, n_tiles, tile.name)
    return json.loads(path.read_text())


def fit_tile(
    fit_one, source, tiles_dir: Path, plan: RunPlan, tile: Tile, n_tiles: int, progress=False
) -> dict:
    """Fit ``tile`` of ``source`` with ``fit_one`` and ``plan`` (a tile's) into
    ``tiles_dir/<name>``; return its summary. A folder that holds the tile's checkpoint (a fit
    of it that was interrupted: a resumed run, or a worker that died) is resumed from it; one
    begun before its first checkpoint is cleared and fitted afresh. The sequential loop and
    the Dask workers (``tile_workers``) both fit a tile here."""
    folder = tiles_dir / tile.name
    logger.info("tile %d of %d (%s): fitting", tile.index + 1, n_tiles, tile.name)
    own_checkpoint = (folder / CHECKPOINTS / CHECKPOINT_NAME).is_file()
    summary = fit_one(
        TileRows.of(source, tile),
        folder,
        plan,
        resume=own_checkpoint,
        overwrite=not own_checkpoint and folder.exists(),
        progress=progress,
    )
    return json.loads(json.dumps(dict(summary)))


def _fit_or_keep(fit_one, source, tiles_dir: Path, plan, tile: Tile, n_tiles, resume, progress):
    """(tile, its summary, whether it was fitted now): with ``resume``, read back where its
    summary.json says it is finished; else fitted (``fit_tile``) in this process."""
    summary = finished_tile(tiles_dir, tile, n_tiles) if resume else None
    if summary is not None:
        return tile, summary, False
    return tile, fit_tile(fit_one, source, tiles_dir, plan, tile, n_tiles, progress), True


def _truth(source, out_dir: Path, stitched, plan: RunPlan) -> dict | None:
    """The stitched results against the observation's truth (``results.truth_metrics``, as an
    untiled run forms them); None without a truth."""
    if not source.has_truth:
        return None
    # In double precision the gains are applied in float64, as the tiles' own figures are.
    with jax.enable_x64(plan.model.precision == "double" or jax.config.jax_enable_x64):
        return results.truth_metrics(
            tile_stitch.fitted_blocks(out_dir / RESULTS),
            stitched.gains,
            source.read_truth,
            source.meta,
            stitched.noise_mean,
        )


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


def _summary(entries, stitched, truth, plan: RunPlan, int_time: float) -> dict:
    """The whole observation's summary.json from the tiles' (``entries``: (tile, its summary,
    fitted now)) and the stitching's figures (``tile_stitch.Stitched``); see the module's
    docstring."""
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
