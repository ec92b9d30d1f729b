import dataclasses
import json
import shutil

import numpy as np
import pytest
import zarr

from tabascal.observation.geometry import CircularOrbits
from tabascal.store import (
    Observation,
    ObservationWriter,
    StoreError,
    Truth,
    read_meta,
    read_observation,
    row_blocks,
    store_info,
    write_observation,
)

N_ANT, N_FREQ, N_TIME, N_SAT, N_SRC = 4, 3, 5, 2, 3


def _cube(rng, shape):
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)


def _observation(noise_per_baseline=False, truth=True, seed=0) -> Observation:
    rng = np.random.default_rng(seed)
    a1, a2 = np.triu_indices(N_ANT, 1)
    n_bl = a1.size
    cube = (n_bl, N_FREQ, N_TIME)
    found = None
    if truth:
        found = Truth(
            sky_vis=_cube(rng, cube),
            rfi_vis=_cube(rng, cube),
            gains=_cube(rng, (N_ANT, N_FREQ, N_TIME)),
            rfi_amp=rng.normal(size=(N_ANT, N_SAT, N_FREQ, N_TIME)).astype(np.float32),
            rfi_eirp_w_hz=rng.uniform(size=(N_SAT, N_FREQ, N_TIME)),
            source_ra_rad=rng.uniform(size=N_SRC),
            source_dec_rad=rng.uniform(size=N_SRC),
            source_flux_jy=rng.uniform(size=(N_SRC, N_FREQ)),
        )
    return Observation(
        a1=a1.astype(np.int32),
        a2=a2.astype(np.int32),
        ant_itrf=rng.normal(size=(N_ANT, 3)) * 1e3 + [5e6, 2e6, -3e6],
        dish_diameter_m=38.0,
        times_s=(np.arange(N_TIME) + 0.5) * 2.0,
        int_time=2.0,
        freqs_hz=150e6 + 1e5 * np.arange(N_FREQ),
        chan_width=1e5,
        gast0_rad=1.25,
        epoch_utc="2024-03-01T12:00:00+00:00",
        ra_rad=0.3,
        dec_rad=-0.4,
        orbits=CircularOrbits(
            [20e6, 550e3], [0.9, 0.95], [0.1, 0.2], [0.3, 0.4], names=("G01", "L02")
        ),
        metadata={"creator": "test", "config": {"seed": 3}},
        vis=_cube(rng, cube),
        flags=rng.uniform(size=cube) < 0.2,
        noise=rng.uniform(1, 2, n_bl) if noise_per_baseline else np.float64(1.5),
        rows=slice(0, n_bl),
        n_bl_total=n_bl,
        truth=found,
    )


def _assert_same(got, expected):
    for f in dataclasses.fields(expected):
        a, b = getattr(got, f.name), getattr(expected, f.name)
        if isinstance(b, CircularOrbits):
            for name in ("altitude_m", "inclination_rad", "raan_rad", "arg_lat_rad"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
            assert a.names == b.names
        elif isinstance(b, Truth):
            _assert_same(a, b)
        elif isinstance(b, np.ndarray | np.generic):
            np.testing.assert_array_equal(a, b)
            assert np.asarray(a).dtype == np.asarray(b).dtype, f.name
        else:
            assert a == b, f.name


@pytest.mark.parametrize("noise_per_baseline", [False, True])
@pytest.mark.parametrize("truth", [False, True])
def test_round_trip_keeps_every_field(tmp_path, noise_per_baseline, truth):
    obs = _observation(noise_per_baseline, truth)
    write_observation(tmp_path / "obs.zarr", obs, chunk_rows=4)
    _assert_same(read_observation(tmp_path / "obs.zarr"), obs)
    info = store_info(tmp_path / "obs.zarr")
    assert (info.n_bl, info.n_ant, info.n_freq, info.n_time, info.n_sat) == (6, 4, 3, 5, 2)
    assert (info.chunk_rows, info.noise_per_baseline, info.has_truth) == (
        4,
        noise_per_baseline,
        truth,
    )


def _corrupt_chunks_outside(path, keep_chunk: int):
    """Overwrite every baseline-chunk file except ``keep_chunk`` with bytes zstd cannot decode."""
    corrupted = 0
    for array in ("vis", "flags", "noise", "truth/sky_vis", "truth/rfi_vis"):
        for chunk in (path / array / "c").rglob("*"):
            row_chunk = int(chunk.relative_to(path / array / "c").parts[0])
            if chunk.is_file() and row_chunk != keep_chunk:
                chunk.write_bytes(b"not a zstd frame")
                corrupted += 1
    return corrupted


def test_partial_read_returns_those_rows_and_touches_no_other_chunk(tmp_path):
    obs = _observation(noise_per_baseline=True)
    path = tmp_path / "obs.zarr"
    write_observation(path, obs, chunk_rows=2)
    assert _corrupt_chunks_outside(path, keep_chunk=1) > 0
    part = read_observation(path, rows=slice(2, 4))
    assert part.rows == slice(2, 4) and part.n_bl == 2 and part.n_bl_total == 6
    np.testing.assert_array_equal(part.vis, obs.vis[2:4])
    np.testing.assert_array_equal(part.flags, obs.flags[2:4])
    np.testing.assert_array_equal(part.noise, obs.noise[2:4])
    np.testing.assert_array_equal(part.a1, obs.a1[2:4])
    np.testing.assert_array_equal(part.truth.rfi_vis, obs.truth.rfi_vis[2:4])
    np.testing.assert_array_equal(part.truth.gains, obs.truth.gains)
    assert store_info(path).n_bl == 6  # sizes need no chunk
    with pytest.raises(Exception):  # noqa: B017 - the corrupted chunks really are undecodable
        read_observation(path, rows=slice(0, 2))


def test_streaming_writer_builds_the_same_store_block_by_block(tmp_path):
    obs = _observation(noise_per_baseline=True)
    with ObservationWriter(tmp_path / "s.zarr", obs.meta, truth=True, chunk_rows=2) as writer:
        for rows in reversed(list(row_blocks(obs.n_bl, 4))):
            writer.write_rows(
                rows.start,
                vis=obs.vis[rows],
                flags=obs.flags[rows],
                noise=obs.noise[rows],
                sky_vis=obs.truth.sky_vis[rows],
                rfi_vis=obs.truth.rfi_vis[rows],
            )
        t = obs.truth
        writer.write_truth(
            gains=t.gains,
            rfi_amp=t.rfi_amp,
            rfi_eirp_w_hz=t.rfi_eirp_w_hz,
            source_ra_rad=t.source_ra_rad,
            source_dec_rad=t.source_dec_rad,
            source_flux_jy=t.source_flux_jy,
        )
        assert not (tmp_path / "s.zarr").exists()  # nothing under the final name until done
    _assert_same(read_observation(tmp_path / "s.zarr"), obs)


def _leftovers(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


def test_interrupted_write_leaves_nothing(tmp_path):
    obs = _observation(truth=False)
    with pytest.raises(KeyboardInterrupt):
        with ObservationWriter(tmp_path / "obs.zarr", obs.meta, noise=1.0, chunk_rows=2) as w:
            w.write_rows(0, vis=obs.vis[:2], flags=obs.flags[:2])
            raise KeyboardInterrupt  # e.g. Ctrl-C mid-simulation
    assert _leftovers(tmp_path) == []


def test_incomplete_write_is_refused_and_leaves_nothing(tmp_path):
    obs = _observation(truth=False)
    with pytest.raises(StoreError, match="4 of 6 rows were never written"):
        with ObservationWriter(tmp_path / "obs.zarr", obs.meta, noise=1.0) as w:
            w.write_rows(0, vis=obs.vis[:2], flags=obs.flags[:2])
    assert _leftovers(tmp_path) == []


def test_existing_store_is_kept_unless_overwrite(tmp_path):
    path = tmp_path / "obs.zarr"
    first, second = _observation(seed=1), _observation(seed=2)
    write_observation(path, first)
    with pytest.raises(FileExistsError, match="already exists"):
        write_observation(path, second)
    np.testing.assert_array_equal(read_observation(path).vis, first.vis)
    write_observation(path, second, overwrite=True)
    np.testing.assert_array_equal(read_observation(path).vis, second.vis)
    assert _leftovers(tmp_path) == ["obs.zarr"]


def test_write_rows_refuses_wrong_shapes(tmp_path):
    obs = _observation(truth=False)
    with pytest.raises(ValueError, match=r"'flags' has shape \(2, 3, 4\), expected \(2, 3, 5\)"):
        with ObservationWriter(tmp_path / "obs.zarr", obs.meta, noise=1.0) as w:
            w.write_rows(0, vis=obs.vis[:2], flags=obs.flags[:2, :, :4])
    assert _leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "obs.zarr"
    write_observation(path, _observation())
    return path


def _set_attr(path, name, value):
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"][name] = value
    (path / "zarr.json").write_text(json.dumps(meta))


def _break(path, how):
    group = zarr.open_group(path, mode="r+")
    if how == "missing flags":
        shutil.rmtree(path / "flags")
    elif how == "missing gains":
        shutil.rmtree(path / "truth" / "gains")
    elif how == "flags shape":
        group.create_array("flags", shape=(6, 3, 4), dtype=bool, overwrite=True)
    elif how == "noise shape":
        group.create_array("noise", shape=(5,), dtype=float, overwrite=True)
    elif how == "rfi_amp shape":
        group.create_array("truth/rfi_amp", shape=(4, 3, 3, 5), dtype="float32", overwrite=True)
    elif how == "version":
        _set_attr(path, "format_version", 99)
    elif how == "format":
        _set_attr(path, "format", None)
    elif how == "attribute":
        meta = json.loads((path / "zarr.json").read_text())
        del meta["attributes"]["int_time"]
        (path / "zarr.json").write_text(json.dumps(meta))
    elif how == "antenna index":
        group.create_array("a2", data=np.array([1, 2, 3, 2, 3, 4], np.int32), overwrite=True)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("missing flags", r"array 'flags' is missing"),
        ("missing gains", r"array 'truth/gains' is missing"),
        ("flags shape", r"array 'flags' has shape \(6, 3, 4\), expected \(6, 3, 5\)"),
        ("noise shape", r"array 'noise' has shape \(5,\), expected \(\) or \(6,\)"),
        (
            "rfi_amp shape",
            r"array 'truth/rfi_amp' has shape \(4, 3, 3, 5\), expected "
            r"\(4, 2, 3, 5\)",
        ),
        ("version", r"format_version 99 is not supported; this tabascal reads versions 1 and 2"),
        ("format", r"not a tabascal observation store \(attribute 'format' is None"),
        ("attribute", r"attribute 'int_time' is missing"),
        ("antenna index", r"antenna indices outside \[0, 4\)"),
    ],
)
def test_bad_store_fails_naming_what_is_wrong(tmp_path, good_store, how, message):
    path = tmp_path / "obs.zarr"
    shutil.copytree(good_store, path)
    _break(path, how)
    for reader in (store_info, read_meta, read_observation):
        with pytest.raises(StoreError, match=message):
            reader(path)


def test_paths_that_are_not_stores_fail_clearly(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        read_observation(tmp_path / "nothing.zarr")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "file.txt").write_text("hello")
    with pytest.raises(StoreError, match="not a tabascal observation store"):
        read_observation(tmp_path / "plain")
    zarr.open_group(tmp_path / "other.zarr", mode="w").attrs["x"] = 1
    with pytest.raises(StoreError, match="attribute 'format' is None"):
        store_info(tmp_path / "other.zarr")
