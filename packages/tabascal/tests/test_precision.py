"""A run's precision: ``precision: double`` fits in float64 with jax's 64-bit mode scoped to the
call, so that the caller's mode (off, as shipped) is as it was afterwards."""

import jax
import numpy as np
import pytest
import zarr

from tabascal.config import run_config
from tabascal.fitting import job
from tabascal.store import read_observation

FEW_STEPS = {
    "fit": {"steps": 2, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 0},
    "output": {"plots": False},
}


@pytest.mark.parametrize(
    ("precision", "complex_dtype"), [("single", np.complex64), ("double", np.complex128)]
)
def test_run_computes_in_its_precision_and_leaves_the_64_bit_mode_off(
    small_store, tmp_path, precision, complex_dtype
):
    config = run_config.load({"precision": precision, **FEW_STEPS})
    assert not jax.config.jax_enable_x64
    summary = job.run(read_observation(small_store), tmp_path / "out", config, progress=False)
    assert not jax.config.jax_enable_x64
    results = zarr.open_group(str(tmp_path / "out" / "results.zarr"), mode="r")
    for name in ("sky_vis", "rfi_vis", "model_vis", "residual", "gains"):
        assert results[name].dtype == complex_dtype, name
    assert summary["steps"] == 2 and np.isfinite(summary["chi2_final"])
