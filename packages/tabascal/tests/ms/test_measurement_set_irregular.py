"""Measurement Sets tabascal refuses, each with a message naming what is irregular."""

import numpy as np
import pytest
from casacore import tables
from msbuild import build_ms

from tabascal.measurement_set import MsError, read_observation_ms


def _edit(path, edit):
    with tables.table(str(path), readonly=False, ack=False) as ms:
        edit(ms)


def _sub(path, name, edit):
    with tables.table(f"{path}/{name}", readonly=False, ack=False) as sub:
        edit(sub)


def test_several_spectral_windows_or_fields_need_a_choice(tmp_path):
    build_ms(tmp_path / "a.ms", n_spw=2)
    with pytest.raises(MsError, match=r"2 spectral windows \(0, 1\); choose one with --spw"):
        read_observation_ms(tmp_path / "a.ms")
    with pytest.raises(MsError, match=r"spectral window 4 has no data rows \(.*: 0, 1\)"):
        read_observation_ms(tmp_path / "a.ms", spw=4)
    build_ms(tmp_path / "b.ms", n_field=2)
    with pytest.raises(MsError, match=r"2 fields \(0, 1\); choose one with --field"):
        read_observation_ms(tmp_path / "b.ms")


def test_missing_baseline_is_named(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=4)
    _edit(path, lambda ms: ms.removerows([20 + 6]))  # integration 2, baseline (1, 4)
    with pytest.raises(MsError, match=r"integration 2 .* holds 9 baselines, the first 10: "
                                      r"missing \[\(1, 4\)\], extra \[\]"):  # fmt: skip
        read_observation_ms(path)


def test_repeated_baseline_is_named(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=3)
    _edit(path, lambda ms: ms.putcell("ANTENNA2", 11, 1))  # (0, 2) -> (0, 1) again
    with pytest.raises(MsError, match=r"integration 1 .* holds other baselines than the first"):
        read_observation_ms(path)
    build_ms(tmp_path / "b.ms", n_time=3)
    _edit(tmp_path / "b.ms", lambda ms: ms.putcell("ANTENNA2", 1, 1))
    with pytest.raises(MsError, match=r"baseline \(0, 1\) appears twice in integration 0"):
        read_observation_ms(tmp_path / "b.ms")


def test_gap_and_unequal_intervals_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=4)
    _edit(path, lambda ms: ms.removerows(np.arange(20, 30)))  # integration 2 removed
    with pytest.raises(MsError, match=r"integration 2 starts 4 s after integration 1, expected "
                                      r"2 s \(INTERVAL\)"):  # fmt: skip
        read_observation_ms(path)
    build_ms(tmp_path / "b.ms", n_time=4)
    _edit(tmp_path / "b.ms", lambda ms: ms.putcell("INTERVAL", 35, 3.0))
    with pytest.raises(MsError, match="INTERVAL varies from 2 to 3 s"):
        read_observation_ms(tmp_path / "b.ms")


def test_rows_out_of_time_order_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=3)
    time = w.time.copy()
    time[10:20], time[20:30] = w.time[20:30], w.time[10:20]
    _edit(path, lambda ms: ms.putcol("TIME", time))
    with pytest.raises(MsError, match=r"rows are not in time order \(row 20 .*orderby TIME"):
        read_observation_ms(path)


def test_uneven_channels_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_chan=4)
    freq = w.freqs[0].copy()
    freq[3] += 1e4
    _sub(path, "SPECTRAL_WINDOW", lambda t: t.putcell("CHAN_FREQ", 0, freq))
    with pytest.raises(MsError, match="not evenly spaced by their width 200000 Hz"):
        read_observation_ms(path)
    width = np.full(4, w.chan_width)
    width[0] *= 2
    _sub(path, "SPECTRAL_WINDOW", lambda t: t.putcell("CHAN_WIDTH", 0, width))
    with pytest.raises(MsError, match="channel widths of spectral window 0 vary"):
        read_observation_ms(path)


def test_missing_column_moving_phase_centre_and_bad_paths(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path)
    with pytest.raises(MsError, match=r"no column 'CORRECTED_DATA' \(data columns: \['DATA'\]\)"):
        read_observation_ms(path, column="CORRECTED_DATA")

    def azel(t):
        info = t.getcolkeyword("PHASE_DIR", "MEASINFO")
        t.putcolkeyword("PHASE_DIR", "MEASINFO", info | {"Ref": "AZEL"})

    _sub(path, "FIELD", azel)
    with pytest.raises(MsError, match="AZEL frame, which turns with the Earth"):
        read_observation_ms(path)
    with pytest.raises(MsError, match="does not exist"):
        read_observation_ms(tmp_path / "none.ms")
    (tmp_path / "empty.ms").mkdir()
    with pytest.raises(MsError, match=r"is not a Measurement Set \(no table.dat\)"):
        read_observation_ms(tmp_path / "empty.ms")
