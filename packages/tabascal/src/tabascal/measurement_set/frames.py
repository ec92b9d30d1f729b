"""Times and the phase centre between a Measurement Set and tabascal's geometry.

Times: MS TIME is MJD seconds (UTC) at the centre of each integration; tabascal's epoch is the
start of the first integration, kept to the microsecond, and ``times_s`` count from it.

Phase centre: an MS gives it as FIELD PHASE_DIR in a celestial frame (usually J2000), and the
correlator tracks its apparent position. tabascal's inertial frame is the Earth-fixed frame
rotated by ``gast(t) = gast0_rad + OMEGA_EARTH t`` with gast0 the IAU 1982 GMST of the epoch,
so what fixes the geometry is the hour angle: a source at ``(ra, dec)`` in that frame has the
Greenwich hour angle ``gast(t) - ra``. The phase centre is therefore converted with casacore's
measures to topocentric apparent hour angle and declination (precession, nutation,
aberration, and UT1 and polar motion where casacore's IERS tables cover the date) at the array
centre at mid-observation, and ``ra = gast(t_mid) + lon - HA`` with lon the array centre's
longitude. Over an observation the apparent position drifts by well under an arcsecond, which
this neglects; precession alone, which it does not, is 20 arcmin per 25 years. The writer does
the inverse (HADEC at mid-observation to J2000, refined against the reader's conversion), so a
tabascal observation written to an MS and read back keeps its phase centre to the last bit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from tabascal.measurement_set import _casacore
from tabascal.observation import geometry as geo

MJD_ZERO = datetime(1858, 11, 17, tzinfo=UTC)
# Round-trip corrections of phase_centre_to_j2000; two reach the last bit (see there).
_REFINE_STEPS = 4
MOVING_FRAMES = ("HADEC", "AZEL", "AZELSW", "AZELGEO", "AZELSWGEO", "TOPO", "ITRF")


def datetime_from_mjd_seconds(mjd_s: float) -> datetime:
    """UTC datetime of an MJD in seconds, rounded to the microsecond."""
    return MJD_ZERO + timedelta(microseconds=round(mjd_s * 1e6))


def mjd_seconds(epoch: datetime) -> float:
    """MJD in seconds of a datetime (naive ones are UTC)."""
    epoch = epoch if epoch.tzinfo else epoch.replace(tzinfo=UTC)
    delta = epoch - MJD_ZERO
    return delta.days * 86400.0 + delta.seconds + delta.microseconds * 1e-6


def _frame(dm, ant_itrf, epoch: datetime, t_s: float):
    centre = np.asarray(ant_itrf, dtype=np.float64).mean(axis=0)
    mjd_days = float(mjd_seconds(epoch) + t_s) / 86400.0
    dm.do_frame(dm.epoch("UTC", f"{mjd_days!r}d"))
    dm.do_frame(dm.position("ITRF", *(f"{float(x)!r}m" for x in centre)))
    return float(np.arctan2(centre[1], centre[0]))


def phase_centre_from_ms(
    ra_rad: float, dec_rad: float, ref: str, ant_itrf, epoch: datetime, gast0_rad: float, t_s
):
    """(ra_rad, dec_rad) in tabascal's inertial frame of a direction given in the casacore
    frame ``ref`` (e.g. 'J2000'), matched in hour angle at ``t_s`` s after ``epoch``."""
    ref = ref.upper()
    if ref in MOVING_FRAMES:
        raise ValueError(
            f"the phase centre is given in the {ref} frame, which turns with the Earth; "
            "tabascal needs a celestial phase centre (J2000, ICRS, APP, ...)"
        )
    dm = _casacore.measures()
    lon = _frame(dm, ant_itrf, epoch, t_s)
    hadec = dm.measure(
        dm.direction(ref, f"{float(ra_rad)!r}rad", f"{float(dec_rad)!r}rad"), "HADEC"
    )
    ha, dec = hadec["m0"]["value"], hadec["m1"]["value"]
    return float((geo.gast(t_s, gast0_rad) + lon - ha) % (2 * np.pi)), float(dec)


def phase_centre_to_j2000(ra_rad, dec_rad, ant_itrf, epoch: datetime, gast0_rad: float, t_s):
    """The inverse of :func:`phase_centre_from_ms` for ref 'J2000', refined so that
    :func:`phase_centre_from_ms` gives ``(ra_rad, dec_rad)`` back to the last bit where
    casacore's arithmetic allows.

    casacore's HADEC -> J2000 and J2000 -> HADEC conversions are inverses only to ~1e-14 rad
    (measured 6.6e-15 in declination at dec -0.47: the aberration and nutation steps are
    applied and undone in a different order), which float32 fits downstream can amplify. The
    Jacobian of the round trip is the identity to ~1e-4, so subtracting the round trip's
    error from the J2000 direction converges in one or two steps (measured: exact after two).
    """
    dm = _casacore.measures()
    lon = _frame(dm, ant_itrf, epoch, t_s)
    ha = float(geo.gast(t_s, gast0_rad) + lon - ra_rad)
    j2000 = dm.measure(dm.direction("HADEC", f"{ha!r}rad", f"{float(dec_rad)!r}rad"), "J2000")
    ra, dec = float(j2000["m0"]["value"] % (2 * np.pi)), float(j2000["m1"]["value"])
    for _ in range(_REFINE_STEPS):
        back_ra, back_dec = phase_centre_from_ms(ra, dec, "J2000", ant_itrf, epoch, gast0_rad, t_s)
        d_ra = (back_ra - float(ra_rad) + np.pi) % (2 * np.pi) - np.pi
        d_dec = back_dec - float(dec_rad)
        if d_ra == 0.0 and d_dec == 0.0:
            break
        ra, dec = float((ra - d_ra) % (2 * np.pi)), dec - d_dec
    return ra, dec


def j2000_antenna_uvw(ant_itrf, times_s, epoch: datetime, ra_j2000, dec_j2000) -> np.ndarray:
    """Per-antenna (u, v, w) in m in the J2000 frame, as CASA defines UVW, computed by casacore
    for the phase centre (ra_j2000, dec_j2000) and antenna positions relative to the array
    centre: (n_time, n_ant, 3) float64. A baseline's MS UVW is ``uvw[a2] - uvw[a1]``."""
    dm = _casacore.measures()
    from casacore.quanta import quantity

    ant = np.asarray(ant_itrf, dtype=np.float64)
    rel = ant - ant.mean(axis=0)
    baselines = dm.baseline("itrf", *(quantity(rel[:, k].tolist(), "m") for k in range(3)))
    out = np.empty((len(times_s), ant.shape[0], 3))
    for k, t_s in enumerate(np.asarray(times_s, dtype=np.float64)):
        _frame(dm, ant, epoch, float(t_s))
        dm.do_frame(dm.direction("J2000", f"{float(ra_j2000)!r}rad", f"{float(dec_j2000)!r}rad"))
        out[k] = np.asarray(dm.to_uvw(baselines)["xyz"].get_value()).reshape(-1, 3)
    return out
