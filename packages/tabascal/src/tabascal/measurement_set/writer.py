"""Writing an observation store as a Measurement Set (``tabascal simulate -o obs.ms``).

The MS has one spectral window (the store's channels, TOPO: CHAN_FREQ their centres;
CHAN_WIDTH, EFFECTIVE_BW and RESOLUTION each channel's width, which is less than the step
between centres for channels selected or decimated in frequency; TOTAL_BANDWIDTH the sum of
the widths), one field (the phase centre, written in J2000 by
:func:`~tabascal.measurement_set.frames.phase_centre_to_j2000`), one correlation of type I
holding the store's visibilities, and rows ordered by (time, baseline) in the store's
baseline order. UVW is in the J2000 frame and follows the MS convention,
``uvw(ANTENNA2) - uvw(ANTENNA1)``, computed by casacore as CASA does: with tabascal's signal
``S_a = A exp(+2 pi i f tau_a)`` and ``V = S_a1 conj(S_a2)``, a source at (l, m) then has
``V = exp(-2 pi i (u l + v m + w (n - 1)) / lambda)``, as CASA expects (checked in the tests).
SIGMA is the noise of each of the real and imaginary parts and ``WEIGHT = 1 / SIGMA^2``; a
store's noise per baseline and channel goes into SIGMA_SPECTRUM and ``WEIGHT_SPECTRUM = 1 /
SIGMA_SPECTRUM^2``, with WEIGHT the mean of WEIGHT_SPECTRUM over the channels (as CASA's
mstransform sets it) and SIGMA ``1 / sqrt(WEIGHT)``. The orbits and the store's metadata are
kept in the table keywords ``TABASCAL_ORBITS`` and ``TABASCAL_METADATA`` (JSON), which the
reader uses when no other orbits are given; the truth is not written. The MS is built in a
hidden sibling directory and renamed into place when complete.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np

from tabascal.measurement_set import _casacore, frames
from tabascal.measurement_set.correlations import STOKES_CODES
from tabascal.measurement_set.reader import METADATA_KEYWORD, ORBITS_KEYWORD
from tabascal.observation import emitters
from tabascal.observation.tle import TleOrbits
from tabascal.store import read_meta, read_observation, row_blocks, store_info
from tabascal.store.writer import clear_leftovers, publish_folder, temporary_sibling

MEAS_FREQ_TOPO = 5  # casacore MFrequency::TOPO


def orbits_keyword(orbits) -> dict | None:
    """The TABASCAL_ORBITS record of ``orbits`` (None for no emitters): the satellites', and
    under "ground" and "aircraft" those of the ground transmitters and aircraft tracks."""
    if orbits.n_sat == 0:
        return None
    satellites, ground, aircraft = emitters.split(orbits)
    record = _satellites_keyword(satellites)
    if ground is not None:
        names = [ground.label(s) for s in range(ground.n_sat)]
        fields = {f: np.asarray(getattr(ground, f)) for f in ("lat_rad", "lon_rad", "height_m")}
        record["ground"] = {**fields, "names": names}
    if aircraft is not None:
        record["aircraft"] = {
            "times_s": np.concatenate([t.times_s for t in aircraft.tracks]),
            "itrf": np.concatenate([t.itrf for t in aircraft.tracks]).reshape(-1),
            "track_start": np.cumsum([0] + [t.times_s.size for t in aircraft.tracks]),
            "names": [aircraft.label(s) for s in range(aircraft.n_sat)],
        }
    return record


def _satellites_keyword(orbits) -> dict:
    record = {} if orbits.names is None else {"names": list(orbits.names)}
    if isinstance(orbits, TleOrbits):
        lines = {"line1": list(orbits.line1), "line2": list(orbits.line2)}
        return record | {"kind": "tle", **lines, "ut1_utc_s": orbits.ut1_utc_s}
    fields = ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad")
    return record | {"kind": "circular"} | {f: np.asarray(getattr(orbits, f)) for f in fields}


def _fill(tables, path: Path, name: str, columns: dict) -> None:
    with tables.table(str(path / name), readonly=False, ack=False) as sub:
        sub.addrows(1 if name != "ANTENNA" else len(columns["NAME"]))
        for column, value in columns.items():
            sub.putcol(column, value)


def _subtables(tables, path: Path, meta, ra: float, dec: float, n_corr: int) -> None:
    epoch = datetime.fromisoformat(meta.epoch_utc)
    n_ant, n_chan = meta.n_ant, meta.n_freq
    names = [f"ANT{a:03d}" for a in range(n_ant)]
    _fill(
        tables,
        path,
        "ANTENNA",
        {
            "NAME": names,
            "STATION": names,
            "TYPE": ["GROUND-BASED"] * n_ant,
            "MOUNT": ["ALT-AZ"] * n_ant,
            "POSITION": np.asarray(meta.ant_itrf, np.float64),
            "DISH_DIAMETER": np.full(n_ant, meta.dish_diameter_m),
        },
    )
    widths = np.full((1, n_chan), meta.chan_width)
    _fill(
        tables,
        path,
        "SPECTRAL_WINDOW",
        {
            "NUM_CHAN": np.array([n_chan]),
            "CHAN_FREQ": meta.freqs_hz[None, :],
            "CHAN_WIDTH": widths,
            "EFFECTIVE_BW": widths,
            "RESOLUTION": widths,
            "REF_FREQUENCY": meta.freqs_hz[:1],
            "TOTAL_BANDWIDTH": np.array([n_chan * meta.chan_width]),
            "MEAS_FREQ_REF": np.array([MEAS_FREQ_TOPO]),
            "NAME": ["tabascal"],
        },
    )
    _fill(
        tables,
        path,
        "POLARIZATION",
        {
            "NUM_CORR": np.array([n_corr]),
            "CORR_TYPE": np.array([[STOKES_CODES["I"]]]),
            "CORR_PRODUCT": np.zeros((1, 2, 1), np.int32),
        },
    )
    _fill(
        tables,
        path,
        "DATA_DESCRIPTION",
        {
            "SPECTRAL_WINDOW_ID": np.array([0]),
            "POLARIZATION_ID": np.array([0]),
        },
    )
    direction = np.array([[[ra, dec]]])
    start = frames.mjd_seconds(epoch)
    _fill(
        tables,
        path,
        "FIELD",
        {
            "NAME": ["tabascal"],
            "PHASE_DIR": direction,
            "DELAY_DIR": direction,
            "REFERENCE_DIR": direction,
            "NUM_POLY": np.array([0]),
            "TIME": np.array([start]),
        },
    )
    _fill(
        tables,
        path,
        "OBSERVATION",
        {
            "TELESCOPE_NAME": ["tabascal simulation"],
            "TIME_RANGE": np.array([[start, start + meta.n_time * meta.int_time]]),
        },
    )


def _rows(ms, meta, ra: float, dec: float) -> None:
    """The columns that need no visibilities, for all rows (time-major, store baseline order)."""
    n_bl, n_time = meta.n_bl, meta.n_time
    epoch = datetime.fromisoformat(meta.epoch_utc)
    time = np.repeat(frames.mjd_seconds(epoch) + meta.times_s, n_bl)
    uvw = frames.j2000_antenna_uvw(meta.ant_itrf, meta.times_s, epoch, ra, dec)
    columns = {
        "TIME": time,
        "TIME_CENTROID": time,
        "INTERVAL": np.full(time.size, meta.int_time),
        "EXPOSURE": np.full(time.size, meta.int_time),
        "ANTENNA1": np.tile(meta.a1, n_time),
        "ANTENNA2": np.tile(meta.a2, n_time),
        "UVW": (uvw[:, meta.a2] - uvw[:, meta.a1]).reshape(-1, 3),
        "SCAN_NUMBER": np.ones(time.size, np.int32),
        "STATE_ID": np.full(time.size, -1, np.int32),
        "PROCESSOR_ID": np.full(time.size, -1, np.int32),
    }
    for name, value in columns.items():
        ms.putcol(name, value)


def _write_block(ms, meta, obs) -> None:
    """DATA, FLAG, SIGMA and WEIGHT (and, with a noise per channel, SIGMA_SPECTRUM and
    WEIGHT_SPECTRUM) of the baseline rows of ``obs`` at every integration."""
    n = obs.n_bl
    noise = np.asarray(obs.noise, np.float64)
    if noise.ndim == 2:
        weight_spectrum = 1.0 / noise**2
        weight = np.mean(weight_spectrum, axis=1)[:, None]
        sigma = 1.0 / np.sqrt(weight)
    else:
        sigma = np.broadcast_to(noise, (n,))[:, None]
        weight = 1.0 / sigma**2
    for t in range(meta.n_time):
        first = t * meta.n_bl + obs.rows.start
        ms.putcol("DATA", obs.vis[:, :, t, None], startrow=first, nrow=n)
        ms.putcol("FLAG", obs.flags[:, :, t, None], startrow=first, nrow=n)
        ms.putcol("SIGMA", sigma, startrow=first, nrow=n)
        ms.putcol("WEIGHT", weight, startrow=first, nrow=n)
        if noise.ndim == 2:
            ms.putcol("SIGMA_SPECTRUM", noise[:, :, None], startrow=first, nrow=n)
            ms.putcol("WEIGHT_SPECTRUM", weight_spectrum[:, :, None], startrow=first, nrow=n)


def write_measurement_set(store, path, *, overwrite: bool = False) -> None:
    """Write the observation store at ``store`` as a new Measurement Set at ``path``.

    Reads the store block of baseline rows by block. An existing ``path`` is an error unless
    ``overwrite``; a failed write leaves nothing under ``path``.
    """
    tables = _casacore.tables()
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite to replace it")
    meta, info = read_meta(store), store_info(store)
    clear_leftovers(path)  # what a killed write of this MS left beside it
    tmp = temporary_sibling(path, "partial")
    data_desc = tables.makearrcoldesc(
        "DATA",
        0j,
        ndim=2,
        shape=[meta.n_freq, 1],
        valuetype="complex",
        comment="tabascal visibilities, Jy",
    )
    columns = [data_desc]
    if info.noise_per_channel:
        columns += [
            tables.makearrcoldesc(name, 0.0, ndim=2, shape=[meta.n_freq, 1], valuetype="float")
            for name in ("SIGMA_SPECTRUM", "WEIGHT_SPECTRUM")
        ]
    try:
        with tables.default_ms(str(tmp), tables.maketabdesc(columns)) as ms:
            t_mid = float(meta.times_s[0] + meta.times_s[-1]) / 2
            epoch = datetime.fromisoformat(meta.epoch_utc)
            ra, dec = frames.phase_centre_to_j2000(
                meta.ra_rad, meta.dec_rad, meta.ant_itrf, epoch, meta.gast0_rad, t_mid
            )
            _subtables(tables, tmp, meta, ra, dec, n_corr=1)
            ms.addrows(meta.n_bl * meta.n_time)
            _rows(ms, meta, ra, dec)
            for block in row_blocks(info.n_bl, info.chunk_rows):
                _write_block(ms, meta, read_observation(store, block, truth=False))
            record = orbits_keyword(meta.orbits)
            if record is not None:
                ms.putkeyword(ORBITS_KEYWORD, record)
            ms.putkeyword(METADATA_KEYWORD, json.dumps(meta.metadata))
        publish_folder(tmp, path, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
