"""Measurement Sets as telescopes write them: rows in any order, jittered timestamps, missing
baselines and integrations, one hand. Each is imported into a store, and the store is
checked cell by cell against what build_ms wrote (msbuild.expected_cells)."""

import logging
from datetime import datetime

import numpy as np
import pytest
import zarr
from casacore import tables
from msbuild import build_ms, expected_cells, rewrite_rows

from tabascal.cli import main
from tabascal.measurement_set import (
    MsError,
    export_results,
    frames,
    import_measurement_set,
    read_observation_ms,
)
from tabascal.store import read_observation


def _import(ms, **options):
    """The store import_measurement_set writes from ``ms``, read back whole."""
    store = ms.with_suffix(".zarr")
    import_measurement_set(ms, store, **options)
    return read_observation(store)


def _ms_baselines(obs):
    """(a1, a2) of ``obs`` as MS antenna ids."""
    ids = np.asarray(obs.metadata["measurement_set"]["antenna_ids"])
    return ids[obs.a1], ids[obs.a2]


def _times_s(obs, time_mjd_s):
    """TIME (MJD seconds) relative to the epoch of ``obs``, as the reader computes it."""
    return time_mjd_s - frames.mjd_seconds(datetime.fromisoformat(obs.epoch_utc))


def _assert_cells(obs, w, source, corr=0):
    vis, flags = expected_cells(w, source, *_ms_baselines(obs), obs.n_time, corr)
    np.testing.assert_array_equal(obs.vis, vis)
    np.testing.assert_array_equal(obs.flags, flags)


def _edit(path, edit):
    with tables.table(str(path), readonly=False, ack=False) as ms:
        edit(ms)


def test_rows_in_any_order_read_as_the_sorted_rows(tmp_path):
    """A shuffled MS gives the store of the same MS in (time, baseline) order, cell by cell;
    the baselines come in the order they first appear in time order."""
    w = build_ms(tmp_path / "sorted.ms", n_time=4)
    build_ms(tmp_path / "a.ms", n_time=4)
    source = np.random.default_rng(2).permutation(w.time.size)
    rewrite_rows(tmp_path / "a.ms", source)
    obs = _import(tmp_path / "a.ms", correlation="XX")
    ref = _import(tmp_path / "sorted.ms", correlation="XX")
    first = [r for r in source if w.t_index[r] == 0]
    a1, a2 = _ms_baselines(obs)
    np.testing.assert_array_equal(a1, w.ant1[first])
    np.testing.assert_array_equal(a2, w.ant2[first])
    _assert_cells(obs, w, source)
    np.testing.assert_array_equal(obs.times_s, ref.times_s)
    assert obs.epoch_utc == ref.epoch_utc and obs.int_time == ref.int_time
    order = np.lexsort((ref.a2, ref.a1))[np.lexsort((obs.a2, obs.a1)).argsort()]
    np.testing.assert_array_equal(obs.noise, ref.noise[order])
    info = obs.metadata["measurement_set"]
    assert not info["rows_in_time_order"] and info["rows_filled"] == 0
    assert ref.metadata["measurement_set"]["rows_in_time_order"]


def test_jittered_times_within_tolerance_are_placed_on_the_grid(tmp_path):
    """Integrations jittered by up to 0.09 INTERVAL, and the rows of one integration by
    different amounts, keep their cells; an integration's time is its rows' median TIME."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=5)
    jitter = np.array([0.1, -0.18, 0.16, 0.0, -0.06])[w.t_index]  # s, INTERVAL 2 s
    jitter[30:40] = np.linspace(-0.15, 0.12, 10)  # integration 3: each row its own
    time = w.time + jitter
    _edit(path, lambda ms: ms.putcol("TIME", time))
    obs = _import(path, correlation="XX")
    _assert_cells(obs, w, np.arange(w.time.size))
    np.testing.assert_array_equal(_ms_baselines(obs)[0], w.ant1[:10])
    median = np.array([np.median(time[w.t_index == k]) for k in range(5)])
    np.testing.assert_array_equal(obs.times_s, _times_s(obs, median))
    assert obs.int_time == 2.0
    info = obs.metadata["measurement_set"]
    assert info["rows_in_time_order"] and info["time_tolerance"] == 0.1
    assert 0.08 < info["max_time_offset"] <= 0.1


def test_jitter_beyond_the_tolerance_is_refused_naming_the_rows(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=4)
    time = w.time + np.where(w.t_index == 2, 0.6, 0.0)  # 0.3 INTERVAL late
    _edit(path, lambda ms: ms.putcol("TIME", time))
    with pytest.raises(MsError, match=r"10 rows lie more than 0.1 INTERVAL from the nearest "
                                      r"integration .* rows 20 \(TIME 5225680805.600, \+0.300\), "
                                      r"21 .*--time-tolerance"):  # fmt: skip
        read_observation_ms(path)
    obs = _import(path, correlation="XX", time_tolerance=0.35)
    _assert_cells(obs, w, np.arange(w.time.size))
    np.testing.assert_array_equal(obs.times_s, _times_s(obs, np.unique(time)))
    for tolerance in (0.5, 0.0):
        with pytest.raises(MsError, match=rf"time tolerance {tolerance:g} is outside \[0.001"):
            read_observation_ms(path, time_tolerance=tolerance)


def test_missing_rows_are_filled_flagged(tmp_path):
    """Baselines missing from some integrations: their cells are vis 0, flagged; a baseline
    first seen after the first integration comes after those of the first."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=4, sigma="varying")
    source = np.setdiff1d(np.arange(w.time.size), [0, 26, 27])  # (0, 1) at 0; (1, 4), (2, 3) at 2
    rewrite_rows(path, source)
    obs = _import(path, correlation="XX")
    a1, a2 = _ms_baselines(obs)
    np.testing.assert_array_equal(a1, np.r_[w.ant1[1:10], 0])
    np.testing.assert_array_equal(a2, np.r_[w.ant2[1:10], 1])
    _assert_cells(obs, w, source)
    assert obs.flags[-1, :, 0].all() and not obs.vis[-1, :, 0].any()
    np.testing.assert_array_equal(obs.times_s, (np.arange(4) + 0.5) * 2.0)
    sigma = {(int(w.ant1[r]), int(w.ant2[r])): [] for r in source}
    for r in source:  # the quadratic mean over the rows there, not FLAG_ROW-flagged
        if not w.flag_row[r]:
            sigma[(int(w.ant1[r]), int(w.ant2[r]))].append(float(w.sigma[r, 0]))
    expected = [np.sqrt(np.mean(np.square(sigma[(p, q)]))) for p, q in zip(a1, a2, strict=True)]
    np.testing.assert_allclose(obs.noise, expected, rtol=1e-15)
    info = obs.metadata["measurement_set"]
    assert (info["rows_filled"], info["integrations_filled"]) == (3, 0)


def test_missing_integration_is_filled_flagged(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=5)
    source = np.flatnonzero(w.t_index != 2)
    rewrite_rows(path, source)
    obs = _import(path, correlation="XX")
    assert obs.n_time == 5 and obs.flags[:, :, 2].all() and not obs.vis[:, :, 2].any()
    _assert_cells(obs, w, source)
    np.testing.assert_array_equal(obs.times_s, (np.arange(5) + 0.5) * 2.0)  # 5 s: the grid's
    info = obs.metadata["measurement_set"]
    assert (info["rows_filled"], info["integrations_filled"]) == (10, 1)


@pytest.mark.parametrize("hand", ["XX", "YY"])
def test_one_hand_is_read_for_stokes_i(tmp_path, caplog, hand):
    w = build_ms(tmp_path / "a.ms", corr=(hand,), n_time=3)
    with caplog.at_level(logging.WARNING):
        obs = _import(tmp_path / "a.ms")
    assert f"holds one correlation, {hand}: reading it for the Stokes I asked" in caplog.text
    assert f"--correlation {hand}" in caplog.text
    _assert_cells(obs, w, np.arange(w.time.size))
    np.testing.assert_array_equal(obs.noise, w.sigma[:10, 0].astype(np.float64))
    info = obs.metadata["measurement_set"]
    assert (info["correlation"], info["correlation_in_place_of"]) == (hand, "I")


@pytest.mark.parametrize(
    "corr, hint",
    [(("XX", "XY"), "choose XX with --correlation"),
     (("XY", "YX"), r"none of them can be fitted \(--correlation chooses among I, XX")],
)  # fmt: skip
def test_stokes_i_refusal_names_the_correlation_option(tmp_path, corr, hint):
    build_ms(tmp_path / "a.ms", corr=corr, n_time=2)
    with pytest.raises(
        MsError, match=rf"Stokes I needs .* the data hold {', '.join(corr)}: {hint}"
    ):
        read_observation_ms(tmp_path / "a.ms")


def test_import_ms_reports_what_it_filled(tmp_path, capsys):
    """Every quirk at once through the command: one hand, shuffled rows, jitter, a missing
    row and a missing integration; the summary says what was done and the store holds it."""
    path = tmp_path / "a.ms"
    w = build_ms(path, corr=("XX",), n_time=5)
    keep = np.flatnonzero((w.t_index != 3) & (np.arange(w.time.size) != 14))
    source = np.random.default_rng(4).permutation(keep)
    time = w.time + np.array([0.0, 0.05, -0.1, 0.0, 0.25])[w.t_index]
    _edit(path, lambda ms: ms.putcol("TIME", time))
    rewrite_rows(path, source)
    args = ["import-ms", str(path), "-o", str(tmp_path / "a.zarr"), "--time-tolerance", "0.15"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Stokes I asked: the data hold one correlation, XX, read in its place" in out
    assert "rows not in time order: read sorted by time, then baseline" in out
    assert "timestamps up to 0.125 INTERVAL off the grid (tolerance 0.15)" in out
    assert "11 (integration, baseline) rows missing from the MS (1 whole integrations): " in out
    assert "filled as flagged, 33 cells of vis 0" in out
    obs = read_observation(tmp_path / "a.zarr")
    _assert_cells(obs, w, source)
    median = np.array([np.median(time[source][w.t_index[source] == k]) for k in (0, 1, 2, 4)])
    np.testing.assert_array_equal(obs.times_s[[0, 1, 2, 4]], _times_s(obs, median))
    assert obs.times_s[3] == pytest.approx(7.0, abs=1e-6)
    build_ms(tmp_path / "regular.ms", n_time=3)  # XX and YY: none of those lines
    assert main(["import-ms", str(tmp_path / "regular.ms"), "-o", str(tmp_path / "r.zarr")]) == 0
    out = capsys.readouterr().out
    assert "correlation I = (XX + YY) / 2" in out
    assert not any(s in out for s in ("in its place", "time order", "off the grid", "missing"))


def test_export_skips_cells_without_rows(tmp_path):
    """export-ms writes each fitted value into its own row and nothing for filled cells (a
    -1 row index must not write into the table's last row)."""
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=3)
    source = np.arange(w.time.size - 1)  # the last cell of the grid has no row
    rewrite_rows(path, source)
    obs = read_observation_ms(path, correlation="XX")
    fitted = (np.arange(obs.vis.size).reshape(obs.vis.shape) + 1j).astype(np.complex64)
    results = zarr.open_group(str(tmp_path / "results.zarr"), mode="w")
    for name in ("sky_vis", "rfi_vis", "residual"):
        results.create_array(name, data=fitted)
    results.create_array("a1", data=obs.a1)
    results.create_array("a2", data=obs.a2)
    report = export_results(tmp_path / "results.zarr", path, correlation="XX")
    assert report.n_rows == w.time.size - 1
    back = read_observation_ms(path, column="TAB_SKY_DATA", correlation="XX")
    held = ~np.all(obs.flags & (obs.vis == 0), axis=1)  # (n_bl, n_time): cells with a row
    assert held.sum() == w.time.size - 1
    np.testing.assert_array_equal(
        back.vis.transpose(0, 2, 1)[held], fitted.transpose(0, 2, 1)[held]
    )
    assert not back.vis.transpose(0, 2, 1)[~held].any()
