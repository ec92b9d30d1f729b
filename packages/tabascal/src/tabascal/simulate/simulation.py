"""The simulation driver: scene -> cell-averaged sky and RFI -> gains, noise, flags -> store.

Two passes keep memory bounded. Pass 1 walks blocks of integrations and computes the sky and
RFI visibilities of every baseline into a scratch cube (in memory when it fits the budget, else
a zarr store chunked along baselines and time, next to the output). Pass 2 walks blocks of
baseline rows, applies gains, adds noise and flags, and streams them to the
:class:`~tabascal.store.ObservationWriter`.

Nothing appears under the output's name until the store is whole, and a process killed at any
moment leaves only hidden siblings (the scratch and the partial store, named by host and
process), which the next simulation into the same name removes.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from tqdm import tqdm

from tabascal.observation import emitters
from tabascal.observation import geometry as geo
from tabascal.observation.beam import beam_x, interpolate_voltage, voltage_table
from tabascal.observation.orbit_offsets import OffsetOrbits
from tabascal.simulate.averaging import (
    FineSampling,
    cells_vis,
    fine_times,
    gauss_legendre,
    rfi_sampling,
    sky_offsets,
    sky_sampling,
)
from tabascal.simulate.satellites import SimulationError
from tabascal.simulate.scene import JY, STREAM_FLAGS, Scene, build_scene
from tabascal.store import ObservationWriter, default_chunk_rows, row_blocks
from tabascal.store.writer import NO_SPACE, clear_leftovers, make_temporary_folder, why_unwritable

log = logging.getLogger(__name__)
STREAM_VIS_NOISE = 6


@dataclass(frozen=True)
class SimulationPlan:
    """Sizes and costs of a simulation, known before it runs."""

    n_ant: int
    n_bl: int
    n_freq: int
    n_time: int
    n_sat: int
    n_src: int
    rfi: FineSampling
    sky: FineSampling
    chunk_rows: int
    cells_per_block: int
    scratch_on_disk: bool
    store_bytes: int
    gram_flops: float


def plan(scene: Scene, memory_mb: float, chunk_rows: int | None = None) -> SimulationPlan:
    """The fine sampling, blocking and cost of simulating ``scene``."""
    m = scene.meta
    rfi, sky = rfi_sampling(m), sky_sampling(m, scene.sky)
    n_src = scene.sky.ra_rad.size
    budget = memory_mb * 2**20
    # host arrays per integration: 3 float64 per (antenna, emitter, fine time), twice over
    per_cell = 48 * m.n_ant * (m.n_sat * rfi.n_time + n_src * sky.n_time)
    cube = m.n_bl * m.n_freq * m.n_time * 8
    samples = m.n_sat * rfi.n_time * rfi.n_freq + n_src * sky.n_time * sky.n_freq
    return SimulationPlan(
        n_ant=m.n_ant,
        n_bl=m.n_bl,
        n_freq=m.n_freq,
        n_time=m.n_time,
        n_sat=m.n_sat,
        n_src=n_src,
        rfi=rfi,
        sky=sky,
        chunk_rows=max(1, min(chunk_rows or default_chunk_rows(m.n_freq, m.n_time), m.n_bl)),
        cells_per_block=int(np.clip(budget // 4 // max(per_cell, 1), 1, m.n_time)),
        scratch_on_disk=2 * cube > budget / 2,
        store_bytes=4 * cube + cube // 8 + 8 * m.n_bl,
        gram_flops=8.0 * m.n_ant**2 * samples * m.n_freq * m.n_time,
    )


def _rfi_inputs(scene: Scene, times: np.ndarray):
    """amp0 (without beam and spectrum), delay (us), sin of the beam angle at ``times`` (n_cell,
    n_t): each (n_cell, n_ant, n_sat, n_t) float64."""
    m = scene.meta
    flat = times.reshape(-1)
    args = (m.gast0_rad, m.ra_rad, m.dec_rad)
    tau = geo.rfi_delays(m.ant_itrf, m.orbits, flat, *args, n_deriv=0)[..., 0]
    range_m, sin_off = geo.satellite_sightlines(m.ant_itrf, m.orbits, flat, *args)
    eirp = scene.rfi.eirp_w_hz[:, None] * scene.rfi.time_factor(flat)  # (s, t)
    # Below the horizon the Earth is in the way.
    up = emitters.visible(m.ant_itrf, m.orbits, flat, m.gast0_rad, 0.0)  # (s, t)
    amp0 = np.sqrt(eirp[None] / (4 * np.pi * range_m**2) / JY) * up[None]
    shape = (m.n_ant, m.n_sat, *times.shape)
    return tuple(np.moveaxis(a.reshape(shape), 2, 0) for a in (amp0, tau, sin_off))


def _sky_inputs(scene: Scene, times: np.ndarray):
    """The same for the sky sources (amplitude sqrt(flux) at the reference frequency)."""
    m, sky = scene.meta, scene.sky
    args = (m.gast0_rad, m.ra_rad, m.dec_rad, sky.ra_rad, sky.dec_rad)
    tau = geo.sky_delays(m.ant_itrf, times.reshape(-1), *args)
    shape = (m.n_ant, sky.ra_rad.size, *times.shape)
    tau = np.moveaxis(tau.reshape(shape), 2, 0)
    amp0 = np.broadcast_to(np.sqrt(sky.flux_ref_jy)[None, None, :, None], tau.shape)
    sin_off = np.broadcast_to(sky_offsets(m, sky)[None, None, :, None], tau.shape)
    return amp0, tau, sin_off


def rfi_amplitudes(scene: Scene, table) -> np.ndarray:
    """Truth RFI amplitude at cell centres: (n_ant, n_sat, n_freq, n_time) float32 sqrt(Jy)."""
    m = scene.meta
    amp0, _, sin_off = (a[..., 0] for a in _rfi_inputs(scene, m.times_s[:, None]))  # (t, a, s)
    spec = np.sqrt(scene.rfi.spectral_factor(m.freqs_hz))  # (s, f)
    out = np.empty((m.n_ant, m.n_sat, m.n_freq, m.n_time), dtype=np.float32)
    for f, freq in enumerate(m.freqs_hz):  # one channel at a time: bounded memory
        beam = interpolate_voltage(table, beam_x(m.dish_diameter_m, freq, sin_off))
        out[:, :, f, :] = (amp0 * beam * spec[:, f]).transpose(1, 2, 0)
    return out


def _pass_one(scene: Scene, sim_plan: SimulationPlan, scratch: dict, table, progress: bool):
    m = scene.meta
    kinds = {
        "rfi": (sim_plan.rfi, _rfi_inputs, scene.rfi.spectral_index, scene.rfi.ref_freq_hz),
        "sky": (sim_plan.sky, _sky_inputs, scene.sky.spectral_index, scene.sky.ref_freq_hz),
    }
    nodes = {
        name: (gauss_legendre(s.n_time), gauss_legendre(s.n_freq))
        for name, (s, *_) in kinds.items()
    }
    with tqdm(total=m.n_time, desc="sky and RFI", unit="integration", disable=not progress) as bar:
        for cells in row_blocks(m.n_time, sim_plan.cells_per_block):
            for name, (_, inputs, index, ref_hz) in kinds.items():
                (t_nodes, t_w), (f_nodes, f_w) = nodes[name]
                if index.size == 0:
                    scratch[name][:, :, cells] = 0
                    continue
                nu_mhz = (m.freqs_hz[:, None] + f_nodes[None, :] * m.chan_width / 2) * 1e-6
                amp0, tau, sin_off = inputs(scene, fine_times(m, cells, t_nodes))
                vis = cells_vis(
                    amp0,
                    tau,
                    sin_off,
                    index,
                    nu_mhz,
                    f_w,
                    t_w,
                    table,
                    ref_hz,
                    m.dish_diameter_m,
                    m.a1,
                    m.a2,
                )
                scratch[name][:, :, cells] = vis.transpose(2, 1, 0).astype(np.complex64)
            bar.update(cells.stop - cells.start)


def _pass_two(scene: Scene, sim_plan: SimulationPlan, scratch: dict, writer, progress: bool):
    m, g = scene.meta, scene.gains
    per_baseline = np.ndim(scene.noise) >= 1
    with tqdm(total=m.n_bl, desc="writing", unit="baseline", disable=not progress) as bar:
        for k, rows in enumerate(row_blocks(m.n_bl, sim_plan.chunk_rows)):
            sky, rfi = scratch["sky"][rows], scratch["rfi"][rows]
            a1, a2 = m.a1[rows], m.a2[rows]
            sigma = scene.noise[rows] if per_baseline else scene.noise
            # (rows, 1, 1) per baseline, (rows, n_freq, 1) per baseline and channel
            sigma = np.reshape(sigma, (len(sigma), -1, 1)) if per_baseline else sigma
            rng = np.random.default_rng([scene.seed, STREAM_VIS_NOISE, k])
            noise = rng.normal(size=(2, *sky.shape)) * sigma
            vis = g[a1] * (sky + rfi) * np.conj(g[a2]) + (noise[0] + 1j * noise[1])
            flag_rng = np.random.default_rng([scene.seed, STREAM_FLAGS, k])
            flags = flag_rng.uniform(size=sky.shape) < scene.flag_fraction
            missing = list(scene.missing_channels)
            vis[:, missing], flags[:, missing] = 0, True
            writer.write_rows(
                rows.start,
                vis=vis,
                flags=flags,
                noise=scene.noise[rows] if per_baseline else None,
                sky_vis=sky,
                rfi_vis=rfi,
            )
            bar.update(rows.stop - rows.start)


def _scratch(sim_plan: SimulationPlan, m, where: Path):
    shape = (m.n_bl, m.n_freq, m.n_time)
    if not sim_plan.scratch_on_disk:
        return {name: np.zeros(shape, np.complex64) for name in ("sky", "rfi")}
    group = zarr.open_group(where, mode="w-")
    chunks = (sim_plan.chunk_rows, m.n_freq, sim_plan.cells_per_block)
    return {
        n: group.create_array(n, shape=shape, chunks=chunks, dtype=np.complex64)
        for n in ("sky", "rfi")
    }


def _require_ms_extra() -> None:
    from tabascal.measurement_set import MissingExtraError
    from tabascal.measurement_set._casacore import tables

    try:
        tables()
    except MissingExtraError as err:
        raise SimulationError(str(err)) from None


def simulate(config: dict, output, *, overwrite: bool = False, progress: bool = False):
    """Simulate the validated ``config`` into a new store at ``output``; a name ending in .ms
    writes a Measurement Set instead (the 'ms' extra; see tabascal.measurement_set.writer).

    Returns (Scene, SimulationPlan). Refuses an existing ``output`` unless ``overwrite``. A
    folder that cannot be written is refused before any work, and a disk that fills up is a
    SimulationError; either way nothing is left under ``output``'s name.
    """
    output = Path(output)
    clear_leftovers(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} already exists; pass overwrite to replace it")
    as_ms = output.suffix.lower() == ".ms"
    if as_ms:
        _require_ms_extra()
    work = make_temporary_folder(output, "scratch")
    try:
        return _simulate_into(config, output, work, as_ms, overwrite, progress)
    except OSError as err:
        if err.errno not in NO_SPACE:
            raise
        raise SimulationError(
            f"{output}: {why_unwritable(err)} in {output.parent} while simulating ({err}); "
            f"nothing was stored under {output}: free some space and run again"
        ) from err
    finally:
        shutil.rmtree(work, ignore_errors=True)


def handed_meta(meta, orbit_error: dict):
    """The metadata a fit is handed: ``meta`` with its orbits displaced by ``orbit_error`` (the
    ``satellites.orbit_error`` section), or ``meta`` itself when every offset is zero. Only
    the satellites are displaced: the other emitters' positions are handed as they are."""
    ric = [orbit_error["radial_m"], orbit_error["in_track_m"], orbit_error["cross_track_m"]]
    if meta.n_sat == 0 or (orbit_error["time_offset_s"] == 0 and not any(ric)):
        return meta
    satellite = np.array(emitters.kinds(meta.orbits)) == "satellite"
    dt = np.where(satellite, orbit_error["time_offset_s"], 0.0)
    orbits = OffsetOrbits(meta.orbits, dt, satellite[:, None] * np.array(ric, np.float64))
    return dataclasses.replace(meta, orbits=orbits)


def _simulate_into(config: dict, output: Path, work: Path, as_ms: bool, overwrite, progress):
    """``simulate`` with its scratch folder ``work`` made."""
    scene = build_scene(config)
    sim = config["simulation"]
    sim_plan = plan(scene, sim["memory_mb"], sim["chunk_rows"])
    m = scene.meta
    log.info(
        "simulating %d baselines x %d channels x %d integrations, fine sampling: RFI %s, sky %s",
        m.n_bl,
        m.n_freq,
        m.n_time,
        sim_plan.rfi,
        sim_plan.sky,
    )
    table = voltage_table(beam_x(m.dish_diameter_m, m.freqs_hz.max() + m.chan_width, 1.0))
    scratch = _scratch(sim_plan, m, work / "scratch.zarr")
    _pass_one(scene, sim_plan, scratch, table, progress)
    store = work / "store.zarr" if as_ms else output
    with ObservationWriter(
        store,
        handed_meta(m, config["satellites"]["orbit_error"]),
        noise=None if np.ndim(scene.noise) else scene.noise,
        noise_per_channel=np.ndim(scene.noise) == 2,
        truth=True,
        overwrite=overwrite,
        chunk_rows=sim_plan.chunk_rows,
    ) as writer:
        _pass_two(scene, sim_plan, scratch, writer, progress)
        writer.write_truth(
            gains=scene.gains,
            rfi_amp=rfi_amplitudes(scene, table),
            rfi_eirp_w_hz=scene.rfi.eirp(m.freqs_hz, m.times_s),
            source_ra_rad=scene.sky.ra_rad,
            source_dec_rad=scene.sky.dec_rad,
            source_flux_jy=scene.sky.flux(m.freqs_hz),
        )
    if as_ms:
        from tabascal.measurement_set import write_measurement_set

        write_measurement_set(store, output, overwrite=overwrite)
    return scene, sim_plan
