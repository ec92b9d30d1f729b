"""The operator and step benchmarks' plumbing at tiny sizes, each in its own process: the
analytic operator's options, the moments' layouts, the per-operation profile, the curvature
counts and the step's pieces. Apart from tests/test_benchmarks.py so that pytest-xdist's
``--dist loadfile`` can run the two files on two workers."""

import json
import sys

import numpy as np
import pytest
from conftest import ROOT
from conftest import run_benchmark as _run_benchmark


def test_step_pieces_reports_each_piece_and_the_polish_without_the_gradient_state(tmp_path):
    out = tmp_path / "pieces.json"
    _run_benchmark(
        "step_pieces.py", "--preset", "demo",
        "--channels", "2", "--groups", "2", "--polish", "trust-region", "--json", str(out),
        compile_only=True,
    )  # fmt: skip
    (record,) = json.loads(out.read_text())
    pieces = record["pieces"]
    assert set(pieces) == {
        "loss", "value_and_grad", "hvp", "gauss_newton", "gradient_step", "polish_step"
    }  # fmt: skip
    assert record["polish"] == "trust-region"
    assert record["polish_curvature"] == "hessian"  # the fit's own, without --curvature
    assert pieces["gauss_newton"]["temporaries"] > 0
    # Beyond what the gradient reads (the parameters, the inputs), the gradient phases' step
    # takes AdaBelief's two moments of every parameter; beyond what a Hessian-vector product
    # reads (the same and the vector) the polish's step takes its scalars and the RFI groups'
    # index tables, which jax does not prune from inside its loop, not a copy of the
    # parameters. Measured on the demo at 2 channels: 5728 and 1164 bytes, 2856 of
    # parameters.
    params = record["parameter_bytes"]
    gradient = pieces["gradient_step"]["arguments"] - pieces["value_and_grad"]["arguments"]
    polish = pieces["polish_step"]["arguments"] - (pieces["hvp"]["arguments"] - params)
    assert 2 * params <= gradient < 2 * params + 64, (gradient, params)
    assert 0 < polish < params / 2, (polish, params)
    sky = record["sky"]
    assert sky["own_modes"] <= sky["shared_modes"] == record["n_bl"] * np.prod(sky["box"])
    assert sky["grouped"][0]["modes"] == sky["shared_modes"]


def test_analytic_options_benchmark_times_every_option_set_at_every_budget(tmp_path):
    out = tmp_path / "options.json"
    _run_benchmark(
        "analytic_options.py", "--antennas", "3",
        "--rounds", "2", "--options", "2,3", "1,0,2", "--budgets-mb", "1", "64", "--out", str(out),
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["dims"]["elements"] == 3 * 30 * 32 * 7 and record["commit"]
    sets = [
        (r["segments"], r["cubic_terms"], r["channel_terms"], r["memory_budget_mb"])
        for r in record["results"]
    ]
    assert sets == [(2, 3, 0, 1.0), (1, 0, 2, 1.0), (2, 3, 0, 64.0), (1, 0, 2, 64.0)]
    assert [r["channel_bend"] for r in record["results"]] == [False] * 4
    for row in record["results"]:
        assert len(row["forward_s"]) == len(row["value_and_grad_s"]) == 2
        assert row["forward_ns_per_element"] > 0 and row["value_and_grad_ns_per_element"] > 0


def test_analytic_options_benchmark_across_channels_with_kept_moments(tmp_path):
    out = tmp_path / "options.json"
    _run_benchmark(
        "analytic_options.py", "--antennas", "3", "--channels", "2", "--kept",
        "--rounds", "1", "--options", "1,0,2,1", "--out", str(out),
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["dims"]["elements"] == 3 * 30 * 2 * 32 * 7 and record["dims"]["n_freq"] == 2
    (row,) = record["results"]
    for mode in ("forward", "value_and_grad", "kept_value_and_grad", "kept_value_and_grad_centres"):
        assert len(row[f"{mode}_s"]) == 1 and row[f"{mode}_ns_per_element"] > 0


def test_moment_layout_benchmark_times_each_case_in_each_layout(tmp_path):
    out = tmp_path / "layout.json"
    _run_benchmark(
        "moment_layout.py", "--elements", "100",
        "--rounds", "2", "--options", "1,1", "--out", str(out),
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert record["elements"] == 7168 and record["platform"] == "cpu" and record["commit"]
    cases = [(r["case"], r["layout"]) for r in record["results"]]
    assert cases == [
        ("expansion", "flat"), ("expansion", "tiled"), ("moments", "flat"), ("moments", "tiled"),
        ("nonzero", "flat"), ("products", "block"), ("products", "tiled"),
    ]  # fmt: skip
    for row in record["results"]:
        assert len(row["times_s"]) == 2 and row["ns"] > 0


def test_op_profile_benchmark_records_costs_and_each_operations_own_time(tmp_path):
    out = tmp_path / "profile.json"
    _run_benchmark("op_profile.py", "--antennas", "3", "--hlo", str(tmp_path), "--out", str(out))
    record = json.loads(out.read_text())
    assert record["dims"]["elements"] == 3 * 30 * 32 * 7 and record["commit"]
    for mode in ("forward", "value_and_grad"):
        result = record["results"][mode]
        assert result["flops_per_element"] > 0 and result["bytes_per_element"] > 0
        assert result["ops"] == []  # the CPU backend records no per-operation device events
        assert "HloModule" in (tmp_path / f"{mode}.hlo.txt").read_text()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import op_profile

    # a loop from 0 to 100 ns with two operations in its body, then one after it
    ops = op_profile.own_times(
        [
            ("%while.1 = (s32[]) while(...)", 0, 100),
            ("%fusion.2 = f32[8,128]{1,0} fusion(...)", 10, 20),
            ("%copy.3 = f32[7]{0} copy(...)", 40, 10),
            ("%fusion.2 = f32[8,128]{1,0} fusion(...)", 60, 5),
            ("%copy.3 = f32[7]{0} copy(...)", 100, 7),
        ]
    )
    assert {k: v[:2] for k, v in ops.items()} == {
        "%while.1": [65, 1], "%fusion.2": [25, 2], "%copy.3": [17, 2]
    }  # fmt: skip
    assert ops["%fusion.2"][2] == "f32[8,128]{1,0}"


def test_curvature_benchmark_counts_the_curved_elements_at_one_and_two_pieces(tmp_path):
    out = tmp_path / "curvature.json"
    _run_benchmark("curvature.py", "--scenarios", "leo-rising", "--json", str(out))
    (record,) = json.loads(out.read_text())  # the rising LEO's one analytic group
    assert record["scenario"] == "leo-rising" and record["group"].startswith("analytic")
    # its largest |b| (0.032 rad) below float32's switch (0.203) even at one piece, which
    # rfi.analytic_options auto therefore takes
    assert 0 < record["max_b_rad"] < record["switch_rad"] / 2
    assert record["curved_one_piece"] == record["curved_two_pieces"] == 0
    assert record["auto_options"]["segments"] == 1
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import curvature

    # two pairs of three antennas, one source, two integrations, one channel at the top of
    # which nu = 1000 MHz; T/2 = 1 s, so b = pi * 1000 * d2: pair (0, 1) 0.1 and 0.3 rad,
    # pair (0, 2) 0.9 and 0 rad
    class Obs:
        a1, a2 = np.array([0, 0]), np.array([1, 2])
        freqs_hz, chan_width, int_time = np.array([999.95e6]), 0.1e6, 2.0

    d2 = np.zeros((3, 1, 2, 3))
    d2[1, 0, :, 2] = np.array([0.1, 0.3]) / (np.pi * 1000)
    d2[2, 0, :, 2] = np.array([0.9, 0.0]) / (np.pi * 1000)
    counted = curvature.curved_fractions(Obs, np.array([True, True]), d2, 0.2)
    assert counted["max_b_rad"] == pytest.approx(0.9, rel=1e-12)
    assert counted["curved_one_piece"] == 0.5 and counted["curved_two_pieces"] == 0.25
