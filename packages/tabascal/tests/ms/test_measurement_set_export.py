"""export-ms: new TAB_* columns holding the results, every existing column left as it was."""

import numpy as np
import pytest
import zarr
from casacore import tables
from msbuild import build_ms, expected_cube

from tabascal.measurement_set import MsError, export_results, read_observation_ms

NAMES = ("sky_vis", "rfi_vis", "residual")
COLUMNS = ("TAB_SKY_DATA", "TAB_RFI_DATA", "TAB_RES_DATA")


def _results(path, obs, seed=0, shape=None):
    """A results.zarr as tabascal run writes it, with random values."""
    rng = np.random.default_rng(seed)
    shape = shape or obs.vis.shape
    group = zarr.open_group(str(path), mode="w")
    values = {}
    for name in NAMES:
        values[name] = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
        group.create_array(name, data=values[name])
    group.create_array("a1", data=np.asarray(obs.a1, np.int32))
    group.create_array("a2", data=np.asarray(obs.a2, np.int32))
    return values


def _snapshot(path):
    """Every column's bytes (or its read error) and the table keywords."""
    out = {}
    with tables.table(str(path), ack=False) as ms:
        for name in ms.colnames():
            try:
                value = ms.getcol(name)
                out[name] = (value.dtype.str, value.shape, value.tobytes())
            except RuntimeError as err:  # FLAG_CATEGORY holds no arrays
                out[name] = str(err)
        out["keywords"] = repr(ms.getkeywords())
    return out


@pytest.mark.parametrize("tiled", [False, True])
def test_export_adds_columns_and_leaves_existing_ones_unchanged(tmp_path, tiled):
    path = tmp_path / "a.ms"
    w = build_ms(path, corr=("XX", "XY", "YX", "YY"), n_spw=2, n_time=3, tiled=tiled)
    obs = read_observation_ms(path, spw=1)
    values = _results(tmp_path / "results.zarr", obs)
    before = _snapshot(path)
    report = export_results(tmp_path / "results.zarr", path, spw=1)
    assert report.columns == COLUMNS and report.correlations == "I = (XX + YY) / 2"
    after = _snapshot(path)
    assert {k: after[k] for k in before if k != "keywords"} == {
        k: v for k, v in before.items() if k != "keywords"
    }
    assert after["keywords"] == before["keywords"]
    in_spw = w.ddid == 1
    with tables.table(str(path), ack=False) as ms:
        for column, name in zip(COLUMNS, NAMES, strict=True):
            got = ms.getcol(column)
            assert got.shape == w.data.shape and got.dtype == np.complex64
            for hand in (0, 3):  # both parallel hands hold the fitted I
                cube = expected_cube(w, got[..., hand], in_spw, 3)
                np.testing.assert_array_equal(cube, values[name])
            assert not np.any(got[:, :, 1:3]) and not np.any(got[~in_spw])
            assert ms.getcoldesc(column)["comment"].startswith("tabascal")
    back = read_observation_ms(path, column="TAB_RES_DATA", spw=1)
    np.testing.assert_array_equal(back.vis, values["residual"])


def test_existing_columns_are_refused_unless_overwritten(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=2)
    obs = read_observation_ms(path, correlation="XX")
    _results(tmp_path / "r.zarr", obs, seed=0)
    export_results(tmp_path / "r.zarr", path, correlation="XX")
    first = _snapshot(path)
    new = _results(tmp_path / "r.zarr", obs, seed=1)
    with pytest.raises(MsError, match="already has column TAB_SKY_DATA; add --overwrite-columns"):
        export_results(tmp_path / "r.zarr", path, correlation="XX")
    assert _snapshot(path) == first
    export_results(tmp_path / "r.zarr", path, correlation="XX", overwrite_columns=True)
    after = _snapshot(path)
    assert {k: v for k, v in after.items() if not k.startswith("TAB_")} == {
        k: v for k, v in first.items() if not k.startswith("TAB_")
    }
    back = read_observation_ms(path, column="TAB_SKY_DATA", correlation="XX")
    np.testing.assert_array_equal(back.vis, new["sky_vis"])
    with tables.table(str(path), ack=False) as ms:
        assert not np.any(ms.getcol("TAB_SKY_DATA")[..., 1])  # YY untouched: fitted XX only


def test_descending_channels_are_written_in_ms_order(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, descending=True, n_time=2)
    obs = read_observation_ms(path, correlation="YY")
    values = _results(tmp_path / "r.zarr", obs)
    export_results(tmp_path / "r.zarr", path, correlation="YY")
    with tables.table(str(path), ack=False) as ms:
        got = expected_cube(w, ms.getcol("TAB_RFI_DATA")[..., 1], np.ones(w.time.size, bool), 2)
    np.testing.assert_array_equal(got, values["rfi_vis"][:, ::-1])


def test_results_that_do_not_match_are_refused(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=2)
    obs = read_observation_ms(path)
    _results(tmp_path / "r.zarr", obs, shape=(10, 3, 3))
    with pytest.raises(MsError, match=r"holds .* = \(10, 3, 3\), the selection of .* \(10, 3, 2\)"):
        export_results(tmp_path / "r.zarr", path)
    _results(tmp_path / "r.zarr", obs)
    zarr.open_group(str(tmp_path / "r.zarr"), mode="r+")["a2"][0] = 4
    with pytest.raises(MsError, match=r"baselines of .* are not those of"):
        export_results(tmp_path / "r.zarr", path)
    zarr.open_group(str(tmp_path / "empty.zarr"), mode="w")
    with pytest.raises(MsError, match=r"no array\(s\) sky_vis, rfi_vis, residual, a1, a2"):
        export_results(tmp_path / "empty.zarr", path)
    with tables.table(str(path), ack=False) as ms:
        assert not any(c.startswith("TAB_") for c in ms.colnames())
