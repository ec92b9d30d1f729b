"""The README's main job: ``tabascal demo`` at its shipped configuration, as a user runs it,
with every figure it prints checked against the summary.json it wrote."""

import json
import re
import subprocess
import sys

import pytest


def _number(text: str, pattern: str) -> list[str]:
    found = re.search(pattern, text, re.MULTILINE)
    assert found, f"no line matching {pattern!r} in:\n{text}"
    return list(found.groups())


def test_demo_prints_what_its_summary_holds(tmp_path):
    command = [sys.executable, "-m", "tabascal", "demo", "-q", "-o", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    summary = json.loads((tmp_path / "fit" / "summary.json").read_text())
    # 200 gradient steps, then Levenberg-Marquardt steps until converged (at most 60)
    assert summary["fit"]["stopped"] == "converged" and summary["shard_axis"] == "none"
    assert 200 < summary["steps"] < 260 and summary["fit"]["passes"] > summary["steps"]
    chi2_init, chi2_final = _number(out, r"reduced chi-squared\s+(\S+) -> (\S+)$")
    assert float(chi2_init) == pytest.approx(summary["chi2_init"], rel=1e-3)
    assert float(chi2_final) == pytest.approx(summary["chi2_final"], rel=1e-3)
    (steps,) = _number(out, r"^\s+steps\s+(\d+) in")
    assert int(steps) == summary["steps"]
    for name in ("raw_data", "sky", "rfi"):
        rmse, over = _number(out, rf"^\s+{name}\s+(\S+)\s+(\S+)$")
        assert float(rmse) == pytest.approx(summary["truth"][name]["rmse"], rel=1e-3)
        assert float(over) == pytest.approx(summary["truth"][name]["rmse_over_noise"], rel=1e-3)
    (gains,) = _number(out, r"^\s+gains\s+(\S+)$")
    assert float(gains) == pytest.approx(summary["truth"]["gains"]["rmse"], rel=1e-3)
    # The memory table: the fit's own step on one device and the baseline axis compiled over
    # the 4 virtual devices the session gives, each against the one-device figures.
    (devices,) = _number(out, r"on (\d+) cpu device\(s\)")
    none = _number(out, r"^\s+none\s+1\s+(\S+)\s+1\.00\s+(\S+)\s+1\.00\s+(\S+)\s+1\.00$")
    step = summary["step_memory"]
    working = (step["outputs"] + step["temporaries"] - step["aliased"]) / 2**20
    assert float(none[0]) == pytest.approx(step["arguments"] / 2**20, abs=0.006)
    assert float(none[1]) == pytest.approx(working, abs=0.006), (none, step)
    baseline = _number(out, rf"^\s+baseline\s+{devices}\s+\S+\s+(\S+)\s+\S+\s+(\S+)")
    assert int(devices) == 4 and 0 < float(baseline[0]) < 1 and 0 < float(baseline[1]) < 1
    # The science of the shipped demo (docs/usage.md): measured 0.111 of the noise for the RFI
    # left in the cleaned data (2026-12-07, Levenberg-Marquardt; 0.110 with 10 Newton steps,
    # 0.175 with the L-BFGS polish, 0.347 before the shared signal, the fringe start and the
    # polish were the defaults) and chi-squared 0.991 (0.938 before the sky's bounds).
    assert summary["truth"]["rfi"]["rmse_over_noise"] < 0.15
    assert 0.97 < summary["chi2_final"] < 1.03
