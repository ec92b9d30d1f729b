"""export-ms --per-satellite: a TAB_RFI_SAT<k> column per satellite holding its fitted RFI,
every other column as an export without it writes it, and a refusal without the array."""

import numpy as np
import pytest
import zarr
from casacore import tables
from msbuild import build_ms, expected_cube
from test_measurement_set_export import _snapshot
from test_measurement_set_export_products import _fit

from tabascal.cli import main
from tabascal.measurement_set import MsError, export_results

NAMES = ("GPS-01", "GALILEO-02", "STARLINK-3")


def _add_satellites(results, obs, seed=0):
    """rfi_vis_by_satellite as tabascal run writes it, with random cubes; returns them."""
    rng = np.random.default_rng(seed)
    shape = (len(NAMES), *obs.vis.shape)
    cubes = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    group = zarr.open_group(str(results), mode="r+")
    if "rfi_vis_by_satellite" in group:
        del group["rfi_vis_by_satellite"]
    array = group.create_array("rfi_vis_by_satellite", data=cubes)
    array.attrs["satellites"] = list(NAMES)
    return cubes


def _named(value, path):
    """A snapshot entry with the MS's path replaced by a placeholder."""
    return value.replace(str(path), "MS") if isinstance(value, str) else value


def test_each_satellite_column_holds_its_cube_and_every_other_column_is_unchanged(tmp_path, capsys):
    plain, path = tmp_path / "plain.ms", tmp_path / "a.ms"
    for ms in (plain, path):
        w = build_ms(ms, corr=("XX", "XY", "YX", "YY"), n_spw=2, n_time=3, tiled=True)
    store, results, _, obs = _fit(tmp_path, path, spw=1)
    cubes = _add_satellites(results, obs)
    before = _snapshot(path)
    args = ["export-ms", str(results), "--data", str(store)]
    assert main([*args, "--ms", str(plain)]) == 0
    capsys.readouterr()
    assert main([*args, "--ms", str(path), "--per-satellite"]) == 0
    out = capsys.readouterr().out
    columns = [f"TAB_RFI_SAT{k}" for k in range(len(NAMES))]
    assert f"{', '.join(columns)}: each satellite's fitted RFI alone" in out
    # Every column the MS had (and its keywords) byte for byte as they were, and every column
    # an export without --per-satellite writes byte for byte as that export wrote it (the
    # table's path aside, which its keywords and one read error name).
    after = _snapshot(path)
    assert {k: after[k] for k in before} == before
    without = {k: _named(v, plain) for k, v in _snapshot(plain).items()}
    with_satellites = {k: _named(v, path) for k, v in after.items()}
    assert set(with_satellites) - set(without) == set(columns)
    assert {k: with_satellites[k] for k in without} == without
    in_spw = w.ddid == 1
    with tables.table(str(path), ack=False) as ms:
        for k, column in enumerate(columns):
            got = ms.getcol(column)
            assert got.shape == w.data.shape and got.dtype == np.complex64
            for hand in (0, 3):  # both parallel hands hold the fitted I
                np.testing.assert_array_equal(expected_cube(w, got[..., hand], in_spw, 3), cubes[k])
            assert not np.any(got[:, :, 1:3]) and not np.any(got[~in_spw])
            comment = ms.getcoldesc(column)["comment"]
            assert comment == f"tabascal: fitted RFI visibilities of satellite {k}, {NAMES[k]}"
            assert ms.getcoldesc(column)["valueType"] == ms.getcoldesc("DATA")["valueType"]


def test_per_satellite_is_refused_without_the_array_and_nothing_is_written(tmp_path, capsys):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=2)
    store, results, _, _ = _fit(tmp_path, path)
    before = _snapshot(path)
    message = "holds no rfi_vis_by_satellite, which --per-satellite writes: run tabascal run "
    message += "with output.per_satellite: always"
    with pytest.raises(MsError, match=message):
        export_results(results, path, store=store, per_satellite=True)
    assert main(["export-ms", str(results), "--ms", str(path), "--per-satellite"]) == 2
    assert message in capsys.readouterr().err
    assert _snapshot(path) == before


def test_existing_satellite_columns_are_replaced_only_with_overwrite_columns(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=2)
    store, results, _, obs = _fit(tmp_path, path, correlation="XX")
    _add_satellites(results, obs, seed=0)
    export_results(results, path, store=store, per_satellite=True)
    with tables.table(str(path), readonly=False, ack=False) as ms:
        ms.removecols(["TAB_SKY_DATA", "TAB_RFI_DATA", "TAB_RES_DATA"])
    first = _snapshot(path)
    new = _add_satellites(results, obs, seed=1)
    with pytest.raises(MsError, match="already has column TAB_RFI_SAT0; add --overwrite-columns"):
        export_results(results, path, store=store, per_satellite=True)
    assert _snapshot(path) == first
    report = export_results(results, path, store=store, per_satellite=True, overwrite_columns=True)
    assert {"TAB_RFI_SAT0", "TAB_RFI_SAT1", "TAB_RFI_SAT2"} <= set(report.replaced)
    after = _snapshot(path)
    assert {k: v for k, v in after.items() if not k.startswith("TAB_")} == {
        k: v for k, v in first.items() if not k.startswith("TAB_")
    }
    every_row = np.ones(w.time.size, bool)
    with tables.table(str(path), ack=False) as ms:
        for k in range(len(NAMES)):
            got = ms.getcol(f"TAB_RFI_SAT{k}")
            np.testing.assert_array_equal(expected_cube(w, got[..., 0], every_row, 2), new[k])
            assert not np.any(got[..., 1])  # YY: the fit read XX alone
