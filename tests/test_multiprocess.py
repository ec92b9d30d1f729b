"""Runs of 2 processes x 2 virtual CPU devices on 127.0.0.1 (jax.distributed with gloo)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import host_memory_bytes
from multiprocess import run_processes

WORKERS = Path(__file__).parent / "workers"


def _collectives(fail_in: int, *extra):
    return run_processes(
        lambda i, coordinator: [WORKERS / "collectives.py", coordinator, i, fail_in, *extra], 2,
        timeout_s=120,
    )  # fmt: skip


def test_each_process_holds_its_rows_and_gathers_every_block(tmp_path):
    results = _collectives(-1, tmp_path / "checkpoints")
    for code, text in results:
        assert code == 0, text
        assert "gathered equal True" in text, text
        # Every process refuses rows past the end, naming them (none raises alone and hangs).
        assert (
            "rows no process holds: rows 6..10 of an array of 8 rows are not all held by some "
            "process (rows 8..10 are held by none)" in text
        ), text
    # 8 rows on 4 devices: process 0 owns rows 0-3 (blocks at 0 and 2), process 1 rows 4-7.
    assert "local rows [0, 2]" in results[0][1]
    assert "local rows [4, 6]" in results[1][1]
    assert "writer True" in results[0][1] and "writer False" in results[1][1]
    # The checkpoint of a state split over both processes holds every row, written once.
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint.npz"]
    with np.load(tmp_path / "checkpoints" / "checkpoint.npz") as saved:
        np.testing.assert_array_equal(saved["leaf_0"], np.arange(24.0).reshape(8, 3))
        assert int(saved["leaf_1"]) == 7
        np.testing.assert_array_equal(saved["history_loss"], np.arange(7.0))


def test_a_failure_in_one_process_stops_the_other_with_its_message():
    (code0, text0), (code1, text1) = _collectives(fail_in=1)
    assert code1 == 2 and "own failure: out/ is not empty" in text1, text1
    assert code0 == 3, text0
    assert (
        "checking the output folder failed in process 1 of 2 "
        "(FileExistsError: out/ is not empty)" in text0
    ), text0


# The per-antenna signal: its sums run in the same order over one process as over two, so
# the fits are equal to the last bit (with the shared signal, measured 2.8e-11 apart in
# chi-squared after 5 steps).
CONFIG = """\
precision: double
fit:
  steps: 5
  second_phase_steps: 0
  polish_steps: 0
output:
  plot_baselines: 2
rfi:
  signal: per_antenna
  time_stencil: 3
  max_groups: 2
  quadrature_limit: 8
  segments: 1
  terms: 3
  cubic_terms: 1
"""
READ = re.compile(r"reading baseline rows (\d+)\.\.(\d+) of ")


@pytest.fixture(scope="module")
def store(small_store, tmp_path_factory):
    """The small store, beside a config file for the runs (a folder of this module's own)."""
    config = tmp_path_factory.mktemp("multiprocess") / "config.yaml"
    config.write_text(CONFIG)
    return small_store, config


def _argv(store, out, *extra):
    path, config = store
    return [WORKERS / "run.py", "run", "--data", path, "-o", out, "-c", config, "-q",
            "--shard-axis", "baseline", *extra]  # fmt: skip


def _two_processes(store, out, *extra, timeout_s=600):
    """A run over 2 processes of 2 devices each into ``out``: [(exit code, output)] each."""
    return run_processes(
        lambda i, c: _argv(store, out, "--devices", 2, "--coordinator", c, "--num-processes", 2,
                           "--process-id", i, *extra),
        2, timeout_s=timeout_s,
    )  # fmt: skip


def _rows_read(text: str) -> set[int]:
    return {r for a, b in READ.findall(text) for r in range(int(a), int(b))}


def test_a_run_over_two_processes_off_the_block_route_is_refused_in_both(store, tmp_path):
    # The source axis places the whole observation from every process, which two processes
    # cannot share: both refuse before anything is read or written, saying what to use.
    results = _two_processes(store, tmp_path / "out", "--shard-axis", "source", timeout_s=300)
    for code, text in results:
        assert code == 2, text
        assert (
            "reads the data block by block, which needs --shard-axis baseline and init "
            "'data' or 'prior' (got shard axis 'source', init 'data')" in text
        ), text
        assert not _rows_read(text), text
    assert not (tmp_path / "out").exists()


@pytest.mark.heavy
def test_two_processes_fit_as_one_process_on_four_devices(store, tmp_path):
    ((code, one),) = run_processes(
        lambda i, c: _argv(store, tmp_path / "one", "--devices", 4), 1, timeout_s=600
    )
    assert code == 0, one
    two = _two_processes(store, tmp_path / "two")
    for code, text in two:
        assert code == 0, text
    reference = json.loads((tmp_path / "one" / "summary.json").read_text())
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["n_processes"] == 2 and summary["n_devices"] == 4 and summary["read_by_block"]
    assert reference["n_processes"] == 1 and reference["n_devices"] == 4
    assert len(summary["per_device_peak_bytes"]) == 4
    # The phase moments' budget, half of a device's memory, is agreed by the processes: here
    # each holds 2 of the host's CPU devices, so half of the host's memory over 2.
    budget = summary["model"]["rfi_phase_cache"]["budget_mib"]
    assert budget == pytest.approx(0.5 * host_memory_bytes() / 2 / 2**20, abs=1e-3)
    print("chi2_final, 2 processes:", summary["chi2_final"], "1 process:", reference["chi2_final"])
    a, b = summary["truth"]["sky"]["rmse"], reference["truth"]["sky"]["rmse"]
    print(f"truth sky rmse, 2 processes: {a!r}, 1 process: {b!r}")
    # float64, the same 4 devices' sums in the same order: both measured equal (0 apart).
    assert summary["chi2_final"] == pytest.approx(reference["chi2_final"], rel=1e-15)
    chi2_at_five = summary["chi2_final"]
    assert summary["truth"]["sky"]["rmse"] == pytest.approx(
        reference["truth"]["sky"]["rmse"], rel=1e-15
    )
    # 28 rows on 4 devices, B = 7: process 0 holds rows 0-13, process 1 rows 14-27, and each
    # read only those (data, then truth for the metrics).
    assert _rows_read(two[0][1]) == set(range(0, 14)), two[0][1]
    assert _rows_read(two[1][1]) == set(range(14, 28)), two[1][1]
    # Only process 0 wrote and printed; its results equal the one-process run's.
    assert "tabascal run: wrote" in two[0][1] and "tabascal run: wrote" not in two[1][1]
    got = zarr.open_group(str(tmp_path / "two" / "results.zarr"), mode="r")
    want = zarr.open_group(str(tmp_path / "one" / "results.zarr"), mode="r")
    for key in ("model_vis", "residual", "gains", "a1"):
        a, b = np.asarray(got[key]), np.asarray(want[key])
        print(f"{key}: {np.max(np.abs(a - b)) / np.max(np.abs(b)):.1e} of its largest cell apart")
        # Measured 8.9e-16 at most (residual; model_vis 3.9e-16, gains 1.2e-16, a1 0).
        # Relative to the largest cell, not per cell: a residual cell is data less model, so
        # its rounding scales with those (per cell 5e-14 where the residual is 0.85 of 160).
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * np.max(np.abs(b)), err_msg=key)
    assert (tmp_path / "two" / "baselines.png").is_file()

    # A second run into the same folder fails in process 0 (not empty); process 1 stops too.
    again = _two_processes(store, tmp_path / "two", timeout_s=300)
    assert again[0][0] == 2 and "is not empty; pass --overwrite" in again[0][1], again[0][1]
    assert again[1][0] == 2, again[1][1]
    assert "preparing the output folder failed in process 0 of 2" in again[1][1], again[1][1]

    # Resumed to 8 steps from the checkpoint each run wrote at its end: every process reads the
    # checkpoint and places its own devices' pieces, and the 2-process fit goes on exactly as
    # the 1-process one (whose resume equals an uninterrupted run: packages/tabascal tests).
    ((code, one),) = run_processes(
        lambda i, c: _argv(store, tmp_path / "one", "--devices", 4, "--resume", "--steps", 8),
        1, timeout_s=600,
    )  # fmt: skip
    assert code == 0, one
    resumed = _two_processes(store, tmp_path / "two", "--resume", "--steps", 8)
    for code, text in resumed:
        assert code == 0, text
    reference = json.loads((tmp_path / "one" / "summary.json").read_text())
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["steps"] == reference["steps"] == 8, (summary["steps"], reference["steps"])
    print("resumed to 8 steps, chi2_final:", summary["chi2_final"], reference["chi2_final"])
    print(f"chi2_final at 8 steps against 5: {abs(summary['chi2_final'] / chi2_at_five - 1):.1e}")
    assert summary["chi2_final"] == pytest.approx(reference["chi2_final"], rel=1e-15)  # equal
    # It did go on: measured 0.38 apart from 5 steps, so a floor of 1e-3 leaves 380x.
    assert summary["chi2_final"] != pytest.approx(chi2_at_five, rel=1e-3)
