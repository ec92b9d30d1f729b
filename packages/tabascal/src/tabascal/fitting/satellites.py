"""The fitted RFI satellite by satellite: each satellite's visibilities, how bright each one
appears in the data, and whether results.zarr holds their cubes.

A satellite's RFI visibilities are the route's RFI prediction with every other satellite out
of view: their in-view mask (``rfi_signal.RfiSignalConstants.mask``, (1, n_src, 1, n_time))
set to 0, which makes their signal exactly 0 on every antenna. Both operators sum one term per
satellite, ``a[p, s] conj(a[q, s])`` times that satellite's fringe, so the satellites' cubes add
up to ``rfi_vis`` to rounding; the kept phase moments (``rfi.phase_cache``) follow from the
geometry alone and serve every satellite as they are. The same holds on every route (one
device, the baseline axis with or without the reuse plan, the source axis), since each
evaluates its own ``predict`` on its own placement.

The cost is one compilation and one evaluation of the RFI term per satellite, with one
satellite's cube on each device at a time (measured on the demo preset, on one CPU: 2.1 ms a
satellite against 5.9 ms an optimisation step, which also differentiates the term); the cubes
leave block by block, as the other cubes of results.zarr do (``results.host_blocks``). The
figures of summary.json's table are reduced on the devices, so they cost no transfer, and
are formed whether or not the cubes are written.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.fitting import results
from tabascal.model import gains, joint, likelihood, rfi_signal
from tabascal.parallel import processes, row_placement

logger = logging.getLogger(__name__)

#: The array of results.zarr: (n_sat, n_bl, n_freq, n_time) complex, before the gains.
ARRAY = "rfi_vis_by_satellite"
#: What ``output.per_satellite`` accepts.
PER_SATELLITE = ("auto", "always", "never")


class Apparent(NamedTuple):
    """How bright one satellite's fitted RFI appears in the data: the peak and the rms over the
    unflagged cells of ``|g[a1] V_rfi,s conj(g[a2])| / noise[b, f]`` (noise: the std of the real
    and imaginary parts on baseline b, in channel f where it is per channel, as the fit used
    it)."""

    peak_over_noise: float
    rms_over_noise: float


def output_plan(mode: str, budget_mib: float, n_sat: int, cube_shape, cplx) -> dict:
    """Whether results.zarr gets ``rfi_vis_by_satellite``, as summary.json reports it.

    mode: one of ``PER_SATELLITE`` (``output.per_satellite``); budget_mib: the most MiB of the
    array under "auto" (``output.per_satellite_mb``); cube_shape: (n_bl, n_freq, n_time); cplx:
    the cubes' complex dtype. Returns ``written``, ``mode``, ``mib`` (the array's size),
    ``budget_mib`` and ``reason`` (why it is left out; None when written).
    """
    if mode not in PER_SATELLITE:
        raise ValueError(f"per_satellite {mode!r} is not known; choose one of {PER_SATELLITE}")
    mib = n_sat * math.prod(cube_shape) * np.dtype(cplx).itemsize / 2**20
    reason = None
    if n_sat == 0:
        reason = "the observation has no satellites"
    elif mode == "never":
        reason = "output.per_satellite is never"
    elif mode == "auto" and mib > budget_mib:
        reason = (
            f"{n_sat} satellites' cubes would take {mib:.4g} MiB, more than "
            f"output.per_satellite_mb = {budget_mib:g}; set output.per_satellite: always, or "
            "raise output.per_satellite_mb"
        )
    if reason is None:
        logger.info("writing %s: %d satellites, %.4g MiB", ARRAY, n_sat, mib)
    elif n_sat and mode == "auto":
        logger.warning("%s left out of results.zarr: %s", ARRAY, reason)
    else:
        logger.info("%s left out of results.zarr: %s", ARRAY, reason)
    return {
        "written": reason is None,
        "mode": mode,
        "mib": mib,
        "budget_mib": budget_mib,
        "reason": reason,
    }


def _alone(constants, s):
    """``constants`` with every satellite but ``s`` out of view (traced ``s``: one compiled
    program serves every satellite)."""
    signal = constants.rfi_signal
    keep = (jnp.arange(signal.mask.shape[1]) == s).astype(signal.mask.dtype)
    mask = signal.mask * keep[None, :, None, None]
    return constants._replace(rfi_signal=signal._replace(mask=mask))


def _one_satellite(params, constants, data, s, *, predict, spec):
    """Satellite ``s``'s RFI visibilities in the route's layout, and its ``Apparent`` peak and
    rms (scalars; padded rows are flagged, so they count for nothing).

    The route's whole ``predict`` is called so that its RFI term reads every parameter it
    reads in the fit; the sky it also forms is not returned, so the compiler drops it."""
    prediction = predict(params, _alone(constants, s), spec)
    vis, g = prediction.rfi, prediction.gains
    seen = jnp.abs(gains.apply(vis, g, constants.a1, constants.a2))
    seen = seen / likelihood.noise_cells(data.noise)
    seen = jnp.where(data.flags, 0.0, seen)
    n_points = jnp.maximum(data.n_points, 1).astype(seen.dtype)
    return vis, jnp.max(seen), jnp.sqrt(jnp.sum(seen**2) / n_points)


def satellite_rfi(route, placed, params, n_sat: int) -> Iterator[tuple[int, jax.Array, Apparent]]:
    """(s, RFI visibilities of satellite s alone, its ``Apparent``) for each satellite in turn,
    the visibilities as ``route.predict`` lays them out (on ``P("bl")`` on the baseline
    axis). Every process must iterate it (the figures are global reductions)."""
    evaluate = jax.jit(partial(_one_satellite, predict=route.predict, spec=placed.spec))
    for s in range(n_sat):
        vis, peak, rms = evaluate(params, placed.constants, placed.data, s)
        yield s, vis, Apparent(float(peak), float(rms))


def apparent_figures(route, placed, params, n_sat: int) -> list[Apparent]:
    """Each satellite's ``Apparent``, its cube left on the devices."""
    return [figure for _, _, figure in satellite_rfi(route, placed, params, n_sat)]


def rfi_by_satellite(route, placed, params, labels: list[str], figures: list) -> results.Stacked:
    """``rfi_vis_by_satellite`` for ``results.write_results``: each satellite's cube in turn,
    block by block in the data's rows, its ``Apparent`` appended to ``figures`` as it goes."""

    def blocks():
        for s, vis, figure in satellite_rfi(route, placed, params, len(labels)):
            figures.append(figure)
            for rows, block in results.host_blocks(vis, placed.spec, route.by_block):
                yield s, rows, block

    return results.Stacked(ARRAY, len(labels), blocks(), {"satellites": list(labels)})


class BySatellite(NamedTuple):
    """The fitted RFI satellite by satellite in a run's outputs: ``report``
    (``output_plan``), the ``results.Stacked`` cubes to write (None when left out), the
    satellites' labels, and the list the cubes' blocks fill with each satellite's
    ``Apparent`` as they are written."""

    report: dict
    stacked: results.Stacked | None
    labels: list[str]
    figures: list

    def table(self, route, placed, params, extra: list[dict] | None = None) -> list[dict]:
        """summary.json's ``satellites`` (``satellite_table``), once the cubes are written;
        when they are left out, the figures are evaluated here (on every process)."""
        figures = self.figures
        if self.stacked is None:
            figures = apparent_figures(route, placed, params, len(self.labels))
        in_view = placed.info["rfi_in_view_fraction"]
        return satellite_table(self.labels, figures, in_view, extra)


def plan(route, placed, params, meta, output) -> BySatellite:
    """What a run writes of its RFI satellite by satellite, from the run plan's ``output``
    (``per_satellite``, ``per_satellite_mb``) and the observation's ``meta``."""
    cube = (meta.n_bl, meta.n_freq, meta.n_time)
    cplx = np.result_type(np.dtype(placed.constants.phase.dtype), np.complex64)
    report = output_plan(output.per_satellite, output.per_satellite_mb, meta.n_sat, cube, cplx)
    labels = [meta.orbits.label(s) for s in range(meta.n_sat)]
    figures, stacked = [], None
    if report["written"]:
        stacked = rfi_by_satellite(route, placed, params, labels, figures)
    return BySatellite(report, stacked, labels, figures)


def signal_rms(placed, params, n_sat: int) -> np.ndarray:
    """(n_sat, n_time) rms over antennas and channels of each satellite's fitted |amp|
    (``rfi_signal.forward``, Jy^0.5), on the host in every process."""

    def rms(rfi_params, orbit_params, constants):
        # the shared signal's factor as the fitted orbit corrections move it
        amp = rfi_signal.forward(rfi_params, joint.corrected_signal(constants, orbit_params))
        return jnp.sqrt(jnp.mean(jnp.abs(amp) ** 2, axis=(0, 2)))

    def rms_by_device(rfi_params, constants, weights):
        # the factor of each device's compact antennas, (n_dev, n_ant_total, ...): each
        # antenna weighed by one over the devices that hold it, ghosts by 0
        factor = constants.rfi_signal.factor
        flat = factor.reshape(-1, *factor.shape[2:])
        amp = rfi_signal.forward(rfi_params, constants.rfi_signal._replace(factor=flat))
        power = jnp.mean(jnp.abs(amp) ** 2, axis=2)
        return jnp.sqrt(jnp.tensordot(weights.reshape(-1), power, 1) / placed.spec.model.n_ant)

    signal = placed.constants.rfi_signal
    if row_placement.factor_per_device(signal):
        weights = row_placement.antenna_weights(placed.spec).astype(signal.factor.dtype)
        out = jax.jit(rms_by_device)(params.rfi, placed.constants, weights)
    else:
        out = jax.jit(rms)(params.rfi, params.orbits, placed.constants)
    # The source axis pads the satellites with dark ones; they come last.
    return np.asarray(processes.host_rows(out, 0, n_sat), np.float64)


def satellite_table(
    labels: list[str],
    figures: list[Apparent],
    in_view_fraction: list[float],
    extra: list[dict] | None = None,
) -> list[dict]:
    """summary.json's ``satellites``: one entry per satellite, in the store's order.

    Each entry: ``index`` (the satellite's index in the store, as ``rfi_vis_by_satellite`` and
    export-ms's ``TAB_RFI_SAT<index>`` count them), ``name``, ``peak_over_noise`` and
    ``rms_over_noise`` (``Apparent``) and ``in_view_fraction`` (of the observation's time it is
    above ``satellites.min_elevation_deg``, the model's ``rfi_in_view_fraction``, which counts
    the part of an integration it rises or sets in). extra: None, or one
    mapping per satellite merged into its entry (a key the entry already has is refused).
    """
    n_sat = len(labels)
    given = {"figures": len(figures), "in_view_fraction": len(in_view_fraction)}
    if extra is not None:
        given["extra"] = len(extra)
    wrong = {name: n for name, n in given.items() if n != n_sat}
    if wrong:
        raise ValueError(
            f"satellite_table: {n_sat} satellites but {wrong} entries; give one per satellite"
        )
    table = []
    for s in range(n_sat):
        entry = {
            "index": s,
            "name": labels[s],
            "peak_over_noise": figures[s].peak_over_noise,
            "rms_over_noise": figures[s].rms_over_noise,
            "in_view_fraction": float(in_view_fraction[s]),
        }
        more = {} if extra is None else dict(extra[s])
        clash = sorted(set(more) & set(entry))
        if clash:
            raise ValueError(
                f"satellite_table: extra for satellite {s} repeats {clash}, which the table "
                "already holds; give those fields another name"
            )
        table.append({**entry, **more})
    return table
