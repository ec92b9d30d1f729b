"""Runs of 2 processes x 2 virtual CPU devices on 127.0.0.1 (jax.distributed with gloo)."""

from pathlib import Path

import numpy as np
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
