"""export-ms products a pipeline takes: the cleaned data, weights, residual flags; each checked
cell by cell against numpy, and every column not named left as it was, byte for byte."""

import numpy as np
import pytest
import zarr
from casacore import tables
from msbuild import add_cell_column, build_ms, expected_cube
from test_measurement_set_export import _snapshot

from tabascal.cli import main
from tabascal.measurement_set import MsError, export_results, import_measurement_set
from tabascal.measurement_set import columns as ms_columns
from tabascal.measurement_set.correlations import correlation_plan
from tabascal.measurement_set.noise import noise_from_column
from tabascal.store import read_observation

CUBES = ("sky_vis", "rfi_vis", "model_vis", "residual")
# float32 rounding of the columns, measured against numpy's float64: the cleaned data 5.4e-8,
# the weights 4.1e-8, the noise read back from them 2.1e-8
CLEANED_RTOL = 5e-6
WEIGHT_RTOL = 4e-6
NOISE_RTOL = 2e-6


def _fit(tmp_path, ms, seed=0, **import_options):
    """Import ``ms`` into a store and write a results.zarr of its shape with random cubes and
    gains, as tabascal run writes it; returns (store, results, the values, the observation)."""
    store, results = tmp_path / "obs.zarr", tmp_path / "results.zarr"
    import_measurement_set(ms, store, overwrite=True, **import_options)
    obs = read_observation(store)
    rng = np.random.default_rng(seed)
    shape = obs.vis.shape
    noise = np.broadcast_to(obs.noise, shape[:1])[:, None, None]
    values = {}
    for name in CUBES:  # the residual about the noise, so that a threshold flags some
        scale = noise if name == "residual" else 1.0
        draw = scale * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
        values[name] = draw.astype(np.complex64)
    gain_shape = (obs.n_ant, *shape[1:])
    amp = 1 + 0.1 * rng.normal(size=gain_shape)
    values["gains"] = (amp * np.exp(0.3j * rng.normal(size=gain_shape))).astype(np.complex64)
    group = zarr.open_group(str(results), mode="w")
    for name, value in values.items():
        group.create_array(name, data=value)
    group.create_array("flags", data=obs.flags)
    group.create_array("a1", data=np.asarray(obs.a1, np.int32))
    group.create_array("a2", data=np.asarray(obs.a2, np.int32))
    group.create_array("freqs_hz", data=obs.freqs_hz)
    return store, results, values, obs


def _seen_rfi(values, obs):
    """The fitted RFI as it appears in the data, g[a1] rfi conj(g[a2]), in float64."""
    g = values["gains"].astype(np.complex128)
    return g[obs.a1] * values["rfi_vis"].astype(np.complex128) * np.conj(g[obs.a2])


def _column(path, name):
    with tables.table(str(path), ack=False) as ms:
        return ms.getcol(name)


def _unchanged_but(before, after, named=()):
    """Every column of ``before`` not in ``named`` is in ``after`` with the same bytes."""
    kept = {k: v for k, v in before.items() if k not in named}
    assert {k: after[k] for k in kept} == kept


def test_cleaned_data_are_the_data_less_the_gained_rfi_in_each_hand(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, corr=("XX", "XY", "YX", "YY"), n_spw=2, n_time=3, tiled=True)
    store, results, values, obs = _fit(tmp_path, path, spw=1)
    before = _snapshot(path)
    report = export_results(results, path, store=store, cleaned_column="TAB_CLEANED_DATA")
    assert report.columns[3] == "TAB_CLEANED_DATA" and report.correlations == "I = (XX + YY) / 2"
    _unchanged_but(before, _snapshot(path))
    cleaned = _column(path, "TAB_CLEANED_DATA")
    assert cleaned.dtype == w.data.dtype and cleaned.shape == w.data.shape
    in_spw = w.ddid == 1
    seen = _seen_rfi(values, obs)
    for hand in (0, 3):  # the RFI fitted to I = (XX + YY) / 2 leaves each parallel hand
        got = expected_cube(w, cleaned[..., hand], in_spw, 3)
        want = expected_cube(w, w.data[..., hand], in_spw, 3) - seen
        np.testing.assert_allclose(got, want, rtol=CLEANED_RTOL, atol=0)
    np.testing.assert_array_equal(cleaned[:, :, 1:3], w.data[:, :, 1:3])  # cross hands
    np.testing.assert_array_equal(cleaned[~in_spw], w.data[~in_spw])  # the other window


def test_weights_are_the_inverse_noise_squared_the_fit_used(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, corr=("XX", "XY", "YX", "YY"), n_spw=2, n_time=3)
    spectrum = np.broadcast_to(1 / w.sigma[:, None, :] ** 2, w.data.shape).copy()
    spectrum[13, 1, 0] = 0  # a weight of 0 (import-ms flags it) stays 0: row 13 is in window 1
    add_cell_column(path, "WEIGHT_SPECTRUM", spectrum)
    store, results, _, obs = _fit(tmp_path, path, spw=1, noise="column")
    before = _snapshot(path)
    report = export_results(results, path, store=store, weights=True)
    assert report.columns[3:] == ("TAB_WEIGHT", "TAB_WEIGHT_SPECTRUM")
    _unchanged_but(before, _snapshot(path))
    in_spw = w.ddid == 1
    weight, weight_spectrum = _column(path, "TAB_WEIGHT"), _column(path, "TAB_WEIGHT_SPECTRUM")
    each_hand = 1 / (2 * np.broadcast_to(obs.noise, (obs.n_bl,)) ** 2)  # I from two hands
    for hand in (0, 3):
        got = expected_cube(w, weight[:, hand], in_spw, 3)
        np.testing.assert_allclose(got, np.repeat(each_hand[:, None], 3, 1), rtol=WEIGHT_RTOL)
        cube = expected_cube(w, weight_spectrum[..., hand], in_spw, 3)
        want = np.broadcast_to(each_hand[:, None, None], cube.shape).copy()
        want[expected_cube(w, spectrum[..., hand], in_spw, 3) == 0] = 0
        np.testing.assert_allclose(cube, want, rtol=WEIGHT_RTOL)
    assert weight_spectrum[13, 1, 0] == 0 and weight_spectrum[13, 0, 0] > 0
    assert not np.any(weight[:, 1:3]) and not np.any(weight[~in_spw])
    # Read back as import-ms reads a WEIGHT, they give the noise of the fit.
    plan = correlation_plan(np.array([9, 10, 11, 12]), "I")
    sigma = plan.sigma(noise_from_column("WEIGHT", weight[in_spw]))
    noise = np.tile(np.broadcast_to(obs.noise, (obs.n_bl,)), 3)
    np.testing.assert_allclose(sigma, noise, rtol=NOISE_RTOL)


def test_write_weights_replaces_weight_keeping_the_original_once(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=3)
    original = _column(path, "WEIGHT")
    store, results, _, obs = _fit(tmp_path, path, correlation="XX")
    before = _snapshot(path)
    report = export_results(results, path, store=store, write_weights=True)
    assert report.backups == {"WEIGHT": "TAB_WEIGHT_BACKUP"} and "TAB_WEIGHT" not in report.columns
    after = _snapshot(path)
    _unchanged_but(before, after, named=("WEIGHT",))
    assert after["TAB_WEIGHT_BACKUP"] == before["WEIGHT"]
    weight = _column(path, "WEIGHT")
    want = 1 / np.broadcast_to(obs.noise, (obs.n_bl,)) ** 2  # one hand fitted
    got = expected_cube(w, weight[:, 0], w.ddid == 0, 3)
    np.testing.assert_allclose(got, np.repeat(want[:, None], 3, 1), rtol=WEIGHT_RTOL)
    np.testing.assert_array_equal(weight[:, 1], original[:, 1])  # YY was not fitted
    again = export_results(results, path, store=store, write_weights=True, overwrite_columns=True)
    assert again.backups == {}
    assert _snapshot(path)["TAB_WEIGHT_BACKUP"] == before["WEIGHT"]  # never overwritten
    np.testing.assert_array_equal(_column(path, "WEIGHT"), weight)


def test_residual_flags_are_cells_beyond_k_noise_and_merge_into_flag_with_a_backup(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, corr=("XX", "XY", "YX", "YY"), n_time=3)
    store, results, values, obs = _fit(tmp_path, path)
    noise = np.broadcast_to(obs.noise, (obs.n_bl,))[:, None, None]
    before = _snapshot(path)
    report = export_results(results, path, store=store, flag_residual=2.0)
    _unchanged_but(before, _snapshot(path))
    want = np.abs(values["residual"]) > 2.0 * noise
    assert report.n_flagged == np.count_nonzero(want) > 0 and report.n_cells == want.size
    flags = _column(path, "TAB_FLAG_RESIDUAL")
    for corr in range(4):  # every correlation of a flagged cell
        np.testing.assert_array_equal(expected_cube(w, flags[..., corr], w.ddid == 0, 3), want)
    merged = export_results(
        results, path, store=store, flag_residual=1.5, write_flags=True, overwrite_columns=True
    )
    assert merged.backups == {"FLAG": "TAB_FLAG_BACKUP"} and merged.columns[-1] == "FLAG"
    after = _snapshot(path)
    _unchanged_but(before, after, named=("FLAG",))
    assert after["TAB_FLAG_BACKUP"] == before["FLAG"]
    second = np.abs(values["residual"]) > 1.5 * noise
    flag = _column(path, "FLAG")
    for corr in range(4):
        original = expected_cube(w, w.flag[..., corr], w.ddid == 0, 3)
        np.testing.assert_array_equal(
            expected_cube(w, flag[..., corr], w.ddid == 0, 3), original | second
        )
    export_results(
        results, path, store=store, flag_residual=1.0, write_flags=True, overwrite_columns=True
    )
    assert _snapshot(path)["TAB_FLAG_BACKUP"] == before["FLAG"]  # the first backup is kept


def test_corrected_data_is_written_only_when_named(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=2)
    store, results, values, obs = _fit(tmp_path, path, correlation="YY")
    export_results(results, path, store=store, cleaned_column="TAB_CLEANED_DATA")
    with tables.table(str(path), ack=False) as ms:
        assert "CORRECTED_DATA" not in ms.colnames()
    report = export_results(
        results, path, store=store, cleaned_column="CORRECTED_DATA", overwrite_columns=True
    )
    assert "CORRECTED_DATA" in report.columns
    corrected = _column(path, "CORRECTED_DATA")
    np.testing.assert_array_equal(corrected, _column(path, "TAB_CLEANED_DATA"))
    np.testing.assert_array_equal(corrected[..., 0], w.data[..., 0])  # XX was not fitted
    got = expected_cube(w, corrected[..., 1], w.ddid == 0, 2)
    want = expected_cube(w, w.data[..., 1], w.ddid == 0, 2) - _seen_rfi(values, obs)
    np.testing.assert_allclose(got, want, rtol=CLEANED_RTOL, atol=0)
    before = _snapshot(path)
    _, results, values, obs = _fit(tmp_path, path, seed=1, correlation="YY")
    with pytest.raises(MsError, match="already has column CORRECTED_DATA; add --overwrite-column"):
        export_results(
            results, path, store=store, cleaned_column="CORRECTED_DATA", overwrite_columns=True
        )
    assert _snapshot(path) == before
    export_results(
        results,
        path,
        store=store,
        cleaned_column="CORRECTED_DATA",
        overwrite_columns=True,
        overwrite_column=True,
    )
    got = expected_cube(w, _column(path, "CORRECTED_DATA")[..., 1], w.ddid == 0, 2)
    want = expected_cube(w, w.data[..., 1], w.ddid == 0, 2) - _seen_rfi(values, obs)
    np.testing.assert_allclose(got, want, rtol=CLEANED_RTOL, atol=0)
    with pytest.raises(MsError, match="cannot replace DATA, the data they are computed from"):
        export_results(results, path, store=store, cleaned_column="DATA", overwrite_column=True)


def test_a_partial_import_writes_back_only_its_cells(tmp_path):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=5, n_chan=6, descending=True)
    options = dict(correlation="XX", channels=slice(1, 4), times=slice(2, 4))
    store, results, values, obs = _fit(tmp_path, path, **options)
    assert obs.vis.shape == (10, 3, 2)
    with pytest.raises(MsError, match=r"need --data STORE, the store the fit read"):
        export_results(results, path, correlation="XX")
    before = _snapshot(path)
    report = export_results(
        results,
        path,
        store=store,
        cleaned_column="TAB_CLEANED_DATA",
        weights=True,
        flag_residual=1.0,
    )
    assert (report.channels, report.integrations) == ((1, 4, 6), (2, 4, 5))
    _unchanged_but(before, _snapshot(path))
    inside = np.zeros((10, 6, 5), bool)
    inside[:, 1:4, 2:4] = True  # MS channels 1:4, stored descending: the cube's reversed
    everywhere = np.ones(w.time.size, bool)
    cube = lambda name: expected_cube(w, _column(path, name)[..., 0], everywhere, 5)  # noqa: E731
    sky = cube("TAB_SKY_DATA")
    np.testing.assert_array_equal(sky[:, 1:4, 2:4], values["sky_vis"][:, ::-1])
    assert not np.any(sky[~inside])
    data = expected_cube(w, w.data[..., 0], everywhere, 5)
    cleaned = cube("TAB_CLEANED_DATA")
    want = data[:, 1:4, 2:4] - _seen_rfi(values, obs)[:, ::-1]
    np.testing.assert_allclose(cleaned[:, 1:4, 2:4], want, rtol=CLEANED_RTOL, atol=0)
    np.testing.assert_array_equal(cleaned[~inside], data[~inside])
    flags = cube("TAB_FLAG_RESIDUAL")
    noise = np.broadcast_to(obs.noise, (obs.n_bl,))[:, None, None]
    bad = np.abs(values["residual"]) > noise
    np.testing.assert_array_equal(flags[:, 1:4, 2:4], bad[:, ::-1])
    assert not np.any(flags[~inside]) and np.any(bad)
    weight = expected_cube(w, _column(path, "TAB_WEIGHT")[:, 0], everywhere, 5)
    assert np.all(weight[:, 2:4] > 0) and not np.any(weight[:, [0, 1, 4]])


def test_refusals_say_what_is_missing_and_write_nothing(tmp_path):
    path = tmp_path / "a.ms"
    build_ms(path, n_spw=2, n_time=2)
    store, results, _, _ = _fit(tmp_path, path, spw=1)
    before = _snapshot(path)
    refusals = [
        (
            dict(write_flags=True),
            "--write-flags merges the residual flags into FLAG: give --flag-residual K",
        ),
        (dict(flag_residual=0.0), r"--flag-residual 0.0: the threshold K must be a number > 0"),
        (
            dict(store=None, spw=1, weights=True),
            "need the noise the fit used, which its store holds: give --data STORE",
        ),
        (
            dict(spw=0),
            "was imported with --spw 1, not 0; export-ms writes into the selection the fit read",
        ),
        (
            dict(cleaned_column="TAB_WEIGHT"),
            "--cleaned-column TAB_WEIGHT: export-ms writes that column for another use",
        ),
    ]
    for options, message in refusals:
        with pytest.raises(MsError, match=message):
            export_results(results, path, **({"store": store} | options))
    del zarr.open_group(str(results), mode="r+")["gains"]
    with pytest.raises(MsError, match="has no array gains, which the cleaned data need"):
        export_results(results, path, store=store, cleaned_column="TAB_CLEANED_DATA")
    assert _snapshot(path) == before


def test_an_interrupted_write_leaves_no_column_under_its_final_name(tmp_path, monkeypatch):
    path = tmp_path / "a.ms"
    w = build_ms(path, n_time=3)
    store, results, _, _ = _fit(tmp_path, path)
    before = _snapshot(path)
    put = ms_columns._put_rows
    calls = []

    def interrupted(ms, column, rows, values):
        calls.append(column)
        if len(calls) == 4:  # the first rows of the fourth column, TAB_CLEANED_DATA
            raise KeyboardInterrupt
        put(ms, column, rows, values)

    monkeypatch.setattr(ms_columns, "_put_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_results(results, path, store=store, cleaned_column="TAB_CLEANED_DATA")
    monkeypatch.undo()
    after = _snapshot(path)
    assert calls[-1] == "TABTMP_TAB_CLEANED_DATA"
    assert set(after) - set(before) == {"TAB_SKY_DATA", "TAB_RFI_DATA", "TAB_RES_DATA"}
    _unchanged_but(before, after)
    # A kill between the renames of --write-flags: FLAG renamed aside, the new one not yet in
    # place, a temporary column left; the next export puts FLAG back first.
    with tables.table(str(path), readonly=False, ack=False) as ms:
        ms.renamecol("FLAG", "TABOLD_FLAG")
        ms.renamecol("TAB_SKY_DATA", "TABTMP_TAB_CLEANED_DATA")
    report = export_results(results, path, store=store, overwrite_columns=True)
    assert report.recovered == (
        "removed TABTMP_TAB_CLEANED_DATA, left by an interrupted export",
        "restored FLAG (renamed aside by an interrupted export)",
    )
    _unchanged_but(before, _snapshot(path))
    np.testing.assert_array_equal(_column(path, "FLAG"), w.flag)


def test_command_line_summary_names_each_product(tmp_path, capsys):
    path = tmp_path / "a.ms"
    build_ms(path, n_time=3)
    store, results, values, obs = _fit(tmp_path, path)
    args = ["export-ms", str(results), "--ms", str(path), "--data", str(store)]
    assert main([*args, "--flag-residual", "2", "--write-flags"]) == 0
    out = capsys.readouterr().out.splitlines()
    n_flagged = np.count_nonzero(np.abs(values["residual"]) > 2 * obs.noise[:, None, None])
    assert out[:2] == [
        f"added TAB_SKY_DATA, TAB_RFI_DATA, TAB_RES_DATA, TAB_CLEANED_DATA, TAB_WEIGHT, "
        f"TAB_FLAG_RESIDUAL to {path}: 30 rows",
        "  replaced FLAG",
    ]
    assert f"  TAB_FLAG_RESIDUAL: {n_flagged} of 90 cells" in out[5]
    assert out[-1] == "  the original FLAG kept in TAB_FLAG_BACKUP"
    assert main([*args, "--cleaned-column", "CORRECTED_DATA"]) == 2
    err = capsys.readouterr().err
    assert "already has column TAB_SKY_DATA; add --overwrite-columns" in err
    del zarr.open_group(str(results), mode="r+")["gains"]
    assert main([*args, "--overwrite-columns"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("replaced TAB_SKY_DATA, TAB_RFI_DATA, TAB_RES_DATA, TAB_WEIGHT in")
    assert f"  no cleaned data: {results} holds no gains" in out
