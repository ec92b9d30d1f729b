"""Runs of 2 processes x 2 virtual CPU devices on 127.0.0.1 (jax.distributed with gloo)."""

from pathlib import Path

from multiprocess import run_processes

WORKERS = Path(__file__).parent / "workers"


def _collectives(fail_in: int):
    return run_processes(
        lambda i, coordinator: [WORKERS / "collectives.py", coordinator, i, fail_in], 2,
        timeout_s=120,
    )  # fmt: skip


def test_each_process_holds_its_rows_and_gathers_every_block():
    results = _collectives(fail_in=-1)
    for code, text in results:
        assert code == 0, text
        assert "gathered equal True" in text, text
    # 8 rows on 4 devices: process 0 owns rows 0-3 (blocks at 0 and 2), process 1 rows 4-7.
    assert "local rows [0, 2]" in results[0][1]
    assert "local rows [4, 6]" in results[1][1]
    assert "writer True" in results[0][1] and "writer False" in results[1][1]


def test_a_failure_in_one_process_stops_the_other_with_its_message():
    (code0, text0), (code1, text1) = _collectives(fail_in=1)
    assert code1 == 2 and "own failure: out/ is not empty" in text1, text1
    assert code0 == 3, text0
    assert (
        "checking the output folder failed in process 1 of 2 "
        "(FileExistsError: out/ is not empty)" in text0
    ), text0
