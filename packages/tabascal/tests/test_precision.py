"""A run's precision: ``precision: double`` fits in float64 with jax's 64-bit mode scoped to the
call, so that the caller's mode (off, as shipped) is as it was afterwards."""

import re
import warnings

import jax
import numpy as np
import pytest
import zarr

from tabascal.fitting import job, run_config
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


@pytest.mark.slow
def test_plan_sizes_a_double_run_in_float64_and_leaves_the_64_bit_mode_off(small_store, capsys):
    """``tabascal plan`` builds the step in the run's precision: a double run's step needs
    about twice a single one's temporaries (measured 1.3 MiB against 0.7; before the plan took
    the run's precision, float64 requests were truncated to float32 and it reported 0.7)."""
    from tabascal.cli.main import main

    temporaries = {}
    for precision in ("single", "double"):
        with warnings.catch_warnings():
            # jax warns where a float64 array is truncated to float32
            warnings.filterwarnings("error", message=".*requested.*is not available")
            assert main(["plan", "--data", str(small_store), "--precision", precision]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if "optimisation step" in x]
        temporaries[precision] = float(re.search(r"temporaries ([\d.]+) MiB", line).group(1))
        assert not jax.config.jax_enable_x64
    assert 1.5 <= temporaries["double"] / temporaries["single"] <= 2.5, temporaries
