"""rfi_vis_by_satellite and the per-satellite table of a sharded ``tabascal run`` on 4 virtual
devices equal the unsharded run's: the baseline axis (written block by block, with and without
the reuse plan) and the source axis."""

import json

import numpy as np
import pytest
import zarr
from conftest import require_devices

from tabascal.cli import main

N_DEVICES = 4
# quadrature_limit 1: the baselines needing 2 samples per integration go to the analytic
# operator, whose phase moments (with a satellite axis) the run keeps, sharded by rows.
# The per-antenna signal, whose runs these tests measured equal. With the shared signal the
# loss and gradient are equal on every route (test_sharding_shared_signal), but after three
# AdaBelief steps the unsharded and the baseline axis's runs are 1e-3 apart in chi-squared
# (measured 202.085 and 202.266): not yet explained. The schedule is set in full (3 + 1
# gradient steps, one trust-region step: the only run of the source axis's polish), not left
# to the fit's defaults.
CONFIG = """\
precision: double
fit:
  steps: 3
  second_phase_steps: 1
  polish: trust-region
  polish_steps: 1
  init: data
output:
  plot_baselines: 1
  per_satellite: always
rfi:
  signal: per_antenna
  max_groups: 2
  quadrature_limit: 1
  segments: 1
  terms: 3
  cubic_terms: 1
"""


@pytest.fixture(scope="module")
def store(small_store):
    require_devices(N_DEVICES)
    return small_store


def _run(store, out, config, *extra):
    argv = ["run", "-c", str(config), "--data", str(store), "-o", str(out), "-q"]
    assert main([*argv, "--devices", str(N_DEVICES), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def test_sharded_runs_write_the_per_satellite_cubes_of_the_unsharded_run(store, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    runs = {
        "none": ("--shard-axis", "none"),
        "baseline": ("--shard-axis", "baseline"),
        "reuse": ("--shard-axis", "baseline", "--reuse-plan"),
        "source": ("--shard-axis", "source"),
    }
    summaries = {name: _run(store, tmp_path / name, config, *args) for name, args in runs.items()}
    plain = summaries["none"]
    assert plain["model"]["rfi_phase_cache"]["groups"]["analytic t1 f2"]["kept"]
    assert summaries["baseline"]["read_by_block"] and summaries["baseline"]["n_devices"] == 4
    want = np.asarray(
        zarr.open_group(str(tmp_path / "none" / "results.zarr"), mode="r")["rfi_vis_by_satellite"]
    )
    assert want.shape == (2, 28, 2, 30) and want.dtype == np.complex128
    scale = np.max(np.abs(want))
    # float64 fits after 3 steps, the parameters apart by what each route's rounding makes of
    # them (as in test_sharding_run). Measured, cubes relative to their largest value and the
    # table's figures relative: baseline 3.6e-10 and 1.4e-10 (4.1e-16 and 2.2e-16 before the
    # sky's bounds from the field: its one constant mode a baseline, which the sky's mean
    # already fits at the data start, has a gradient that is rounding alone, and AdaBelief's
    # first, nearly sign-like update makes a route-dependent step of it); reuse and source
    # 4.7e-16 and 7.3e-12 before.
    bounds = {"baseline": 5e-9, "reuse": 5e-9, "source": 1e-8}
    for name, bound in bounds.items():
        got = zarr.open_group(str(tmp_path / name / "results.zarr"), mode="r")
        got = np.asarray(got["rfi_vis_by_satellite"])
        apart = np.max(np.abs(got - want)) / scale
        assert got.shape == want.shape
        # Each row nearest the same row of the plain run: no permutation left in place.
        distance = np.abs(got[:, :, None] - want[:, None]).sum(axis=(0, 3, 4))
        np.testing.assert_array_equal(np.argmin(distance, axis=1), np.arange(want.shape[1]))
        assert summaries[name]["rfi_vis_by_satellite"] == plain["rfi_vis_by_satellite"]
        figures = []
        for entry, reference in zip(
            summaries[name]["satellites"], plain["satellites"], strict=True
        ):
            assert entry["name"] == reference["name"]
            assert entry["in_view_fraction"] == reference["in_view_fraction"]
            for key in ("peak_over_noise", "rms_over_noise"):
                figures.append(abs(entry[key] / reference[key] - 1))
        print(f"{name}: cubes {apart:.1e}, table {max(figures):.1e} from one device's")
        assert apart <= bound and max(figures) <= bound, name
        assert (tmp_path / name / "satellites.png").exists()
