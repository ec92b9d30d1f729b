"""A current leap-second table for casacore's measures.

casacore converts UTC to the other time scales with its ``geodetic/TAI_UTC`` table and, at the
first such conversion in a process, logs ``SEVERE MeasTable::dUTC ... Leap second table TAI_UTC
seems out-of-date`` when the table's ``VS_DATE`` is more than 180 days old (today's date, not
the observation's, decides). python-casacore's wheels carry the table of their build date, so
every Measurement Set command warned half a year after each release, though no leap second has
been added since 2017.

``astropy-iers-data`` (a dependency of the ``ms`` extra, released weekly by the astropy project
from the IERS's own files) carries the IERS leap-second file, which says through which IERS
Bulletin C it is complete. When that is newer than casacore's table, a copy of casacore's data
directory is made in tabascal's cache (links to every file but the table), the table is checked
against the IERS file, rows for any new leap second are added, and ``VS_DATE`` is set to the
bulletin's date; ``CASACORE_DATADIR`` then points there. A user who configured casacore's data
themselves (``AIPSPATH`` set before python-casacore was imported) is left alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTHS = {name: k + 1 for k, name in enumerate(_MONTH_NAMES)}
_BULLETIN = re.compile(r"Bulletin (?:C )?(\d+) issued in (\w+) (\d{4})")
# TAI - UTC is an integer number of seconds from this MJD on (1972 January 1): casacore's rows
# from there have Offset 41317 and Multiplier 0.
_INTEGER_LEAP_SECONDS_MJD = 41317.0


def cache_dir() -> Path:
    """tabascal's cache folder: $TABASCAL_CACHE_DIR, else $XDG_CACHE_HOME/tabascal, else
    ~/.cache/tabascal."""
    if os.environ.get("TABASCAL_CACHE_DIR"):
        return Path(os.environ["TABASCAL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tabascal"


def read_iers_leap_seconds(path: Path) -> tuple[date, np.ndarray, np.ndarray]:
    """The IERS leap-second file (Leap_Second.dat): the issue date of the Bulletin C it is
    complete through, and the MJDs (days) from which each TAI - UTC value (s) holds."""
    text = Path(path).read_text()
    found = _BULLETIN.search(text)
    if found is None or found.group(2) not in _MONTHS:
        raise ValueError(f"{path}: no 'Updated through IERS Bulletin N issued in MONTH YEAR' line")
    issued = date(int(found.group(3)), _MONTHS[found.group(2)], 1)
    rows = np.array(
        [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")],
        dtype=float,
    )
    return issued, rows[:, 0], rows[:, 4]


def _table_date(tables, path: Path) -> date:
    with tables.table(str(path), ack=False) as t:
        year, month, day = (int(x) for x in t.getkeyword("VS_DATE").split("/")[:3])
    return date(year, month, day)


def _write_current_table(tables, source: Path, target: Path, issued, mjd, tai_utc) -> None:
    """Copy casacore's TAI_UTC table from ``source`` to ``target``, check it against the IERS
    values, add the leap seconds it lacks and date it by the bulletin."""
    with tables.table(str(source), ack=False) as t:
        t.copy(str(target), deep=True).close()
    with tables.table(str(target), readonly=False, ack=False) as t:
        have = dict(zip(t.getcol("MJD"), t.getcol("dUTC"), strict=True))
        for day, value in zip(mjd, tai_utc, strict=True):
            if day < _INTEGER_LEAP_SECONDS_MJD:
                continue
            if day in have:
                if have[day] != value:
                    raise ValueError(
                        f"casacore's {source} gives TAI - UTC {have[day]} s from MJD {day}, the "
                        f"IERS file {value} s"
                    )
                continue
            row = t.nrows()
            t.addrows(1)
            t.putcell("MJD", row, day)
            t.putcell("dUTC", row, value)
            t.putcell("Offset", row, _INTEGER_LEAP_SECONDS_MJD)
            t.putcell("Multiplier", row, 0.0)
        stamp = issued.strftime("%Y/%m/%d/00:00")
        t.putkeyword("VS_DATE", stamp)
        t.putkeyword("VS_CREATE", stamp)


def use_current_leap_seconds() -> Path | None:
    """Point casacore at a data directory with a current TAI_UTC table where the one it
    carries is older than the IERS file's; returns that directory, or None where nothing was
    changed (the user's own casacore data, no newer IERS file, or astropy-iers-data missing).
    Call after importing casacore and before its first time conversion."""
    import casacore
    from casacore import tables

    default = Path(casacore.__file__).parent
    if os.environ.get("AIPSPATH") != str(default):
        return None  # the user's own casacore configuration
    try:
        import astropy_iers_data
    except ImportError:
        return None
    data = default / "data"
    issued, mjd, tai_utc = read_iers_leap_seconds(astropy_iers_data.IERS_LEAP_SECOND_FILE)
    if _table_date(tables, data / "geodetic" / "TAI_UTC") >= issued:
        return None
    target = cache_dir() / f"casacore-data-{casacore.__version__}-leap-{issued:%Y-%m}"
    if not (target / "geodetic" / "TAI_UTC").is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            for entry in data.iterdir():
                if entry.name != "geodetic":
                    (build / entry.name).symlink_to(entry)
            (build / "geodetic").mkdir()
            for entry in (data / "geodetic").iterdir():
                if entry.name != "TAI_UTC":
                    (build / "geodetic" / entry.name).symlink_to(entry)
            _write_current_table(
                tables,
                source=data / "geodetic" / "TAI_UTC",
                target=build / "geodetic" / "TAI_UTC",
                issued=issued,
                mjd=mjd,
                tai_utc=tai_utc,
            )
            build.rename(target)
        except OSError:
            # Another process finished the same folder first; use theirs.
            if not (target / "geodetic" / "TAI_UTC").is_dir():
                raise
        finally:
            shutil.rmtree(build, ignore_errors=True)
    os.environ["CASACORE_DATADIR"] = str(target)
    logger.info("casacore's leap seconds from the IERS file of %s: %s", issued, target)
    return target
