"""A run holding a satellite, a ground transmitter and an aircraft fits on four devices (the
baseline axis) as on one."""

import numpy as np
import pytest
import zarr
from conftest import SMALL, require_devices, run_summary

from tabascal.simulate import simulate, simulation_config
from tabascal.store import read_meta

N_DEVICES = 4
# test_sharding_run's configuration: float64, three gradient steps from the data, the
# per-antenna signal, a quadrature and an analytic group.
CONFIG = """\
precision: double
fit:
  steps: 3
  second_phase_steps: 0
  polish_steps: 0
  init: data
output:
  plots: false
rfi:
  signal: per_antenna
  max_groups: 2
  quadrature_limit: 8
  segments: 1
  terms: 3
  cubic_terms: 1
"""
EMITTERS = {
    "satellites": {"count": 1},
    "emitters": {
        "ground": [
            {"name": "TOWER", "lat_deg": -26.70, "lon_deg": 116.90, "height_m": 500.0,
             "eirp_dbw_hz": -100.0}
        ],
        "aircraft": [
            {"name": "JET", "lat_deg": -26.90, "lon_deg": 116.78, "heading_deg": 10.0,
             "eirp_dbw_hz": -110.0}
        ],
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    require_devices(N_DEVICES)
    path = tmp_path_factory.mktemp("emitters") / "obs.zarr"
    simulate(simulation_config("demo", {**SMALL, **EMITTERS}), path)
    return path


def test_a_run_with_every_kind_of_emitter_on_four_devices_equals_one(store, tmp_path):
    assert read_meta(store).orbits.kinds == ("satellite", "ground", "aircraft")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    plain = run_summary(store, tmp_path / "none", "none", config)
    sharded = run_summary(store, tmp_path / "baseline", "baseline", config)
    assert sharded["model"]["n_devices"] == N_DEVICES and plain["n_devices"] == 1
    for key in ("chi2_init", "chi2_final"):
        print(f"{key}: {abs(sharded[key] / plain[key] - 1):.1e} apart")
    # measured 1.1e-15 apart at the start and 6.2e-11 after the three steps, which amplify the
    # routes' rounding (test_sharding_run)
    assert sharded["chi2_init"] == pytest.approx(plain["chi2_init"], rel=2e-13)
    assert sharded["chi2_final"] == pytest.approx(plain["chi2_final"], rel=5e-9)
    got = zarr.open_group(str(tmp_path / "baseline" / "results.zarr"), mode="r")
    want = zarr.open_group(str(tmp_path / "none" / "results.zarr"), mode="r")
    for key in ("rfi_vis", "rfi_vis_by_satellite"):
        a, b = np.asarray(got[key]), np.asarray(want[key])
        scale = np.max(np.abs(b))
        print(f"{key}: {np.max(np.abs(a - b)) / scale:.1e} of the largest apart")
        # measured 9.4e-11 (rfi_vis) and 1.6e-10 (per emitter), from the fitted parameters
        assert np.max(np.abs(a - b)) <= 5e-9 * scale, key
    # Each emitter's own cube: the three kinds each carry RFI.
    per_emitter = np.asarray(want["rfi_vis_by_satellite"])
    assert per_emitter.shape[0] == 3 and np.all(np.abs(per_emitter).max(axis=(1, 2, 3)) > 0)
