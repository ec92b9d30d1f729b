"""The benchmarks' plumbing at tiny sizes, each in its own process: memory and step cost (a
tiny preset on 2 virtual devices), science scores, the RFI floor, the Gauss-Newton bound and
the accelerator session. The operator benchmarks' are in tests/test_benchmarks_operators.py."""

import json
import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import ROOT
from conftest import run_benchmark as _run_benchmark

TINY = '{"array": {"n_stations": 8}, "observation": {"n_time": 30}}'


#: The analytic operator's options cheapest to compile (one piece, three curvature terms, one
#: cubic term, three time coefficients, one point across a channel): the phase moments, which
#: phase cache never forms inside every stage, more than double a stage's compile time. No
#: figure checked here depends on them beyond the moments' bytes, which the record gives.
CHEAP_RFI = """\
rfi:
  segments: 1
  terms: 3
  cubic_terms: 1
  time_stencil: 3
  freq_stencil: 1
"""


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """benchmarks/memory.py's records of 4 cases in 2 phase-cache modes. The L-BFGS polish
    compiles in half the Levenberg-Marquardt polish's time, and no figure checked here is
    the polish's."""
    folder = tmp_path_factory.mktemp("memory")
    out, config = folder / "memory.json", folder / "cheap_rfi.yaml"
    config.write_text(CHEAP_RFI)
    _run_benchmark(
        "memory.py", "--preset", "demo",
        "--override", TINY, "--channels", "2", "--devices", "1", "2", "--axes", "none",
        "baseline", "--rfi", "analytic", "--phase-cache", "always", "never", "--row-blocks", "1",
        "2", "--polish", "lbfgs", "--config", str(config), "--json", str(out), compile_only=True,
    )  # fmt: skip
    return json.loads(out.read_text())


# (axis, devices, row_blocks): at one device the baseline axis runs only in blocks of rows.
CASES = [("none", 1, 1), ("baseline", 1, 2), ("baseline", 2, 1), ("baseline", 2, 2)]


def _record(records, axis, devices, row_blocks, mode):
    (record,) = [
        r for r in records
        if (r["axis"], r["devices"], r["row_blocks"], r["phase_cache_mode"])
        == (axis, devices, row_blocks, mode)
    ]  # fmt: skip
    return record


def test_memory_records_one_peak_per_device_for_each_axis_and_device_count(records):
    cases = {(r["axis"], r["devices"], r["row_blocks"], r["phase_cache_mode"]) for r in records}
    assert cases == {(*case, m) for case in CASES for m in ("always", "never")}
    for r in records:
        for key in ("preset", "channels", "date", "commit", "machine", "jax"):
            assert key in r, key
        assert len(r["peak_bytes"]) == r["devices"] == len(r["placed_bytes"])
        # a fixed budget (--phase-cache-mb, 1024 by default), not this host's memory; k / (k +
        # 1) of it in k blocks of rows, each of which copies its share of the moments
        k = r["row_blocks"]
        assert r["phase_cache"]["budget_mib"] == (
            1024.0 if k == 1 else 2**30 * k // (k + 1) / 2**20
        )
        assert r["phase_cache"]["budget_from"].startswith("phase_cache_mb")
        assert ("row_blocks" in r["phase_cache"]["budget_from"]) == (k > 1)
        assert set(r["stages"]) == {
            "setup", "optimiser_init", "diagnostics", "step", "polish", "predict", "export"
        }  # fmt: skip
        # The peak is the largest stage's resident bytes plus its working set.
        for d in range(r["devices"]):
            expected = max(
                s["resident_bytes"][d] + s["outputs"] + s["temporaries"] - s["aliased"]
                for s in r["stages"].values()
            )
            assert r["peak_bytes"][d] == expected


def test_kept_moments_are_the_step_arguments_the_compiled_program_adds(records):
    """The compiled step's arguments grow by the kept moments' bytes the plan reports, counted
    by XLA's buffer assignment apart from tabascal's own sizing, less the phases and delays the
    step no longer reads (jit drops unused arguments): float32 (n_ant, n_src, n_freq, n_time)
    and (n_ant, n_src, n_time, 4)."""
    for case in CASES:
        kept, formed = (_record(records, *case, mode) for mode in ("always", "never"))
        ((group, entry),) = kept["phase_cache"]["groups"].items()
        assert group.startswith("analytic") and entry["kept"]
        assert not formed["phase_cache"]["groups"][group]["kept"]
        added = kept["stages"]["step"]["arguments"] - formed["stages"]["step"]["arguments"]
        moments = entry["mib_per_device"] * 2**20
        unread = 4 * kept["n_ant"] * kept["n_src"] * kept["n_time"] * (kept["channels"] + 4)
        print(f"{case}: step arguments +{added} B; moments {moments} B, phases+delays {unread} B")
        # Measured: + moments - phases - delays - 24 B (the group's scalar tables), every case
        # (with blocks of rows, the moments of every block a device holds).
        assert moments - unread - 64 <= added <= moments


def test_baseline_axis_places_each_device_its_block_of_the_data(records):
    two = _record(records, "baseline", 2, 1, "never")
    one = _record(records, "none", 1, 1, "never")
    # 28 baselines on 2 devices: 14 rows each of complex64 vis, bool flags and float32 noise
    # (2 channels, 30 cells), counted here from the shapes; every device holds at least that,
    # and less than the whole model one device holds.
    n_rows, cells = 14, 2 * 30
    block = n_rows * cells * 8 + n_rows * cells + n_rows * 4
    assert two["n_bl"] == 28
    for placed in two["placed_bytes"]:
        assert block <= placed < one["placed_bytes"][0]


def test_science_scores_agree_with_the_run_summary_and_the_twin_has_no_rfi(tmp_path):
    """benchmarks/science.py at a tiny size: its RFI residual (from results.zarr and the
    truth) equals the one tabascal run writes in summary.json, computed apart; the twin's fit
    has no RFI term; the goals are judged from the figures."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import science
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    tiny = {"array": {"n_stations": 5}, "observation": {"n_time": 10, "n_freq": 3}}
    # no polish: its program is the fits' largest to compile, and no score checked here
    # depends on how far the fits got
    record = science.score("tiny", tiny, 5, tmp_path, {"fit": {"polish_steps": 0}})
    summary = json.loads((tmp_path / "tiny-fit" / "summary.json").read_text())
    twin = json.loads((tmp_path / "tiny-twin-fit" / "summary.json").read_text())
    # measured 2e-8 apart (float32 results, float64 sums)
    assert record["rfi_over_noise"] == pytest.approx(
        summary["truth"]["rfi"]["rmse_over_noise"], rel=1e-6
    )
    assert twin["model"]["rfi_groups"] == {} and twin["truth"]["rfi"]["rmse"] == 0.0
    assert record["twin_chi2"] == twin["chi2_final"]  # --twins-only's figures are these
    assert record["n_satellites"] == 2 and 0 < record["flagged_by_3_sigma"] <= 1
    assert record["sky_over_twin"] == record["sky_over_noise"] / record["twin_sky_over_noise"]
    assert science._met(record)["rfi"] == (record["rfi_over_noise"] <= 0.2)


def test_science_scores_leave_out_a_channel_missing_from_the_data(tmp_path):
    """A channel flagged in every cell has nothing to clean: the scores are of the others
    (an error of 0.1 of the noise in every one of their cells scores 0.1), and what the fit
    predicts in the missing channel (an error of 5) is given apart."""
    import zarr

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import science
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    n_bl, n_freq, n_time, noise = 3, 4, 5, 2.0
    rng = np.random.default_rng(0)
    rfi = rng.normal(size=(n_bl, n_freq, n_time)) * (1 + 1j)
    error = np.full(rfi.shape, 0.1 * noise, complex)
    error[:, 2] = 5 * noise
    flags = np.zeros(rfi.shape, bool)
    flags[:, 2] = True
    gains = np.ones((3, n_freq, n_time), complex)
    truth = SimpleNamespace(rfi_vis=rfi, sky_vis=np.zeros_like(rfi), gains=1.25 * gains)
    obs = SimpleNamespace(truth=truth, a1=[0, 0, 1], a2=[1, 2, 2], noise=noise, flags=flags)
    group = zarr.open_group(str(tmp_path / "results.zarr"), mode="w")
    group.create_array("rfi_vis", data=(rfi + error / 1.5625).astype(np.complex64))
    group.create_array("sky_vis", data=np.zeros_like(rfi, np.complex64))
    group.create_array("gains", data=(1.25 * gains).astype(np.complex64))
    scores = science.score_results(obs, tmp_path / "results.zarr")
    # float32 results: measured 1e-8 from 0.1 and 5
    assert scores["rfi_over_noise"] == pytest.approx(0.1, rel=1e-6)
    assert scores["missing_channels"] == [2]
    assert scores["rfi_over_noise_missing_channels"] == pytest.approx(5, rel=1e-6)
    assert scores["sky_over_noise"] == 0 and scores["gains_over_spread"] == 0


def test_rfi_floor_of_exact_amplitudes_is_within_the_averaging_tolerance_for_gnss(tmp_path):
    """benchmarks/rfi_floor.py's measure at a tiny size: the operators fed the simulation's
    exact amplitudes reproduce the true RFI of slow (GNSS) satellites to within the averaging
    error the fine sampling is sized for (rfi.tolerance, 0.1 of the noise), and more closely
    with the amplitude interpolated across three channels than held constant
    in each."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import rfi_floor
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    tiny = {"array": {"n_stations": 5}, "observation": {"n_time": 10, "n_freq": 3}}
    simulate(simulation_config("demo", tiny), tmp_path / "tiny.zarr", progress=False)
    obs = read_observation(tmp_path / "tiny.zarr")
    (constant, groups), (value, _) = (rfi_floor.floor(obs, 3, freq) for freq in (1, 3))
    print(f"floor {value:.4f} x noise ({constant:.4f} constant across channels), groups {groups}")
    # Measured 0.042 (0.058 constant across channels; the rest here is the time sampling's, at
    # one or two samples); the bound is the tolerance the sampling is built to (rfi.tolerance).
    assert groups and value < 0.1 and value < 0.85 * constant, (value, constant)


def _step_time():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import step_time
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return step_time


def test_step_cost_counts_each_loop_body_as_often_as_the_loop_runs():
    """XLA's cost analysis counts a loop's body once; step_time.step_cost counts it per trip:
    a 3-step lax.map of a 5-step fori_loop of a (64, 64) matmul and a sine is 15 matmuls of
    2 * 64**3 flops and 15 * 64**2 sines, counted here in closed form."""
    import jax
    import jax.numpy as jnp

    n = 64

    def nested(a, xs):
        return jax.lax.map(lambda x: jax.lax.fori_loop(0, 5, lambda i, y: jnp.sin(y @ a), x), xs)

    compiled = jax.jit(nested).lower(jnp.ones((n, n)), jnp.ones((3, n, n))).compile()
    cost = _step_time().step_cost(compiled)
    assert cost["loops"] == 2 and cost["loops_of_unknown_trip"] == 0
    # Measured: 40 flops over the matmuls' (the loop counters), 5e-6 of them.
    assert cost["per_device"]["flops"] == pytest.approx(15 * 2 * n**3, rel=5e-4)
    assert cost["per_device"]["transcendentals"] == 15 * n**2
    # XLA's own figure is one trip of each loop: one matmul.
    assert cost["xla_loops_once"]["flops"] == pytest.approx(2 * n**3, rel=5e-4)


@pytest.fixture(scope="module")
def step_costs(tmp_path_factory):
    """benchmarks/step_time.py's costs, all-analytic RFI: one group, whose pieces compile in
    less time than the hybrid route's three."""
    out = tmp_path_factory.mktemp("step_time") / "step_time.json"
    _run_benchmark(
        "step_time.py", "--cost-only",
        "--devices", "2", "--stations", "8", "--channels", "2", "--times", "20",
        "--satellites", "2", "--rfi", "analytic", "--axes", "none", "source",
        "--phase-cache", "never", "--json", str(out), compile_only=True,
    )  # fmt: skip
    return {r["axis"]: r for r in json.loads(out.read_text())}


def test_step_time_cost_only_reports_each_axis_work_per_device_and_over_devices(step_costs):
    assert set(step_costs) == {"none", "source"}
    for r in step_costs.values():
        for key in ("axis", "devices", "n_bl", "step_seconds_median", "ratio_to_source"):
            assert key in r, key
        assert r["step_seconds_median"] is None and r["cost_only"]
        for k in ("flops", "bytes_accessed", "transcendentals"):
            assert r[f"{k}_per_device"] >= r[f"{k}_per_device_xla_loops_once"] > 0
            assert r[f"{k}_total"] == r[f"{k}_per_device"] * r["devices"]
            none = step_costs["none"][f"{k}_per_device"]
            assert r[f"{k}_total_over_none"] == pytest.approx(r[f"{k}_total"] / none)
        assert set(r["flops_per_device_by_piece"]) == {"rfi", "sky", "gains", "other"}
        step_memory = r["step_memory_per_device"]
        assert set(step_memory) == {"arguments", "outputs", "temporaries", "aliased", "peak"}
        assert step_memory["arguments"] > 0 and step_memory["temporaries"] > 0
        assert set(r["flops_per_device_by_rfi_group"]) == set(r["rfi_groups"])
    assert step_costs["source"]["devices"] == 2 and step_costs["none"]["devices"] == 1


def test_source_axis_on_two_devices_does_less_work_per_device_than_one_device(step_costs):
    """With the phase moments formed at every step on both (phase cache never), splitting the
    satellites over 2 devices leaves each less RFI work than the one device's; the sky and the
    gains are replicated on the source axis, the same program as one device's."""
    source, none = step_costs["source"], step_costs["none"]
    # Measured: 0.0285 and 0.0477 GFLOP per device (0.60 of one device's); RFI term 0.0282
    # and 0.0474; sky 8.29e-5 on both.
    assert source["flops_per_device"] < none["flops_per_device"]
    by_piece = source["flops_per_device_by_piece"], none["flops_per_device_by_piece"]
    assert by_piece[0]["rfi"] < by_piece[1]["rfi"]
    assert by_piece[0]["sky"] == by_piece[1]["sky"]


def test_gains_bound_curvature_is_the_gauss_newton_matrix_of_a_closed_form_residual():
    """gains_bound._curvature of r(theta) = sin(A theta) + b is J^T J + I with
    J = diag(cos(A theta)) A, here in numpy; column blocks of 5 that do not divide 13."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gains_bound
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rng = np.random.default_rng(3)
    a, b, theta = rng.normal(size=(40, 13)), rng.normal(size=40), rng.normal(size=13)
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        h = gains_bound._curvature(
            lambda t: jnp.sin(jnp.asarray(a) @ t) + b, jnp.asarray(theta), block=5
        )
    finally:
        jax.config.update("jax_enable_x64", previous)
    jac = np.cos(a @ theta)[:, None] * a
    expected = jac.T @ jac + np.eye(13)
    # Measured: 3.6e-15 apart at most, against entries of up to 40.
    np.testing.assert_allclose(h, expected, rtol=0, atol=4e-13)


def _tiny_gpu_case(folder, *options) -> dict:
    """The record of ``gpu.py --tiny --skip-kernels`` with ``options``, one case, run whole."""
    _run_benchmark(
        "gpu.py", "--tiny", "--skip-kernels",
        "--out", str(folder), *options,
    )  # fmt: skip
    (path,) = folder.glob("gpu_*.json")
    (record,) = json.loads(path.read_text())
    assert "error" not in record, record.get("progress")
    return record


def test_gpu_benchmark_fits_each_case_in_its_own_process_and_records_it(tmp_path):
    """The accelerator session's plumbing at its CPU size (2 channels in 2 blocks of rows)."""
    record = _tiny_gpu_case(tmp_path, "--rfi", "hybrid", "--steps", "3")
    assert (record["channels"], record["rfi"], record["row_blocks"]) == (2, "hybrid", 2)
    assert "cpu" in record["device"].lower()
    assert len(record["step_seconds"]) == 3 and record["step_seconds_median"] > 0
    # a prior-mean start of data drawn from the model: the steps bring chi-squared down
    assert record["chi2_after_steps"] < record["chi2_initial"]
    assert len(record["polish_cg_iterations"]) == 1 <= record["polish_cg_iterations"][0] <= 3
    assert record["step_memory"]["temporaries"] > 0 and record["polish_step_memory"]
    assert record["rfi_phase_cache"]["groups"] == {}  # the tiny hybrid's groups: quadrature


def test_gpu_benchmark_keeps_the_phase_moments_as_a_fit_does(tmp_path):
    """The unblocked case is placed as ``tabascal run`` places a model on one device: the
    analytic groups' phase moments kept (rfi.phase_cache auto), for the draw and the steps;
    no polish, whose program the test above compiles."""
    record = _tiny_gpu_case(
        tmp_path, "--rfi", "analytic", "--row-blocks", "2=1", "--steps", "2", "--polish-steps", "0"
    )
    assert record["row_blocks"] == 1 and record["rfi_groups"] == {"analytic t1 f3": 28}
    # navigation satellites over 8 stations: no cubic terms (rfi.analytic_options auto)
    assert record["rfi_analytic_options"]["analytic t1 f3"]["cubic_terms"] == 0
    cache = record["rfi_phase_cache"]
    assert cache["groups"]["analytic t1 f3"]["kept"] and cache["kept_mib_per_device"] > 0
    assert record["chi2_after_steps"] < record["chi2_initial"]
    (progress,) = tmp_path.glob("gpu_*_progress_2_analytic.txt")
    drawn = re.search(r"with (\S+) MiB of phase moments kept", progress.read_text())
    assert float(drawn[1]) == pytest.approx(cache["kept_mib_per_device"], rel=1e-2)  # the draw
