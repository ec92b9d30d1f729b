"""Outputs of a fit written block by block, so that no process holds a whole cube.

A baseline-sharded fit ends with its cubes on ``P("bl")``, each device holding one block of B
rows (in the antenna-reuse order when that plan is used). ``write_results`` brings one block at
a time to process 0 (``processes.host_rows``) and writes it at its rows in the data's order;
``truth_metrics`` reduces each process's own blocks against the truth rows it reads itself and
sums the totals across processes. An unsharded fit is the case of a single block.

Besides the ``CUBES``, results.zarr may hold a ``Stacked`` array, a cube per satellite
(satellite, baseline, channel, time), written one (satellite, block) at a time by the same
machinery (``satellites.rfi_by_satellite``). Its array ``noise``, (n_bl,) or (n_bl, n_freq), is
the noise the fit used, per baseline or per baseline and channel (``noise_rows``), from which
export-ms forms weights and residual flags: with ``data.noise: estimate`` it is not the
store's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from tabascal.model import gains
from tabascal.parallel import processes
from tabascal.store.format import default_chunk_rows
from tabascal.store.writer import kill_point

#: The cubes of results.zarr, each (n_bl, n_freq, n_time) in the data's row order.
CUBES = ("sky_vis", "rfi_vis", "model_vis", "residual", "flags")


class Block(NamedTuple):
    """Sharded rows [start, stop) of device ``device``, which are data rows ``rows``."""

    device: int
    start: int
    stop: int
    rows: np.ndarray


def blocks(spec, j: int | None = None) -> list[Block]:
    """The real rows of every device of a ``row_placement.ShardedSpec``, in mesh order; with
    ``j``, those of each device's block j of rows, in the arrays of n_dev B rows that
    ``baseline_axis.predict_block`` and ``rows_block`` return."""
    n_bl, B = spec.model.n_bl, spec.device_rows if j is None else spec.block_size
    out = []
    for d in range(spec.n_dev):
        first = d * spec.device_rows + (0 if j is None else j * B)  # in the placed rows
        start, stop = min(first, n_bl), min(first + B, n_bl)
        packed = np.arange(start, stop)
        rows = packed if spec.order is None else np.asarray(spec.order)[packed]
        out.append(Block(d, d * B, d * B + stop - start, rows))
    return out


def local_block(array: jax.Array, block: Block, mesh) -> np.ndarray:
    """This process's block of a ``P("bl")`` array, real rows only, as numpy."""
    device = mesh.devices.flat[block.device]
    for shard in array.addressable_shards:
        if shard.device == device:
            return np.asarray(shard.data)[: block.stop - block.start]
    raise ValueError(f"device {block.device} is not in this process")


class Stacked(NamedTuple):
    """An array of results.zarr with an axis before the baselines, (n, n_bl, n_freq, n_time).

    name: its name; n: the leading axis's length; blocks: (k, data rows, (len(rows), n_freq,
    n_time)) in any order, together covering rows 0..n_bl-1 once for every k in 0..n-1; attrs:
    the array's attributes.
    """

    name: str
    n: int
    blocks: Iterable[tuple[int, np.ndarray, np.ndarray]]
    attrs: dict


def _create_rows(group, name: str, lead: tuple, n_bl: int, value: np.ndarray, rows: np.ndarray):
    """A cube of ``lead`` + (n_bl, ...) rows shaped and typed like ``value``, chunked by the
    rows of its first block (one index of each leading axis per chunk)."""
    shape = (*lead, n_bl, *value.shape[1:])
    chunk_rows = max(1, min(rows.size, default_chunk_rows(*value.shape[1:])))
    chunks = (*(1 for _ in lead), chunk_rows, *value.shape[1:])
    return group.create_array(name, shape=shape, dtype=value.dtype, chunks=chunks)


def _put_rows(array, at: tuple, rows: np.ndarray, value: np.ndarray) -> None:
    """``value`` (len(rows), ...) into the data rows ``rows`` of ``array`` at leading index
    ``at`` (() for a cube)."""
    if not rows.size:
        return
    if np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
        array[(*at, slice(int(rows[0]), int(rows[0]) + rows.size))] = value
    else:
        order = np.argsort(rows)
        array.oindex[(*at, rows[order])] = value[order]


def write_results(
    path: Path,
    cube_blocks: Iterable[tuple[np.ndarray, dict[str, np.ndarray]]],
    whole: dict[str, np.ndarray],
    n_bl: int,
    stacked: Stacked | None = None,
) -> None:
    """Write results.zarr atomically from blocks of rows (process 0 writes; every process
    must iterate ``cube_blocks`` and ``stacked.blocks`` when they gather across processes).

    cube_blocks: (data rows, {name: (len(rows), n_freq, n_time)}) for the ``CUBES``; together
    the rows cover 0..n_bl-1 once. whole: the small arrays written as they are (gains (n_ant,
    n_freq, n_time), a1, a2, times_s, freqs_hz, noise (n_bl,) or (n_bl, n_freq)). stacked: a
    ``Stacked`` array, or None.

    The group is built in ``.results.zarr.partial`` and renamed into place; the previous
    results, moved aside to ``.results.zarr.old`` for the swap, are removed after it. Either
    hidden name left by a killed run is cleared by the next one (the output folder's lock
    keeps two runs from sharing them).
    """
    import zarr

    writer = processes.is_writer()
    path = Path(path)
    partial_path = path.with_name("." + path.name + ".partial")
    old = path.with_name("." + path.name + ".old")
    group = None
    if writer:
        for leftover in (partial_path, old):
            if leftover.exists():
                shutil.rmtree(leftover)
        group = zarr.open_group(str(partial_path), mode="w")
    arrays = {}
    for rows, cubes in cube_blocks:
        if not writer:
            continue
        rows = np.asarray(rows)
        for name, value in cubes.items():
            if name not in arrays:
                arrays[name] = _create_rows(group, name, (), n_bl, value, rows)
            _put_rows(arrays[name], (), rows, value)
        kill_point("results-block")
    for k, rows, value in () if stacked is None else stacked.blocks:
        if not writer:
            continue
        rows = np.asarray(rows)
        if stacked.name not in arrays:
            arrays[stacked.name] = _create_rows(
                group, stacked.name, (stacked.n,), n_bl, value, rows
            )
            arrays[stacked.name].attrs.update(stacked.attrs)
        _put_rows(arrays[stacked.name], (k,), rows, value)
        kill_point("results-block")
    if not writer:
        return
    for name, value in whole.items():
        value = np.asarray(value)
        group.create_array(name, shape=value.shape, dtype=value.dtype)[...] = value
    group.attrs["format"] = "tabascal.results"
    group.attrs["format_version"] = 1
    # A directory cannot be renamed over a non-empty one: move the old results aside first,
    # so that at every moment a complete results.zarr (old or new) is in place or being swapped.
    if path.exists():
        os.replace(path, old)
        kill_point("results-replace")
    os.replace(partial_path, path)
    shutil.rmtree(old, ignore_errors=True)


def host_blocks(cube, spec, by_block: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(data rows, host rows) of one cube: a baseline-sharded fit's ``P("bl")`` cube one device
    block at a time, on every process (``by_block``; a collective per block when the blocks
    live in several processes), or an unsharded one (n_bl, n_freq, n_time) as one block."""
    if not by_block:
        host = np.asarray(cube)
        yield np.arange(host.shape[0]), host
        return
    for block in blocks(spec):
        if block.stop > block.start:
            yield block.rows, processes.host_rows(cube, block.start, block.stop)


def noise_rows(noise, spec, by_block: bool, n_bl: int) -> np.ndarray:
    """The noise the fit used (the std of the real and imaginary parts, in the data's units),
    (n_bl,) or, per baseline and channel, (n_bl, n_freq), in the data's row order in the fit's
    real dtype, on the host in every process: the placed data's ``noise`` (``P("bl")`` with
    padded rows on the baseline axis, ``by_block``; a collective per block when the blocks
    live in several processes, as for ``host_blocks``), or an unsharded one."""
    out = np.empty((n_bl, *noise.shape[1:]), np.dtype(noise.dtype))
    for rows, block in host_blocks(noise, spec, by_block):  # the blocks cover every row once
        out[rows] = block
    return out


def sharded_cubes(
    prediction, residual, flags, spec, j: int | None = None
) -> Iterator[tuple[np.ndarray, dict]]:
    """The ``CUBES`` of a sharded fit, one device block at a time, on every process (a
    collective per block and cube when the blocks live in several processes); with ``j``,
    of each device's block j of rows (``blocks``)."""
    named = {
        "sky_vis": prediction.sky,
        "rfi_vis": prediction.rfi,
        "model_vis": prediction.model,
        "residual": residual,
        "flags": flags,
    }
    for block in blocks(spec, j):
        if block.stop > block.start:
            yield (
                block.rows,
                {
                    name: processes.host_rows(x, block.start, block.stop)
                    for name, x in named.items()
                },
            )


class TruthRows(NamedTuple):
    """What the truth comparison reads for some rows: the raw data and the true sky and RFI
    visibilities (n, n_freq, n_time), and the true gains (n_ant, n_freq, n_time)."""

    vis: np.ndarray
    sky_vis: np.ndarray
    rfi_vis: np.ndarray
    gains: np.ndarray


def local_blocks(
    prediction, spec, j: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(data rows, fitted sky, fitted RFI) of each block this process holds of a
    baseline-sharded ``prediction``, real rows only, as numpy; with ``j``, of each device's
    block j of rows (``blocks``)."""
    mesh = spec.mesh
    here = jax.process_index()
    for block in blocks(spec, j):
        if mesh.devices.flat[block.device].process_index != here or block.stop == block.start:
            continue
        yield (
            block.rows,
            local_block(prediction.sky, block, mesh),
            local_block(prediction.rfi, block, mesh),
        )


def _squared_error(a, b) -> float:
    """sum |a - b|^2 in float64 whatever the arrays' precision: in single precision the sum's
    rounding (1e-8 of it at 28 baselines) would depend on how the rows are split into blocks."""
    return float(np.sum(np.abs(np.asarray(a, np.complex128) - np.asarray(b, np.complex128)) ** 2))


def truth_metrics(fitted_blocks, fitted_gains, read_truth, meta, noise_mean: float) -> dict:
    """RMSE and RMSE/noise against the truth, from each process's own blocks, with the sums
    gathered across processes (an unsharded fit is one block of every row).

    ``sky``: the fitted sky against the true sky. ``rfi``: the RFI as it appears in the data,
    g[a1] V_rfi conj(g[a2]), against the same from the truth (the product is what the data
    constrain: a gain error is indistinguishable from an RFI amplitude error). ``raw_data``:
    the data against the true sky, the error of doing nothing. ``apparent_sky``: the sky as it
    appears in the data, g[a1] V_sky conj(g[a2]), against the truth's. ``gains``:
    ``gains_error``.

    fitted_blocks: (data rows, fitted sky, fitted RFI) per block, the cubes (len(rows),
    n_freq, n_time); fitted_gains: (n_ant, n_freq, n_time); read_truth(rows) -> ``TruthRows``;
    meta: the observation's (a1, a2 in the data's order, and its sizes); noise_mean: the mean
    noise std over the baselines, in the data's units.
    """
    sums = np.zeros(4, np.float64)
    true_gains = None
    for rows, sky, rfi in fitted_blocks:
        truth = read_truth(rows)
        true_gains = truth.gains
        b1, b2 = np.asarray(meta.a1)[rows], np.asarray(meta.a2)[rows]
        fitted_rfi = np.asarray(gains.apply(rfi, fitted_gains, b1, b2))
        true_rfi = np.asarray(gains.apply(truth.rfi_vis, truth.gains, b1, b2))
        fitted_sky = np.asarray(gains.apply(sky, fitted_gains, b1, b2))
        true_sky = np.asarray(gains.apply(truth.sky_vis, truth.gains, b1, b2))
        sums += [
            _squared_error(sky, truth.sky_vis),
            _squared_error(fitted_rfi, true_rfi),
            _squared_error(truth.vis, truth.sky_vis),
            _squared_error(fitted_sky, true_sky),
        ]
    total = processes.gather_exact(sums).sum(axis=0)
    count = meta.n_bl * meta.n_freq * meta.n_time
    out = {}
    names = ("sky", "rfi", "raw_data", "apparent_sky")
    for name, value in zip(names, np.sqrt(total / count), strict=True):
        out[name] = {"rmse": float(value), "rmse_over_noise": float(value) / noise_mean}
    if true_gains is None:  # this process holds no rows
        true_gains = read_truth(np.arange(0, dtype=np.int64)).gains
    out["gains"] = gains_error(fitted_gains, true_gains)
    return out


def gains_error(fitted, true) -> dict:
    """rmse of the fitted gains, and over_spread: that over the rms of the true gains'
    departure from 1 (1 or more: the gains were not learned; None for unit true gains)."""
    rmse = float(np.sqrt(np.mean(np.abs(np.asarray(fitted) - np.asarray(true)) ** 2)))
    spread = float(np.sqrt(np.mean(np.abs(np.asarray(true) - 1) ** 2)))
    return {"rmse": rmse, "over_spread": rmse / spread if spread > 0 else None}
