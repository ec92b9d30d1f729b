"""The metadata of a Measurement Set selection: antennas, times, channels, phase centre,
satellites, and the record of how it was read (``metadata['measurement_set']``); see
:mod:`tabascal.measurement_set.reader` for what is taken from where."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path

import numpy as np

from tabascal.measurement_set import frames
from tabascal.measurement_set.correlations import CorrelationPlan, correlation_names
from tabascal.measurement_set.selection import MsError, MsSelection, subtable
from tabascal.observation import emitters
from tabascal.observation import geometry as geo
from tabascal.observation.tle import TleOrbits, load_tle_orbits
from tabascal.store import ObservationMeta

log = logging.getLogger(__name__)

ORBITS_KEYWORD = "TABASCAL_ORBITS"
METADATA_KEYWORD = "TABASCAL_METADATA"


def orbits_from_keyword(record: dict, epoch_utc: str, gast0_rad: float):
    """Orbits stored by :func:`tabascal.measurement_set.write_measurement_set`: the
    satellites, joined by the ground transmitters and aircraft where the record holds them."""
    satellites = _satellites_from_keyword(record, epoch_utc, gast0_rad)
    ground = aircraft = None
    if "ground" in record:
        g = record["ground"]
        fields = {
            f: np.asarray(g[f], np.float64).reshape(-1) for f in ("lat_rad", "lon_rad", "height_m")
        }
        ground = emitters.GroundEmitters(**fields, gast0_rad=gast0_rad, names=list(g["names"]))
    if "aircraft" in record:
        a = record["aircraft"]
        starts = np.asarray(a["track_start"], np.int64).reshape(-1)
        times = np.asarray(a["times_s"], np.float64).reshape(-1)
        itrf = np.asarray(a["itrf"], np.float64).reshape(-1, 3)
        tracks = [emitters.Track(times[i:j], itrf[i:j]) for i, j in itertools.pairwise(starts)]
        aircraft = emitters.AircraftTracks(tracks, gast0_rad, names=list(a["names"]))
    return emitters.join(satellites, ground, aircraft)


def _satellites_from_keyword(record: dict, epoch_utc: str, gast0_rad: float):
    names = tuple(record["names"]) if "names" in record else None
    if record["kind"] == "tle":
        return TleOrbits(
            tuple(record["line1"]),
            tuple(record["line2"]),
            epoch_utc,
            gast0_rad=gast0_rad,
            names=names,
            ut1_utc_s=float(record["ut1_utc_s"]),
        )
    fields = ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad")
    return geo.CircularOrbits(
        *(np.asarray(record[f], dtype=np.float64) for f in fields), names=names
    )


def _antennas(tables, path: Path, sel: MsSelection):
    """MS ids, names, ITRF positions of the antennas in a selected baseline, the smallest dish
    diameter, and a1, a2 (n_bl,) int32 indexing them."""
    used = np.unique(np.concatenate([sel.ant1, sel.ant2]))
    with subtable(tables, path, "ANTENNA") as ants:
        position = ants.getcol("POSITION")[used]
        dish = ants.getcol("DISH_DIAMETER")[used]
        names = [str(n) for n in np.asarray(ants.getcol("NAME"))[used]]
    if np.ptp(dish) > 0:
        log.warning(
            "dish diameters differ (%g to %g m); using the smallest", dish.min(), dish.max()
        )
    a1, a2 = np.searchsorted(used, sel.ant1), np.searchsorted(used, sel.ant2)
    return used, names, position, float(dish.min()), a1.astype(np.int32), a2.astype(np.int32)


def _phase_centre(tables, path: Path, field: int, ant_itrf, epoch, gast0: float, t_mid: float):
    """(ra, dec) in tabascal's frame, and the FIELD PHASE_DIR record for the metadata."""
    with subtable(tables, path, "FIELD") as fields:
        direction = np.asarray(fields.getcell("PHASE_DIR", field))
        ref = fields.getcolkeyword("PHASE_DIR", "MEASINFO").get("Ref", "J2000")
    if np.any(direction[1:] != 0):
        raise MsError(
            f"{path}: the phase centre of field {field} moves (PHASE_DIR has "
            "polynomial terms); tabascal needs a fixed one"
        )
    try:
        ra, dec = frames.phase_centre_from_ms(*direction[0], ref, ant_itrf, epoch, gast0, t_mid)
    except ValueError as err:
        raise MsError(f"{path}: {err}") from None
    record = {"ref": ref, "ra_rad": float(direction[0, 0]), "dec_rad": float(direction[0, 1])}
    return ra, dec, record


def _orbits(keywords: dict, orbits, files: dict, satellites, ut1_utc_s, epoch, gast0, times_s):
    """Given orbits, else: the satellites of the TLE file (``files["tle"]``), the ground
    transmitters and aircraft of their files (``files["ground"]``, ``files["aircraft"]``),
    each kind where no file gives it from those tabascal stored, else none."""
    if orbits is not None:
        return orbits
    stored = (None, None, None)
    if ORBITS_KEYWORD in keywords:
        stored = emitters.split(
            orbits_from_keyword(keywords[ORBITS_KEYWORD], epoch.isoformat(), gast0)
        )
    sats, ground, aircraft = stored
    if files.get("tle") is not None:
        sats = load_tle_orbits(
            files["tle"], satellites, epoch, gast0_rad=gast0, ut1_utc_s=ut1_utc_s
        )
    if files.get("ground") is not None:
        ground = emitters.read_ground(files["ground"], gast0)
    if files.get("aircraft") is not None:
        aircraft = emitters.read_tracks(files["aircraft"], epoch.isoformat(), gast0, times_s)
    sats = geo.CircularOrbits([], [], [], []) if sats is None else sats
    return emitters.join(sats, ground, aircraft)


def read_meta(
    tables,
    path: Path,
    ms,
    sel: MsSelection,
    *,
    column: str,
    plan: CorrelationPlan,
    orbits,
    tle_file,
    satellites,
    ut1_utc_s: float,
    ground_file=None,
    aircraft_file=None,
) -> ObservationMeta:
    """The metadata of selection ``sel`` of the open main table ``ms`` read as data column
    ``column`` with correlation ``plan``; the satellites as :class:`MeasurementSetReader`
    takes them."""
    used, names, ant_itrf, dish, a1, a2 = _antennas(tables, path, sel)
    epoch = frames.datetime_from_mjd_seconds(sel.time_mjd_s[0] - sel.interval_s / 2)
    times_s = sel.time_mjd_s - frames.mjd_seconds(epoch)
    gast0 = geo.greenwich_sidereal_angle(epoch)
    t_mid = float(times_s[0] + times_s[-1]) / 2
    ra, dec, phase_dir = _phase_centre(tables, path, sel.field, ant_itrf, epoch, gast0, t_mid)
    keywords = ms.getkeywords()
    files = {"tle": tle_file, "ground": ground_file, "aircraft": aircraft_file}
    metadata = json.loads(keywords.get(METADATA_KEYWORD, "{}"))
    reversed_ = [w.reversed for w in sel.windows]
    # The windows read and the range of their channels, as --spw and --channels select them
    # again (export-ms does): windows of a band holding none of its range are not among them.
    start, stop, n_chan = sel.channel_range
    metadata["measurement_set"] = {
        "path": str(path.resolve()),
        "column": column,
        "correlation": plan.describe(),
        "correlations_in_data": correlation_names(sel.corr_types),
        "spw": sel.spws[0] if len(sel.spws) == 1 else list(sel.spws),
        "field": sel.field,
        "phase_dir": phase_dir,
        "antenna_ids": used.tolist(),
        "antenna_names": names,
        "autocorrelation_rows_dropped": sel.n_autocorrelations,
        "channels_reversed": reversed_ if len(reversed_) > 1 else reversed_[0],
        "correlation_in_place_of": plan.stands_for,
        "rows_in_time_order": sel.in_time_order,
        "time_tolerance": sel.time_tolerance,
        "max_time_offset": sel.max_time_offset,
        "rows_filled": sel.n_rows_filled,
        "integrations_filled": sel.n_times_filled,
        "channels": [start, stop],
        "channels_in_window": n_chan,
        "channels_filled": sel.n_channels_filled,
        "window_channels": [
            {
                "spw": w.spw,
                "channels": [w.channels.start, w.channels.stop],
                "channels_in_window": w.n_chan_spw,
            }
            for w in sel.windows
        ],
        "integrations": [sel.times.start, sel.times.stop],
        "integrations_in_grid": sel.n_time_grid,
    }
    return ObservationMeta(
        a1=a1,
        a2=a2,
        ant_itrf=ant_itrf,
        dish_diameter_m=dish,
        times_s=times_s,
        int_time=sel.interval_s,
        freqs_hz=sel.chan_freq_hz,
        chan_width=sel.chan_width_hz,
        gast0_rad=gast0,
        epoch_utc=epoch.isoformat(),
        ra_rad=ra,
        dec_rad=dec,
        orbits=_orbits(keywords, orbits, files, satellites, ut1_utc_s, epoch, gast0, times_s),
        metadata=metadata,
    )
