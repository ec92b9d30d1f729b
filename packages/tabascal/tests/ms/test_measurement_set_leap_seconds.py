"""casacore's leap seconds kept current from the IERS file that astropy-iers-data carries."""

import os
import subprocess
import sys
from datetime import date

import astropy_iers_data
import numpy as np
from casacore import tables

from tabascal.measurement_set import _leap_seconds

IERS_FILE = """\
#  Value of TAI-UTC in second valid beetween the initial value until
#  Updated through IERS Bulletin 81 issued in January 2031
#
#  File expires on 28 December 2031
#
#    MJD        Date        TAI-UTC (s)
#           day month year
#    ---    --------------   ------
#
    41317.0    1  1 1972       10
    57754.0    1  1 2017       37
    62502.0    1  1 2030       38
"""


def _casacore_tai_minus_utc(data_dir, mjd: float) -> tuple[float, str]:
    """TAI - UTC (s) at ``mjd`` by casacore with its data in ``data_dir``, and what casacore
    logged, in a fresh process (casacore reads its tables once per process)."""
    script = f"""
import os
import casacore.measures
os.environ["CASACORE_DATADIR"] = {str(data_dir)!r}
dm = casacore.measures.measures()
tai = dm.measure(dm.epoch("UTC", "{mjd!r}d"), "TAI")["m0"]["value"]
print(repr((tai - {mjd!r}) * 86400.0))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


def test_iers_leap_second_file_is_read():
    issued, mjd, tai_utc = _leap_seconds.read_iers_leap_seconds(
        astropy_iers_data.IERS_LEAP_SECOND_FILE
    )
    assert issued >= date(2024, 1, 1)
    assert mjd[0] == 41317.0 and tai_utc[0] == 10.0  # 1972 January 1, 10 s
    k = int(np.searchsorted(mjd, 57754.0))  # 2017 January 1, the 27th leap second
    assert mjd[k] == 57754.0 and tai_utc[k] == 37.0 and k == 27


def test_a_new_leap_second_reaches_casacore_and_silences_its_warning(tmp_path):
    import casacore

    (tmp_path / "iers.dat").write_text(IERS_FILE)
    issued, mjd, tai_utc = _leap_seconds.read_iers_leap_seconds(tmp_path / "iers.dat")
    assert issued == date(2031, 1, 1)
    data = tmp_path / "data"
    (data / "geodetic").mkdir(parents=True)
    bundled = casacore.__file__.rsplit("/", 1)[0] + "/data"
    for name in ("ephemerides", "geodetic/IERSeop2000", "geodetic/IERSpredict"):
        (data / name).symlink_to(f"{bundled}/{name}")
    _leap_seconds._write_current_table(
        tables,
        source=f"{bundled}/geodetic/TAI_UTC",
        target=data / "geodetic" / "TAI_UTC",
        issued=issued,
        mjd=mjd,
        tai_utc=tai_utc,
    )
    with tables.table(str(data / "geodetic" / "TAI_UTC"), ack=False) as t:
        assert t.getkeyword("VS_DATE") == "2031/01/01/00:00"
        assert t.getcol("MJD")[-1] == 62502.0 and t.getcol("dUTC")[-1] == 38.0
    before, _ = _casacore_tai_minus_utc(data, 62501.5)
    after, log = _casacore_tai_minus_utc(data, 62502.5)
    assert abs(before - 37.0) < 1e-6 and abs(after - 38.0) < 1e-6  # measured to 1e-9 s
    assert "SEVERE" not in log, log


def test_measurement_set_commands_use_current_leap_seconds(tmp_path):
    """What every MS command does: no SEVERE leap-second message from casacore, whatever its
    wheel's age, and TAI - UTC as the IERS says."""
    script = """
from tabascal.measurement_set import _casacore
dm = _casacore.measures()
tai = dm.measure(dm.epoch("UTC", "60000.0d"), "TAI")["m0"]["value"]
print(repr((tai - 60000.0) * 86400.0))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("AIPSPATH", "CASACORE_DATADIR")}
    env["TABASCAL_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert abs(float(done.stdout.split()[-1]) - 37.0) < 1e-6
    assert "SEVERE" not in done.stdout + done.stderr, done.stdout + done.stderr
