"""A damaged store is reported, never read as other numbers: missing chunks (a partial copy),
chunks whose bytes changed (a flipped bit) or were cut short (a truncated file).

One small simulated store (15 baselines in chunks of 4 rows: chunks 0-3 hold rows 0-3, 4-7,
8-11 and 12-14; 2 channels, 3 integrations, per-baseline noise) is copied and damaged on disk
by each test. Comparisons with the undamaged store are exact: nothing is recomputed.
"""

import dataclasses
import json
import logging
import shutil

import numpy as np
import pytest
import zarr
from zarr.codecs import Crc32cCodec

from tabascal.cli import main
from tabascal.simulate import simulate, simulation_config
from tabascal.store import (
    StoreError,
    read_meta,
    read_observation,
    store_info,
    verify_store,
    write_observation,
)

N_BL, N_FREQ, N_TIME, CHUNK_ROWS = 15, 2, 3, 4
TINY = {
    "array": {"n_stations": 6},
    "observation": {"n_time": N_TIME, "n_freq": N_FREQ, "flag_fraction": 0.1, "sefd_spread": 0.2},
    "sky": {"n_sources": 2},
    "simulation": {"chunk_rows": CHUNK_ROWS},
}


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "obs.zarr"
    simulate(simulation_config("demo", TINY, seed=7), path)
    return path


@pytest.fixture
def store(intact, tmp_path):
    """A copy of the intact store, to damage."""
    path = tmp_path / "obs.zarr"
    shutil.copytree(intact, path)
    return path


def _chunk_file(path, array, k):
    """The file of chunk k (rows 4k..4k+3) of a baseline array: cubes have two more axes."""
    cube = array in ("vis", "flags", "truth/sky_vis", "truth/rfi_vis")
    return path / array / "c" / str(k) / "0" / "0" if cube else path / array / "c" / str(k)


def _flip_byte(file):
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x01
    file.write_bytes(bytes(data))


def _truncate(file):
    file.write_bytes(file.read_bytes()[:7])


def _as_older_store(path, all_flagged_rows: slice):
    """Rewrite the store as the writer did before checksums: zarr's default codecs, chunks equal
    to the fill value left out, no ``every_chunk_written`` attribute; ``all_flagged_rows`` are
    flagged first, so that their flags chunk is one zarr leaves out."""
    group = zarr.open_group(path, mode="r+")
    arrays = [(n, a) for n, a in group.members(max_depth=None) if isinstance(a, zarr.Array)]
    for name, array in arrays:
        data = array[...]
        if name == "flags":
            data[all_flagged_rows] = True
        group.create_array(
            name,
            shape=array.shape,
            chunks=array.chunks,
            dtype=array.dtype,
            fill_value=array.fill_value,
            overwrite=True,
        )[...] = data
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"].pop("every_chunk_written", None)  # absent from stores that old
    (path / "zarr.json").write_text(json.dumps(meta))


def test_writer_writes_every_chunk_even_all_fill_ones_each_with_a_checksum(intact, tmp_path):
    obs = read_observation(intact)
    flags, vis = obs.flags.copy(), obs.vis.copy()
    flags[:CHUNK_ROWS], vis[:CHUNK_ROWS] = True, 0  # chunk 0 of both equals the fill value
    path = tmp_path / "filled.zarr"
    write_observation(path, dataclasses.replace(obs, flags=flags, vis=vis), chunk_rows=CHUNK_ROWS)
    for array in ("vis", "flags"):
        assert _chunk_file(path, array, 0).is_file(), array
    group = zarr.open_group(path, mode="r")
    assert group.attrs["every_chunk_written"] is True
    arrays = [(n, a) for n, a in group.members(max_depth=None) if isinstance(a, zarr.Array)]
    assert len(arrays) == 20
    for name, array in arrays:
        assert isinstance(array.compressors[-1], Crc32cCodec), name
    np.testing.assert_array_equal(read_observation(path).flags, flags)


def test_open_refuses_missing_vis_chunks_naming_the_store_array_and_rows(store, capsys):
    for k in (0, 2):
        _chunk_file(store, "vis", k).unlink()
    message = rf"{store}: array vis is missing 2 of 4 chunks \(rows 0-3, 8-11\); .*allow_missing"
    for reader in (store_info, read_meta, read_observation):
        with pytest.raises(StoreError, match=message):
            reader(store)
    with pytest.raises(StoreError, match=message):
        read_observation(store, slice(4, 8))  # refused at open, even for intact rows
    assert main(["inspect", str(store)]) == 2
    captured = capsys.readouterr()
    assert "array vis is missing 2 of 4 chunks (rows 0-3, 8-11)" in captured.err
    assert "data rms" not in captured.out


def test_open_refuses_missing_flags_noise_and_truth_chunks(store):
    _chunk_file(store, "flags", 3).unlink()
    _chunk_file(store, "noise", 1).unlink()
    _chunk_file(store, "truth/sky_vis", 0).unlink()
    with pytest.raises(StoreError) as refused:
        read_observation(store)
    assert (
        "array flags is missing 1 of 4 chunks (rows 12-14); "
        "array noise is missing 1 of 4 chunks (rows 4-7); "
        "array truth/sky_vis is missing 1 of 4 chunks (rows 0-3)"
    ) in str(refused.value)
    # Flags can be read as flagged; noise and truth have no stand-in.
    with pytest.raises(StoreError, match=r"noise, truth/sky_vis cannot: copy the store again"):
        read_observation(store, allow_missing=True)


def test_allow_missing_reads_missing_cells_as_flagged_and_every_other_cell_as_stored(
    intact, store, caplog
):
    _chunk_file(store, "vis", 0).unlink()  # rows 0-3
    _chunk_file(store, "flags", 2).unlink()  # rows 8-11
    lost = np.zeros((N_BL, N_FREQ, N_TIME), bool)
    lost[0:4] = lost[8:12] = True
    want = read_observation(intact)
    with caplog.at_level(logging.WARNING, logger="tabascal.store.reader"):
        got = read_observation(store, allow_missing=True)
    assert "reading 48 of 90 cells (53.33 %) as flagged" in caplog.text
    assert "array vis is missing 1 of 4 chunks (rows 0-3)" in caplog.text
    assert got.flags[lost].all()
    np.testing.assert_array_equal(got.flags[~lost], want.flags[~lost])
    np.testing.assert_array_equal(got.vis[8:12], want.vis[8:12])  # its vis chunk is there
    np.testing.assert_array_equal(got.vis[~lost], want.vis[~lost])
    np.testing.assert_array_equal(got.noise, want.noise)
    np.testing.assert_array_equal(got.truth.rfi_vis, want.truth.rfi_vis)
    block = read_observation(store, slice(2, 9), allow_missing=True)  # across chunk edges
    np.testing.assert_array_equal(block.flags, got.flags[2:9])
    np.testing.assert_array_equal(block.vis, got.vis[2:9])


def test_inspect_and_run_go_on_with_allow_missing(store, tmp_path, capsys):
    _chunk_file(store, "vis", 0).unlink()
    assert main(["inspect", "--allow-missing", str(store)]) == 0
    out = capsys.readouterr().out
    assert "missing       24 of 90 cells (26.67 %), read as flagged" in out
    flagged = read_observation(store, allow_missing=True).flags.mean()
    assert f"flagged       {100 * flagged:.2f} %" in out
    config = tmp_path / "fit.yaml"
    config.write_text(
        "fit:\n  steps: 2\n  second_phase_steps: 0\n  polish_steps: 0\noutput:\n  plots: false\n"
    )
    run = ["run", "-c", str(config), "--data", str(store), "-o", str(tmp_path / "fit"), "-q"]
    assert main(run) == 2  # refused before any fitting
    assert "array vis is missing 1 of 4 chunks (rows 0-3)" in capsys.readouterr().err
    assert main([*run, "--allow-missing"]) == 0
    results = zarr.open_group(tmp_path / "fit" / "results.zarr", mode="r")
    assert results["flags"][0:4].all()


def test_bit_flip_is_a_checksum_mismatch_naming_array_rows_and_chunk(store):
    _flip_byte(_chunk_file(store, "vis", 1))
    message = r"array vis, rows 4-7 \(chunk 1/0/0\): checksum mismatch; copy the store again"
    with pytest.raises(StoreError, match=rf"{store}: {message}"):
        read_observation(store)
    with pytest.raises(StoreError, match=message):
        read_observation(store, slice(6, 9))
    assert read_observation(store, slice(0, 4)).n_bl == 4  # the chunks read are intact


def test_truncated_chunk_is_reported_with_its_array_and_rows(store):
    _truncate(_chunk_file(store, "truth/rfi_vis", 3))
    with pytest.raises(StoreError, match=r"array truth/rfi_vis, rows 12-14 \(chunk 3/0/0\)"):
        read_observation(store)
    assert read_observation(store, truth=False).n_bl == N_BL


def test_inspect_verify_lists_every_missing_and_damaged_chunk(intact, store, capsys):
    assert main(["inspect", "--verify", str(intact)]) == 0
    out = capsys.readouterr().out
    assert f"{intact}: none of the 35 chunks of its 20 arrays is damaged" in out
    assert "stations" in out  # the summary follows
    _chunk_file(store, "vis", 0).unlink()
    _chunk_file(store, "flags", 3).unlink()
    _flip_byte(_chunk_file(store, "vis", 2))
    _truncate(_chunk_file(store, "noise", 1))
    _flip_byte(store / "ant_itrf" / "c" / "0" / "0")
    assert main(["inspect", "--verify", str(store)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{store}: array vis, rows 0-3 (chunk 0/0/0): missing",
        f"{store}: array vis, rows 8-11 (chunk 2/0/0): checksum mismatch",
        f"{store}: array flags, rows 12-14 (chunk 3/0/0): missing",
        f"{store}: array noise, rows 4-7 (chunk 1): checksum mismatch",
        f"{store}: array ant_itrf (chunk 0/0): checksum mismatch",
        f"{store}: 5 of the 35 chunks of its 20 arrays are damaged (crc32c checksums checked)",
    ]


def test_older_store_without_checksums_opens_and_only_its_vis_and_noise_must_be_whole(
    intact, store
):
    _as_older_store(store, all_flagged_rows=slice(12, 15))
    assert not _chunk_file(store, "flags", 3).exists()  # left out by zarr: all flagged
    want = read_observation(intact)
    got = read_observation(store)
    assert got.flags[12:15].all()
    np.testing.assert_array_equal(got.flags[:12], want.flags[:12])
    np.testing.assert_array_equal(got.vis, want.vis)
    found = verify_store(store)
    assert found.damage == () and not found.checksums
    _truncate(_chunk_file(store, "vis", 1))
    with pytest.raises(StoreError, match=r"rows 4-7 \(chunk 1/0/0\): cannot be decoded"):
        read_observation(store)
    _chunk_file(store, "vis", 0).unlink()
    with pytest.raises(StoreError, match=r"array vis is missing 1 of 4 chunks \(rows 0-3\)"):
        read_observation(store)
    with pytest.raises(StoreError, match="written before tabascal kept every chunk"):
        read_observation(store)
