"""The model from metadata alone: mergeable data statistics, abstract_model against build, and
the compiled stages' memory from abstract shapes against the same from real arrays."""

import jax
import numpy as np
import pytest

from tabascal.fitting import optimiser, run_config
from tabascal.model import joint
from tabascal.model.data_stats import BINS_PER_OCTAVE, DataStats, MeanPower
from tabascal.planning import stages
from tabascal.simulate import presets
from tabascal.store import read_observation

# The overrides of conftest's small_store (the demo preset at 8 stations, 2 channels, 30 cells).
SMALL = {"array": {"n_stations": 8}, "observation": {"n_time": 30, "n_freq": 2}}


@pytest.fixture(scope="module")
def obs(small_store):
    return read_observation(small_store)


@pytest.fixture(scope="module")
def config():
    return run_config.model_config(run_config.load(None))


def _rows(seed, n_rows=40):
    rng = np.random.default_rng(seed)
    shape = (n_rows, 3, 20)
    magnitude = np.exp(rng.normal(2.0, 1.5, shape))
    vis = magnitude * np.exp(2j * np.pi * rng.uniform(size=shape))
    flags = rng.uniform(size=shape) < 0.1
    vis[flags] = np.nan  # flagged cells are never read
    return vis, flags, rng.uniform(0.5, 2.0, n_rows)


def test_merged_statistics_equal_those_of_all_rows_and_match_numpy_percentiles():
    blocks = [_rows(seed) for seed in range(3)]
    merged = DataStats.from_rows(*blocks[0])
    for block in blocks[1:]:
        merged = merged.merge(DataStats.from_rows(*block))
    vis, flags, noise = (np.concatenate(parts) for parts in zip(*blocks, strict=True))
    whole = DataStats.from_rows(vis, flags, noise)
    assert merged.peak_abs == whole.peak_abs and merged.min_noise == whole.min_noise
    assert merged.n_points == whole.n_points == int(np.count_nonzero(~flags))
    np.testing.assert_array_equal(merged.abs_counts, whole.abs_counts)
    # Independent references: numpy's exact percentiles; the sketch is within one bin.
    bin_width = 2.0 ** (1 / BINS_PER_OCTAVE) - 1
    magnitude = np.abs(vis[~flags])
    np.testing.assert_allclose(whole.peak_abs / whole.min_noise, magnitude.max() / noise.min())
    p99 = np.percentile(magnitude, 99.0)
    assert abs(whole.rfi_level(4) ** 2 * 4 / p99 - 1) < bin_width
    assert abs(whole.noise_median / np.median(noise) - 1) < bin_width
    power = MeanPower.from_rows(vis[:10, 0, 0]).merge(MeanPower.from_rows(vis[10:, 0, 0]))
    np.testing.assert_allclose(power.rms, np.sqrt(np.mean(np.abs(vis[:, 0, 0]) ** 2)))


def _shapes(model):
    parts = (model.constants, model.data, model.params)
    return jax.tree.structure(parts), [(x.shape, np.dtype(x.dtype)) for x in jax.tree.leaves(parts)]


def test_abstract_model_has_the_shapes_and_constants_of_the_built_model(obs, config):
    model = joint.build(obs, config)
    info = model.info
    abstract = joint.abstract_model(
        obs.meta, config, snr=info["rfi_snr"], rfi_level=info["rfi_level"],
        sky_sigma=info["sky_sigma"],
    )  # fmt: skip
    assert abstract.spec == model.spec
    assert _shapes(abstract) == _shapes(model)
    # The metadata-derived arrays are real and equal to build's, bit for bit.
    real = [
        (a, b)
        for a, b in zip(
            jax.tree.leaves((abstract.constants, abstract.params)),
            jax.tree.leaves((model.constants, model.params)),
            strict=True,
        )
        if not isinstance(a, jax.ShapeDtypeStruct)
    ]
    assert len(real) > 20
    for a, b in real:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The per-row arrays that need the data are abstract.
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(abstract.data))
    assert all(isinstance(z, jax.ShapeDtypeStruct) for z in abstract.params.sky.z)
    assert isinstance(abstract.constants.sky.mean, jax.ShapeDtypeStruct)


@pytest.mark.slow
def test_stages_compiled_from_abstract_shapes_use_the_memory_of_real_arrays(obs, config):
    model = joint.build(obs, config)
    abstract = joint.abstract_model(obs.meta, config, snr=model.info["rfi_snr"])
    devices = jax.devices()[:1]
    fit_config = optimiser.FitConfig()
    from_shapes = stages.compile_stages(
        stages.place_abstract(abstract, "none", None), "none", fit_config, devices
    )
    from_arrays = stages.compile_stages(
        stages.place_abstract(model, "none", None), "none", fit_config, devices
    )
    names = [r.name for r in from_shapes]
    assert names == [
        "setup", "optimiser_init", "diagnostics", "step", "polish", "predict", "export"
    ]  # fmt: skip
    for a, b in zip(from_shapes, from_arrays, strict=True):
        assert a.memory == b.memory, a.name
        assert a.resident == b.resident, a.name
    # The resident bytes are the model's own arrays, counted independently here.
    counted = sum(
        np.dtype(x.dtype).itemsize * int(np.prod(x.shape))
        for x in jax.tree.leaves((model.constants, model.data, model.params))
    )
    assert from_shapes[0].resident == [counted]
    step = from_shapes[names.index("step")]
    assert step.memory.temporaries > 0 and step.memory.aliased > 0
    # Beside the model, the gradient phases' step holds AdaBelief's two moments of every
    # parameter and three int32 step counts (the phases', AdaBelief's, the schedule's); the
    # polish's (Levenberg-Marquardt's) step the phases' count, the curvature's diagonal (one
    # float32 per parameter), the inverses of its blocks (rows x b x b float32 per leaf, b the
    # size of the leaf's last MODE_AXES axes) and eight scalars of 4 bytes. Measured: 2460
    # and 24708 bytes, with 1224 of parameters.
    params = sum(x.dtype.itemsize * x.size for x in jax.tree.leaves(model.params))
    blocks = 0
    for path, x in jax.tree_util.tree_flatten_with_path(model.params)[0]:
        name = jax.tree_util.keystr(path)
        axes = next(n for prefix, n in optimiser.MODE_AXES.items() if name.startswith(prefix))
        b = int(np.prod(x.shape[len(x.shape) - axes :]))
        blocks += 4 * (x.size // b) * b * b if x.size else 0
    polish = from_shapes[names.index("polish")]
    beside = {r.name: r.resident[0] - counted for r in (step, polish)}
    assert beside == {"step": 2 * params + 3 * 4, "polish": 4 + params + blocks + 8 * 4}


def test_expected_snr_bounds_the_simulated_data_from_above(obs):
    scene = presets.observation_scene("demo", SMALL)
    stats = DataStats.from_rows(obs.vis, obs.flags, np.broadcast_to(obs.noise, obs.n_bl))
    estimate = presets.expected_snr(scene)
    assert stats.snr <= estimate <= 1.5 * stats.snr
    meta = presets.observation_meta("demo", SMALL)
    np.testing.assert_array_equal(meta.ant_itrf, obs.ant_itrf)
    np.testing.assert_array_equal(meta.times_s, obs.times_s)


def test_plan_from_a_store_read_chunk_by_chunk_equals_the_stages_of_the_built_model(
    small_store, obs, config, capsys
):
    """``stages.plan_stages`` (what ``tabascal plan`` prints) reads the store's statistics a
    few rows at a time and compiles from shapes; the stages of the model built from the whole
    observation are the reference."""
    from tabascal.cli import main
    from tabascal.parallel import blockwise, routes
    from tabascal.store import read_meta

    fit_config = optimiser.FitConfig()
    source = blockwise.StoreRows(small_store, read_meta(small_store))
    # 5 rows per read: the merged statistics must size the fine sampling as the whole does.
    streamed = blockwise.data_stats(source, rows_per_read=5)
    whole = DataStats.from_rows(obs.vis, obs.flags, obs.noise)
    assert streamed.snr == whole.snr and streamed.n_points == whole.n_points
    assert streamed.rfi_level(obs.meta.n_sat) == whole.rfi_level(obs.meta.n_sat)
    placed, planned = stages.plan_stages(source, config, fit_config, routes.route("none"))
    model = joint.build(obs, config)
    assert placed.info["rfi_groups"] == model.info["rfi_groups"]
    built = stages.compile_stages(
        stages.place_abstract(model, "none", None), "none", fit_config, jax.devices()[:1]
    )
    for a, b in zip(planned, built, strict=True):
        assert a.name == b.name and a.memory == b.memory and a.resident == b.resident, a.name
    assert main(["plan", "--data", str(small_store)]) == 0
    out = capsys.readouterr().out
    peak = max(max(r.peak) for r in built)
    assert f"peak estimate per device       {peak / 2**30:.3f} GiB" in out, out
    step = next(r for r in built if r.name == "step").memory
    assert f"arguments {step.arguments / 2**20:.1f} MiB" in out, out
