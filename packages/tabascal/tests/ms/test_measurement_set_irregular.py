"""Measurement Sets tabascal refuses, each with a message naming what is irregular (and the
rows, where rows are at fault). What it reads despite quirks: test_measurement_set_quirks."""

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


def test_repeated_baseline_is_named_with_its_rows(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=3)
    _edit(path, lambda ms: ms.putcell("ANTENNA2", 11, 1))  # (0, 2) -> (0, 1) again
    with pytest.raises(MsError, match=r"baseline \(0, 1\) appears twice in integration 1 "
                                      r"\(rows 10 and 11; 1 such pairs\)"):  # fmt: skip
        read_observation_ms(path)
    build_ms(tmp_path / "b.ms", n_time=3)
    _edit(tmp_path / "b.ms", lambda ms: ms.putcell("ANTENNA2", 1, 1))
    with pytest.raises(MsError, match=r"baseline \(0, 1\) appears twice in integration 0"):
        read_observation_ms(tmp_path / "b.ms")


def test_unequal_intervals_are_refused_naming_the_rows(tmp_path):
    build_ms(tmp_path / "b.ms", n_time=4)
    _edit(tmp_path / "b.ms", lambda ms: ms.putcell("INTERVAL", 35, 3.0))
    with pytest.raises(MsError, match=r"INTERVAL varies from 2 to 3 s \(median 2 s; rows 35 "
                                      r"\(3 s\)\)"):  # fmt: skip
        read_observation_ms(tmp_path / "b.ms")


def test_antenna_not_in_the_antenna_table_is_refused_naming_the_rows(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=2, n_ant=5)
    _edit(path, lambda ms: ms.putcell("ANTENNA2", 15, 7))  # (1, 3) in integration 1
    with pytest.raises(MsError, match=r"1 rows have a baseline of an antenna not in the ANTENNA "
                                      r"table \(ids 0 to 4\): rows 15 \(1, 7\)"):  # fmt: skip
        read_observation_ms(path)


def test_uneven_channels_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_chan=4)
    freq = w.freqs[0].copy()
    freq[3] += 1e4
    _sub(path, "SPECTRAL_WINDOW", lambda t: t.putcell("CHAN_FREQ", 0, freq))
    with pytest.raises(MsError, match=r"not evenly spaced, nor on a .* channels 2 and 3 \(210 "):
        read_observation_ms(path)
    width = np.full(4, w.chan_width)
    width[0] *= 2
    _sub(path, "SPECTRAL_WINDOW", lambda t: t.putcell("CHAN_WIDTH", 0, width))
    message = r"channel widths of spectral window 0 vary \(200000 to 400000 Hz; median "
    with pytest.raises(MsError, match=message + r"200000 Hz, channels 0 \(400000 Hz\)\)"):
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


def test_grid_mostly_of_filled_integrations_is_refused_naming_the_gap(tmp_path):
    """One stray TIME 1000 s after the rest would make a grid of 504 integrations, 499 of
    them filled: refused before the grid is made."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=4)
    _edit(path, lambda ms: ms.putcell("TIME", 39, w.time[39] + 1000.0))
    with pytest.raises(MsError, match=r"the rows span 504 integrations of 2 s but only 5 hold "
                                      r"any; the largest gap is 499 integrations, before rows "
                                      r"39 \(TIME 5225681807.000\)"):  # fmt: skip
        read_observation_ms(path)
