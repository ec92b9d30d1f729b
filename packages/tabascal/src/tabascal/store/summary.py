"""A store's summary: sizes, noise, signal levels, flags and satellites (``tabascal inspect``),
and the text of a verification (``tabascal inspect --verify``).

Levels are accumulated over blocks of baseline rows, so a store of any size is summarised in
bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tabascal.observation import emitters
from tabascal.observation import geometry as geo
from tabascal.store.format import StoreVerification, row_blocks
from tabascal.store.reader import StoreReader


@dataclass(frozen=True)
class SatelliteSummary:
    """One emitter: a satellite (its orbit's altitude and inclination), a ground transmitter
    or an aircraft (``kind``; its height, at mid-observation for an aircraft, and no
    inclination)."""

    name: str
    altitude_km: float
    inclination_deg: float | None
    elevation_min_deg: float
    elevation_max_deg: float
    eirp_dbw_hz: float | None  # mean over the grid, from the truth when present
    kind: str = "satellite"


@dataclass(frozen=True)
class ObservationSummary:
    """RMS levels are over unflagged cells, in Jy; ``None`` where the store has no truth.
    missing_cells: cells of missing chunks read as flagged (``allow_missing``), counted in
    flagged_fraction too. noise_min, noise_max: over every value of the noise (per baseline
    and channel with ``noise_per_channel``)."""

    path: str
    n_ant: int
    n_bl: int
    n_freq: int
    n_time: int
    chunk_rows: int
    dish_diameter_m: float
    longest_baseline_m: float
    freq_min_hz: float
    freq_max_hz: float
    chan_width: float
    chan_spacing: float
    int_time: float
    epoch_utc: str
    ra_deg: float
    dec_deg: float
    noise_min: float
    noise_max: float
    flagged_fraction: float
    missing_cells: int
    data_rms: float
    sky_rms: float | None
    rfi_rms: float | None
    satellites: tuple[SatelliteSummary, ...]
    noise_per_channel: bool = False


def summarize(
    path, block_rows: int | None = None, *, allow_missing: bool = False
) -> ObservationSummary:
    """Summarise the store at ``path``, reading it in blocks of ``block_rows`` baselines.

    ``allow_missing``: read missing vis and flags chunks as flagged cells instead of refusing
    the store (see :class:`tabascal.store.StoreReader`).
    """
    store = StoreReader(path, allow_missing=allow_missing)
    info, meta = store.info, store.meta()
    sums = {"data": 0.0, "sky": 0.0, "rfi": 0.0}
    n_good = n_flagged = 0
    noise_min, noise_max = np.inf, -np.inf
    eirp = None
    for rows in row_blocks(info.n_bl, block_rows or info.chunk_rows):
        block = store.read(rows)
        good = ~block.flags
        n_good += int(good.sum())
        n_flagged += int(block.flags.sum())
        noise_min = min(noise_min, float(np.min(block.noise)))
        noise_max = max(noise_max, float(np.max(block.noise)))
        sums["data"] += float(np.sum(np.abs(block.vis[good]) ** 2))
        if block.truth is not None:
            sums["sky"] += float(np.sum(np.abs(block.truth.sky_vis[good]) ** 2))
            sums["rfi"] += float(np.sum(np.abs(block.truth.rfi_vis[good]) ** 2))
            eirp = block.truth.rfi_eirp_w_hz
    rms = {k: float(np.sqrt(v / max(n_good, 1))) for k, v in sums.items()}
    el = np.rad2deg(
        geo.satellite_elevation(meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad)
    )
    o = meta.orbits
    height_km, inclination_deg = _heights_and_inclinations(o, meta.times_s)
    kinds = emitters.kinds(o)
    satellites = tuple(
        SatelliteSummary(
            name=o.label(s),
            altitude_km=height_km[s],
            inclination_deg=inclination_deg[s],
            elevation_min_deg=float(el[s].min()) if el.size else float("nan"),
            elevation_max_deg=float(el[s].max()) if el.size else float("nan"),
            eirp_dbw_hz=None if eirp is None else float(10 * np.log10(eirp[s].mean())),
            kind=kinds[s],
        )
        for s in range(o.n_sat)
    )
    baselines = meta.ant_itrf[meta.a1] - meta.ant_itrf[meta.a2]
    return ObservationSummary(
        path=str(path),
        n_ant=info.n_ant,
        n_bl=info.n_bl,
        n_freq=info.n_freq,
        n_time=info.n_time,
        chunk_rows=info.chunk_rows,
        dish_diameter_m=meta.dish_diameter_m,
        longest_baseline_m=float(np.linalg.norm(baselines, axis=1).max(initial=0.0)),
        freq_min_hz=float(meta.freqs_hz.min()),
        freq_max_hz=float(meta.freqs_hz.max()),
        chan_width=meta.chan_width,
        chan_spacing=meta.chan_spacing,
        int_time=meta.int_time,
        epoch_utc=meta.epoch_utc,
        ra_deg=float(np.rad2deg(meta.ra_rad)),
        dec_deg=float(np.rad2deg(meta.dec_rad)),
        noise_min=noise_min,
        noise_max=noise_max,
        flagged_fraction=n_flagged / max(n_good + n_flagged, 1),
        missing_cells=store.missing_cells,
        data_rms=rms["data"],
        sky_rms=rms["sky"] if info.has_truth else None,
        rfi_rms=rms["rfi"] if info.has_truth else None,
        satellites=satellites,
        noise_per_channel=info.noise_per_channel,
    )


def _heights_and_inclinations(orbits, times_s) -> tuple[list[float], list[float | None]]:
    """Each emitter's height (km: a satellite's orbit's altitude, another's WGS84 height, at
    mid-observation for an aircraft) and inclination (deg; None but for satellites)."""
    heights, inclinations = [], []
    satellites, ground, aircraft = emitters.split(orbits)
    heights += [float(h / 1e3) for h in satellites.altitude_m]
    inclinations += [float(np.rad2deg(i)) for i in satellites.inclination_rad]
    mid = np.asarray([float(np.median(times_s))]) if len(times_s) else np.zeros(1)
    for part in (ground, aircraft):
        if part is None:
            continue
        where = (
            part.itrf if part is ground else np.stack([t.itrf_at(mid)[0, 0] for t in part.tracks])
        )
        heights += [float(h / 1e3) for h in geo.itrf_to_geodetic(where)[2]]
        inclinations += [None] * part.n_sat
    return heights, inclinations


def summary_lines(s: ObservationSummary) -> list[str]:
    """The summary as text lines, for ``tabascal inspect``."""
    varies = "per baseline and channel" if s.noise_per_channel else "per baseline"
    noise = (
        f"{s.noise_min:.4g} Jy"
        if s.noise_min == s.noise_max
        else (f"{s.noise_min:.4g} to {s.noise_max:.4g} Jy ({varies})")
    )

    every = "" if s.chan_spacing == s.chan_width else f" every {s.chan_spacing / 1e3:g} kHz"

    def level(rms):
        return f"{rms:10.4g} Jy  ({rms / s.noise_max:.3g} x noise)"

    lines = [
        f"{s.path}",
        f"  stations      {s.n_ant} of {s.dish_diameter_m:g} m; {s.n_bl} baselines, longest "
        f"{s.longest_baseline_m / 1e3:.3g} km; {s.chunk_rows} baselines per chunk",
        f"  channels      {s.n_freq} x {s.chan_width / 1e3:g} kHz{every}, centres "
        f"{s.freq_min_hz / 1e6:.6g} to {s.freq_max_hz / 1e6:.6g} MHz",
        f"  integrations  {s.n_time} x {s.int_time:g} s from {s.epoch_utc}",
        f"  phase centre  RA {s.ra_deg:.4f} deg, Dec {s.dec_deg:.4f} deg",
        f"  noise         {noise} per real and imaginary part",
        f"  flagged       {100 * s.flagged_fraction:.2f} %",
    ]
    if s.missing_cells:
        n_cells = s.n_bl * s.n_freq * s.n_time
        lines.append(
            f"  missing       {s.missing_cells} of {n_cells} cells "
            f"({100 * s.missing_cells / n_cells:.2f} %), read as flagged"
        )
    lines.append(f"  data rms  {level(s.data_rms)}")
    if s.sky_rms is not None:
        lines += [f"  sky rms   {level(s.sky_rms)}", f"  RFI rms   {level(s.rfi_rms)}"]
    others = [e for e in s.satellites if e.kind != "satellite"]
    lines.append(f"  satellites    {len(s.satellites) - len(others)}")
    if others:
        counts = {k: sum(e.kind == k for e in others) for k in ("ground", "aircraft")}
        lines.append(f"  other emitters {counts['ground']} ground, {counts['aircraft']} aircraft")
    for sat in s.satellites:
        eirp = "" if sat.eirp_dbw_hz is None else f", EIRP {sat.eirp_dbw_hz:.1f} dB(W/Hz)"
        where = (
            f"{sat.altitude_km:8.0f} km, incl {sat.inclination_deg:5.1f} deg"
            if sat.kind == "satellite"
            else f"{sat.kind:<8} at {sat.altitude_km:6.2f} km"
        )
        lines.append(
            f"    {sat.name:<14} {where}, "
            f"elevation {sat.elevation_min_deg:5.1f} to {sat.elevation_max_deg:5.1f} deg{eirp}"
        )
    return lines


def verification_lines(path, v: StoreVerification) -> list[str]:
    """A verification as text lines, one per damaged chunk and a closing count, for
    ``tabascal inspect --verify``."""
    lines = [f"{path}: {d}" for d in v.damage]
    checksums = (
        "crc32c checksums checked"
        if v.checksums
        else "no checksums: this store was written before tabascal kept them, so a changed "
        "chunk that still decodes goes unseen"
    )
    found = f"{len(v.damage)} of" if v.damage else "none of"
    verb = "are" if len(v.damage) > 1 else "is"
    lines.append(
        f"{path}: {found} the {v.n_chunks} chunks of its {v.n_arrays} arrays {verb} damaged "
        f"({checksums})"
    )
    return lines
