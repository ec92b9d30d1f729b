"""``tabascal run``: fit the model to an observation and write the results.

The output folder holds ``results.zarr`` (fitted sky and RFI visibilities, model, residual
data - model and gains, in the data's baseline order), ``summary.json``, PNG plots, the resolved
``config.yaml`` and ``checkpoints/``. Every file is written under a temporary name and renamed
into place, so an interrupted run never leaves a half-written result under a final name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from tabascal.config import dump_yaml, run_config
from tabascal.fitting import optimiser, plots, results
from tabascal.model import gains, joint, likelihood
from tabascal.parallel import baseline_axis, blockwise, processes, source_axis
from tabascal.planning import memory

logger = logging.getLogger(__name__)

RESULTS = "results.zarr"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
OUTPUT_NAMES = (RESULTS, SUMMARY, "config.yaml", "loss.png", "baselines.png", CHECKPOINTS)


class OutputExistsError(FileExistsError):
    """The output folder holds earlier results and neither resume nor overwrite was asked."""


def prepare_output(out_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Create ``out_dir``, refusing a non-empty one unless resuming or overwriting."""
    out_dir = Path(out_dir)
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other; choose one")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir} exists and is not a folder")
    if resume:
        if not (out_dir / CHECKPOINTS / optimiser.CHECKPOINT_NAME).is_file():
            raise FileNotFoundError(
                f"--resume: {out_dir / CHECKPOINTS / optimiser.CHECKPOINT_NAME} does not exist; "
                "run without --resume to start a new fit"
            )
        return
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise OutputExistsError(
                f"{out_dir} is not empty; pass --overwrite to replace its results or --resume "
                "to continue its fit"
            )
        for name in OUTPUT_NAMES:
            path = out_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def _write_atomically(path: Path, text: str) -> None:
    partial_path = path.with_name(path.name + ".partial")
    partial_path.write_text(text)
    os.replace(partial_path, path)


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean(np.abs(np.asarray(a) - np.asarray(b)) ** 2)))


def truth_metrics(prediction: joint.Prediction, obs, noise: float) -> dict:
    """RMSE and RMSE/noise against the store's truth.

    ``sky``: the fitted sky against the true sky. ``rfi``: the RFI as it appears in the data,
    g[a1] V_rfi conj(g[a2]), against the same from the truth (the product is what the data
    constrain: a gain error is indistinguishable from an RFI amplitude error). ``gains``: the
    fitted gains against the true ones, and over the true gains' spread. ``raw_data``: the
    data against the true sky, the error of doing nothing. ``apparent_sky``: the sky as it
    appears in the data, g[a1] V_sky conj(g[a2]), against the truth's.
    """
    t = obs.truth
    a1, a2 = np.asarray(obs.a1), np.asarray(obs.a2)
    fitted_rfi = gains.apply(prediction.rfi, prediction.gains, a1, a2)
    true_rfi = gains.apply(t.rfi_vis, t.gains, a1, a2)
    pairs = {
        "sky": (prediction.sky, t.sky_vis),
        "rfi": (fitted_rfi, true_rfi),
        "raw_data": (obs.vis, t.sky_vis),
        "apparent_sky": (
            gains.apply(prediction.sky, prediction.gains, a1, a2),
            gains.apply(t.sky_vis, t.gains, a1, a2),
        ),
    }
    out = {}
    for name, (fitted, true) in pairs.items():
        value = _rmse(fitted, true)
        out[name] = {"rmse": value, "rmse_over_noise": value / noise}
    out["gains"] = results.gains_error(prediction.gains, t.gains)
    return out


def _plot(out_dir: Path, history: optimiser.FitHistory, rows, model, data, meta) -> None:
    """Loss curve, and model against data on the baselines ``rows`` (first channel)."""
    plots.plot_loss(history.loss, history.chi2, out_dir / "loss.png")
    lengths = _baseline_lengths(meta)
    labels = [
        f"baseline {meta.a1[r]}-{meta.a2[r]} ({lengths[r]:.0f} m), {meta.freqs_hz[0] / 1e6:.2f} MHz"
        for r in rows
    ]
    model, data = model[:, 0], data[:, 0]
    plots.plot_baselines(meta.times_s, data, model, data - model, labels, out_dir / "baselines.png")


def _baseline_lengths(meta) -> np.ndarray:
    return np.linalg.norm(meta.ant_itrf[meta.a1] - meta.ant_itrf[meta.a2], axis=1)


def _plot_rows(meta, config: dict) -> np.ndarray:
    """Baselines to plot: evenly spread in length, shortest to longest."""
    lengths = _baseline_lengths(meta)
    n_show = min(config["output"]["plot_baselines"], len(lengths))
    return np.argsort(lengths)[np.linspace(0, len(lengths) - 1, n_show).astype(int)]


def _keeping(cubes, rows: np.ndarray, kept: dict):
    """Pass ``cubes`` through, copying the model and data (model + residual) of ``rows``."""
    for block_rows, block in cubes:
        hit = np.isin(block_rows, rows)
        for r, model, residual in zip(
            block_rows[hit], block["model_vis"][hit], block["residual"][hit], strict=True
        ):
            kept[int(r)] = (model, model + residual)
        yield block_rows, block


class _Route(NamedTuple):
    """What the fit needs of the chosen route.

    unpad: for the whole-array routes, a prediction to the data's rows on the host; spec:
    the ``baseline_axis.ShardedSpec`` of a baseline-sharded route (outputs go block by block),
    else None;
    devices: those the step runs on (one for the unsharded route, the mesh for the others).
    """

    params: object
    inputs: tuple
    loss_fn: object
    predict_fn: object
    unpad: object
    info: dict
    devices: list
    spec: object


def _whole_route(model: joint.Model, shard_axis: str, reuse_plan: bool) -> _Route:
    """The route of a model set up from the whole observation in this process."""
    if shard_axis == "none":
        return _Route(
            model.params, (model.constants, model.data), partial(joint.loss, spec=model.spec),
            partial(joint.predict, spec=model.spec), lambda p: jax.tree.map(np.asarray, p),
            model.info, [jax.devices()[0]], None,
        )  # fmt: skip
    route = {"baseline": baseline_axis, "source": source_axis}[shard_axis]
    mesh = route.make_mesh()
    if shard_axis == "baseline":
        sharded = baseline_axis.shard_model(model, mesh, reuse=reuse_plan)
    else:
        sharded = route.shard_model(model, mesh)
    spec = sharded.spec
    return _Route(
        sharded.params, (sharded.constants, sharded.data), partial(route.loss, spec=spec),
        partial(route.predict, spec=spec), partial(route.unpad, spec=spec), sharded.info,
        list(mesh.devices.flat), spec if shard_axis == "baseline" else None,
    )  # fmt: skip


def _block_route(sharded: baseline_axis.ShardedModel) -> _Route:
    spec = sharded.spec
    return _Route(
        sharded.params, (sharded.constants, sharded.data), partial(baseline_axis.loss, spec=spec),
        partial(baseline_axis.predict, spec=spec), None, sharded.info, list(spec.mesh.devices.flat),
        spec,
    )  # fmt: skip


def _whole_observation(source):
    """Every row of ``source`` in this process (the routes that need them)."""
    if isinstance(source, blockwise.MemoryRows):
        return source.obs
    from tabascal.store import read_observation

    return dataclasses.replace(read_observation(source.path), orbits=source.meta.orbits)


def _place_like(state, template):
    """A checkpoint's host arrays placed as the live ``template`` is, each process building
    only its own devices' pieces.

    A template leaf on a single device (the optimiser's step count, made by optax outside any
    mesh and left uncommitted) is replicated over the mesh of the others: committing it to
    its one device would clash with the mesh in the compiled step.
    """
    meshes = [
        leaf.sharding.mesh
        for leaf in jax.tree.leaves(template)
        if isinstance(leaf.sharding, jax.sharding.NamedSharding)
    ]

    def place(value, like):
        value = np.asarray(value)
        sharding = like.sharding
        if meshes and not isinstance(sharding, jax.sharding.NamedSharding):
            sharding = jax.sharding.NamedSharding(meshes[0], jax.sharding.PartitionSpec())
        return jax.make_array_from_callback(value.shape, sharding, lambda i: value[i])

    return jax.tree.map(place, state, template)


def _peak_bytes(stages, devices) -> list[int]:
    """Per-device peak of every device of the run, gathered from the processes holding them."""
    here = [d for d in devices if d.process_index == jax.process_index()]
    local = np.asarray(memory.peak_bytes_per_device(stages, here), np.int64)
    return [int(b) for b in processes.gather_exact(local).ravel()]


def run(
    obs,
    out_dir: Path,
    config: dict,
    *,
    resume: bool = False,
    overwrite: bool = False,
    shard_axis: str = "none",
    reuse_plan: bool = False,
    progress: bool = True,
) -> dict:
    """Fit ``obs`` with the validated ``config``; write the outputs to ``out_dir`` (process 0)
    and return the summary.

    obs: a ``tabascal.store.Observation`` (all rows in memory) or a
    ``blockwise.RowSource`` (e.g. ``StoreRows``: rows read as needed). On the baseline
    axis the model is built block by block (``blockwise.build``): each process reads only
    its own devices' rows and the outputs are written block by block; a multi-process run must
    take that route. shard_axis: none, baseline or source (``run_config.shard_axis``);
    reuse_plan: permute the baselines by the antenna-reuse plan (baseline axis only).
    """
    if shard_axis not in run_config.SHARD_AXES:
        raise ValueError(f"shard axis {shard_axis!r} is not known; use none, baseline or source")
    if reuse_plan and shard_axis != "baseline":
        raise ValueError(
            f"the antenna-reuse plan needs the baseline axis, not {shard_axis!r}; pass "
            "--shard-axis baseline or drop --reuse-plan"
        )
    # Without jax's 64-bit mode every float64 array would silently become float32; the mode is
    # scoped to this call, so that the caller's precision is as it was afterwards.
    with jax.enable_x64(config["precision"] == "double" or jax.config.jax_enable_x64):
        return _run(obs, out_dir, config, resume, overwrite, shard_axis, reuse_plan, progress)


def _run(obs, out_dir, config, resume, overwrite, shard_axis, reuse_plan, progress) -> dict:
    source = obs if hasattr(obs, "read") else blockwise.MemoryRows(obs)
    if shard_axis != "none" and source.meta.n_sat == 0:
        raise ValueError(
            f"the observation has no satellites, and the {shard_axis} axis splits the RFI "
            "term's work; fit it on one device (--shard-axis none), which models the sky and "
            "the gains alone"
        )
    init, seed = config["fit"]["init"], config["fit"]["seed"]
    by_block = shard_axis == "baseline" and init not in joint.WHOLE_OBSERVATION_INITS
    if not by_block and processes.process_count() > 1:
        raise ValueError(
            f"a run over {processes.process_count()} processes reads the data block by block, "
            f"which needs --shard-axis baseline and init 'data' or 'prior' (got shard axis "
            f"{shard_axis!r}, init {init!r})"
        )
    out_dir = Path(out_dir)
    with processes.stage("preparing the output folder"):
        if processes.is_writer():
            prepare_output(out_dir, resume=resume, overwrite=overwrite)
    fit_cfg = run_config.fit_config(config)
    model_cfg = run_config.model_config(config)
    whole_obs = None
    if by_block:
        mesh = baseline_axis.make_mesh()
        route = _block_route(
            blockwise.build(source, model_cfg, mesh, init=init, seed=seed, reuse=reuse_plan)
        )
    else:
        whole_obs = _whole_observation(source)
        model = joint.build(whole_obs, model_cfg, init=init, seed=seed)
        route = _whole_route(model, shard_axis, reuse_plan)
        # A sharded route drops the unsharded model's device arrays, so that device 0 holds
        # only its own block during the fit.
        del model
    if processes.is_writer():
        _write_atomically(out_dir / "config.yaml", dump_yaml(config))
    params, inputs, loss_fn, predict_fn = (
        route.params,
        route.inputs,
        route.loss_fn,
        route.predict_fn,
    )
    optimizer = optimiser.make_optimizer(fit_cfg)
    state = optimiser.init_state(params, optimizer)
    history = None
    if resume:
        template = state
        state, history = optimiser.load_checkpoint(out_dir / CHECKPOINTS, state)
        if shard_axis != "none":
            state = _place_like(state, template)
        logger.info("resuming at step %d", int(state.step))
    compiled = optimiser.make_step(loss_fn, optimizer).lower(state, inputs).compile()
    stages = [memory.stage_memory(compiled)]
    start = time.perf_counter()
    state, history = optimiser.run(
        compiled, state, inputs, fit_cfg, history=history,
        checkpoint_dir=out_dir / CHECKPOINTS, progress=progress,
    )  # fmt: skip
    seconds_fit = time.perf_counter() - start
    per_device_peak = _peak_bytes(stages, route.devices)
    # Each step reports the loss at the parameters it starts from, so the first step's figure
    # (kept in the history, across resumes) is the initial chi-squared; only a fit of zero
    # steps needs its own evaluation.
    if len(history.chi2):
        chi2_init = float(history.chi2[0])
    else:
        chi2_init = float(jax.jit(loss_fn)(params, inputs)[1]["chi2"])

    data = inputs[1]
    prediction = jax.jit(predict_fn)(state.params, inputs[0])
    # A masked reduction on the devices that hold the rows (padded rows are flagged).
    chi2_final = float(
        jax.jit(likelihood.reduced_chi2)(prediction.model, data.vis, data.flags, data.noise,
                                         data.n_points)
    )  # fmt: skip
    meta = source.meta
    n_bl = meta.n_bl
    summary = {
        "chi2_init": chi2_init,
        "chi2_final": chi2_final,
        "steps": int(state.step),
        "seconds_fit": seconds_fit,
        "n_devices": len(route.devices),
        "n_processes": processes.process_count(),
        "shard_axis": shard_axis,
        "reuse_plan": reuse_plan,
        "read_by_block": by_block,
        "per_device_peak_bytes": per_device_peak,
        "step_memory": stages[0].as_dict(),
        "collectives": memory.count_collectives(compiled),
        "model": route.info,
    }
    if route.spec is not None:
        # Baseline-sharded: the cubes leave block by block, in the data's row order.
        spec = route.spec
        residual = jax.jit(lambda f, v, m: jax.numpy.where(f, 0, v - m))(
            data.flags, data.vis, prediction.model
        )
        cubes = results.sharded_cubes(prediction, residual, data.flags, spec)
        gains_host = np.asarray(prediction.gains.addressable_data(0))
        if source.has_truth:
            noise_mean = float(jax.jit(lambda n: jax.numpy.sum(n[:n_bl]) / n_bl)(data.noise))
            summary["truth"] = results.truth_metrics(
                prediction, spec, source.read_truth, meta.a1, meta.a2, noise_mean
            )
    else:
        host = route.unpad(prediction)
        host_data = jax.tree.map(np.asarray, data)
        residual = np.where(host_data.flags, 0, host_data.vis - host.model)
        cubes = [(np.arange(n_bl), {
            "sky_vis": host.sky, "rfi_vis": host.rfi, "model_vis": host.model,
            "residual": residual, "flags": host_data.flags,
        })]  # fmt: skip
        gains_host = host.gains
        if whole_obs.truth is not None:
            summary["truth"] = truth_metrics(host, whole_obs, float(np.mean(host_data.noise)))
    plot_rows = _plot_rows(meta, config) if config["output"]["plots"] else np.arange(0)
    kept = {}
    whole = {
        "gains": gains_host,
        "a1": np.asarray(meta.a1, np.int32),
        "a2": np.asarray(meta.a2, np.int32),
        "times_s": np.asarray(meta.times_s),
        "freqs_hz": np.asarray(meta.freqs_hz),
    }
    results.write_results(out_dir / RESULTS, _keeping(cubes, plot_rows, kept), whole, n_bl)
    if processes.is_writer():
        if config["output"]["plots"]:
            model_rows = np.stack([kept[int(r)][0] for r in plot_rows])
            data_rows = np.stack([kept[int(r)][1] for r in plot_rows])
            _plot(out_dir, history, plot_rows, model_rows, data_rows, meta)
        _write_atomically(out_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return summary
