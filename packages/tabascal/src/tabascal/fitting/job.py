"""``tabascal run``: fit the model to an observation and write the results.

The output folder holds ``results.zarr`` (fitted sky and RFI visibilities, model, residual
data - model, gains and the noise the fit used, in the data's baseline order), ``summary.json``,
PNG plots, the resolved ``config.yaml`` and ``checkpoints/``. Every output is written under a
hidden temporary name and renamed into place, so a run killed at any moment never leaves a
half-written output under a final name; ``summary.json`` is written last, so its presence says
the run finished. One run at a time writes into a folder: it holds the folder's lock
(``OutputLock``) from start to end. A run of several tiles (config section ``tiles``) fits each
into a folder of its own under ``tiles/`` and stitches them into these outputs
(``fitting.tiled``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from tabascal.config import ConfigError, dump_yaml
from tabascal.fitting import (
    checkpoint,
    data_noise,
    optimiser,
    phases,
    plots,
    results,
    satellites,
    tile_workers,
    tiled,
)
from tabascal.fitting.compile_cache import CompileCounts, compile_counts, compile_summary
from tabascal.fitting.output_folder import (  # noqa: F401 (the errors and lock, re-exported)
    CHECKPOINTS,
    RESULTS,
    SUMMARY,
    NoCheckpointError,
    OutputError,
    OutputExistsError,
    OutputInUseError,
    OutputLock,
    prepare_output,
    replacing,
    write_atomically,
)
from tabascal.fitting.run_plan import OutputSettings, RunPlan, plan_run
from tabascal.fitting.tile_rows import TileRows
from tabascal.model import joint, likelihood, orbit_corrections
from tabascal.observation import geometry
from tabascal.parallel import backends, baseline_axis, blockwise, processes, routes
from tabascal.planning import memory
from tabascal.store.writer import NO_SPACE, why_unwritable

logger = logging.getLogger(__name__)


def _plot(out_dir: Path, history: checkpoint.FitHistory, rows, model, data, meta) -> None:
    """Loss curve, and model against data on the baselines ``rows`` (first channel)."""
    with replacing(out_dir / "loss.png") as partial_path:
        plots.plot_loss(history.loss, history.chi2, partial_path)
    lengths = _baseline_lengths(meta)
    labels = [
        f"baseline {meta.a1[r]}-{meta.a2[r]} ({lengths[r]:.0f} m), {meta.freqs_hz[0] / 1e6:.2f} MHz"
        for r in rows
    ]
    model, data = model[:, 0], data[:, 0]
    with replacing(out_dir / "baselines.png") as partial_path:
        plots.plot_baselines(meta.times_s, data, model, data - model, labels, partial_path)


def _plot_satellites(out_dir: Path, signal_rms: np.ndarray, meta) -> None:
    """Each satellite's fitted amplitude (n_sat, n_time) and its elevation against time."""
    elevation = geometry.satellite_elevation(
        meta.ant_itrf, meta.orbits, meta.times_s, meta.gast0_rad
    )
    labels = [meta.orbits.label(s) for s in range(meta.n_sat)]
    with replacing(out_dir / "satellites.png") as partial_path:
        plots.plot_satellites(meta.times_s, signal_rms, np.rad2deg(elevation), labels, partial_path)
    if meta.n_sat > plots.MOST_SATELLITES:
        shown = plots.MOST_SATELLITES
        logger.info("satellites.png shows the %d brightest of %d satellites", shown, meta.n_sat)


def _baseline_lengths(meta) -> np.ndarray:
    return np.linalg.norm(meta.ant_itrf[meta.a1] - meta.ant_itrf[meta.a2], axis=1)


def _plot_rows(meta, plot_baselines: int) -> np.ndarray:
    """Baselines to plot: evenly spread in length, shortest to longest."""
    lengths = _baseline_lengths(meta)
    n_show = min(plot_baselines, len(lengths))
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


def _whole_observation(source):
    """Every row of ``source`` in this process (the routes that need them)."""
    if isinstance(source, data_noise.EstimatedNoise):
        return source.whole(_whole_observation(source.rows))
    if isinstance(source, TileRows):
        return source.whole()
    if isinstance(source, blockwise.MemoryRows):
        return source.obs
    from tabascal.store import read_observation

    obs = read_observation(source.path, allow_missing=source.allow_missing)
    return dataclasses.replace(obs, orbits=source.meta.orbits)


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


@dataclass(frozen=True)
class RunSummary(Mapping):
    """What a fit did, as summary.json holds it; read as a mapping of its fields (``truth``
    only when the observation has one).

    chi2_init, chi2_final: reduced chi-squared before and after; steps; seconds_fit (the
    optimisation alone); n_devices, n_processes; shard_axis, reuse_plan, read_by_block (the
    model built block by block from the rows each process reads); per_device_peak_bytes;
    step_memory (``memory.StageMemory.as_dict`` of one step: of the phase's whose step needs
    the most); collectives (per step, of that step); step_phases (each phase's step memory
    and collectives, "gradient" and "polish"); model
    (the model's info); truth (``results.truth_metrics``) or None; orbits (the fitted orbit
    corrections, ``orbit_corrections.summary``) or None with fixed orbits; satellites (one
    entry per satellite, ``satellites.satellite_table``); rfi_vis_by_satellite (whether
    results.zarr holds it, and why not: ``satellites.output_plan``); data (where the noise
    came from, ``data_noise.summary``); compile (the programs compiled and read back from the
    persistent compilation cache during the run, ``compile_cache.compile_summary``); fit
    (the optimisation's steps, passes, why it stopped and its seconds,
    ``FitHistory.summary``); timings (where the run's wall time went: setup, compile,
    iterations, writing, ``_timings``).
    """

    chi2_init: float
    chi2_final: float
    steps: int
    seconds_fit: float
    n_devices: int
    n_processes: int
    shard_axis: str
    reuse_plan: bool
    read_by_block: bool
    per_device_peak_bytes: list[int]
    step_memory: dict
    collectives: dict
    model: dict
    step_phases: dict = dataclasses.field(default_factory=dict)
    truth: dict | None = None
    orbits: dict | None = None
    satellites: list[dict] = dataclasses.field(default_factory=list)
    rfi_vis_by_satellite: dict | None = None
    data: dict = dataclasses.field(default_factory=dict)
    compile: dict = dataclasses.field(default_factory=dict)
    fit: dict = dataclasses.field(default_factory=dict)
    timings: dict = dataclasses.field(default_factory=dict)

    def _keys(self) -> list[str]:
        optional = ("truth", "orbits")
        return [f.name for f in fields(self) if f.name not in optional or getattr(self, f.name)]

    def __getitem__(self, key: str):
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


class _Fitted(NamedTuple):
    """The optimisation's outcome: its final state and history, each phase's step memory and
    collectives ("gradient", "polish"), the phase whose step needs the most memory, the
    per-device peak measured as the optimisation ends, the seconds it ran and the initial
    reduced chi-squared."""

    state: phases.FitState
    history: checkpoint.FitHistory
    phase_memory: dict
    phase_collectives: dict
    limiting: str
    per_device_peak_bytes: list[int]
    seconds: float
    chi2_init: float
    compile_began: float = 0.0  # time.perf_counter() as the step's programs began to compile
    compile_seconds: float = 0.0
    ended: float = 0.0  # time.perf_counter() as the optimisation ended


def precision_scope(precision: str):
    """A context in which the arrays of ``precision`` (a ``ModelConfig.precision``) are made:
    jax's 64-bit mode on for ``double`` (without it every float64 array silently becomes
    float32), as it is otherwise; scoped, so that the caller's mode is as it was afterwards.
    Double precision on a backend without float64 (a TPU) is refused here, before any work."""
    backends.check_precision(precision)
    return jax.enable_x64(precision == "double" or jax.config.jax_enable_x64)


def run(
    obs,
    out_dir: Path,
    config: Mapping | RunPlan,
    *,
    resume: bool = False,
    overwrite: bool = False,
    shard_axis: str | None = None,
    reuse_plan: bool | None = None,
    progress: bool = True,
) -> RunSummary:
    """Fit ``obs`` with ``config``, a ``RunPlan`` (``plan_run``'s) or a validated
    configuration (``run_config.load``'s), planned here; write the outputs to ``out_dir``
    (process 0) and return the summary.

    obs: a ``tabascal.store.Observation`` (all rows in memory) or a
    ``blockwise.RowSource`` (e.g. ``StoreRows``: rows read as needed). On the baseline
    axis the model is built block by block (``blockwise.build``): each process reads only
    its own devices' rows and the outputs are written block by block; a multi-process run must
    take that route. shard_axis: one of ``routes.SHARD_AXES``; reuse_plan: permute the
    baselines by the antenna-reuse plan (baseline axis only). Each, when None, is taken as
    ``tabascal run`` takes it without its flag: from ``config``'s ``sharding`` (and
    $TABASCAL_SHARD_AXIS); a plan has settled both already, and takes neither.

    With more than one tile (config section ``tiles``), each tile is fitted as its own
    observation into ``out_dir/tiles/<name>``, in turn or by Dask workers (``tiles.workers``,
    ``tiles.scheduler``; ``obs`` must then be a ``StoreRows``), and the tiles are stitched
    into ``out_dir``'s results.zarr and summary.json (``tiled.run_tiles``; a dict is
    returned).
    """
    began = time.perf_counter()
    compiles_from = compile_counts()
    plan = _plan_of(config, shard_axis, reuse_plan)
    route = routes.route(plan.sharding.axis, plan.sharding.reuse_plan)
    source = obs if hasattr(obs, "read") else blockwise.MemoryRows(obs)
    grid = plan.tiles.grid(source.meta)  # before any work: the tiles' counts are checked here
    tile_workers.check(plan.tiles, len(grid), source)
    # init "auto" is settled here, and config.yaml records the start the fit took.
    init = joint.resolve_init(
        plan.init, source.meta, processes.process_count(), by_block=route.by_block
    )
    by_block = _check_route(route, source, init)
    orbit_corrections.check_route(plan.model.orbits, route.name)
    if len(grid) > 1:
        # Each tile settles its own start from its own size.
        return tiled.run_tiles(
            run, source, out_dir, plan, grid, resume=resume, overwrite=overwrite,
            progress=progress,
        )  # fmt: skip
    plan = dataclasses.replace(plan, init=init)
    with precision_scope(plan.model.precision), contextlib.ExitStack() as claimed:
        out_dir = Path(out_dir)
        with processes.stage("preparing the output folder"):
            if processes.is_writer():
                claimed.enter_context(prepare_output(out_dir, resume=resume, overwrite=overwrite))
        try:
            source = data_noise.noise_source(
                source, noise=plan.data.noise, noise_per_channel=plan.data.noise_per_channel
            )
            placed = placed_model(route, source, plan, by_block)
            if processes.is_writer():
                write_atomically(out_dir / "config.yaml", dump_yaml(plan.as_config()))
            fitted = _optimise(route, placed, plan.fit, out_dir, resume, progress)
            return _write_outputs(
                route, placed, fitted, source, plan.output, out_dir, by_block, compiles_from,
                began,
            )  # fmt: skip
        except OSError as err:
            if err.errno not in NO_SPACE:
                raise
            raise OutputError(
                f"{out_dir}: {why_unwritable(err)} while writing the run's outputs ({err}); "
                "every output there is whole or absent, and --resume continues from the last "
                "checkpoint: free some space and run again"
            ) from err


def _plan_of(config: Mapping | RunPlan, shard_axis: str | None, reuse_plan: bool | None):
    """``config`` as a plan: planned here from a configuration (the caller's shard axis and
    reuse plan winning over its ``sharding``), or the caller's plan as it is."""
    if isinstance(config, RunPlan):
        if shard_axis is not None or reuse_plan is not None:
            raise ConfigError(
                "run: a RunPlan has settled its shard axis and reuse plan; pass them to "
                "plan_run instead of run"
            )
        return config
    if shard_axis is not None and shard_axis not in routes.SHARD_AXES:
        raise ConfigError(f"shard axis {shard_axis!r} is not known; use none, baseline or source")
    return plan_run(config, shard_axis=shard_axis, reuse_plan=reuse_plan)


def _check_route(route: routes.Route, source, init: str) -> bool:
    """Refuse what the route cannot do with ``source``; whether the model is built (and its
    outputs written) block by block."""
    if route.name != "none" and source.meta.n_sat == 0:
        raise ConfigError(
            f"the observation has no satellites, and the {route.shard_axis} axis splits the RFI "
            "term's work; fit it on one device (--shard-axis none), which models the sky and "
            "the gains alone"
        )
    by_block = route.by_block and init not in joint.WHOLE_OBSERVATION_INITS
    if not by_block and processes.process_count() > 1:
        raise ConfigError(
            f"a run over {processes.process_count()} processes reads the data block by block, "
            f"which needs --shard-axis baseline and init 'data' or 'prior' (got shard axis "
            f"{route.shard_axis!r}, init {init!r})"
        )
    return by_block


def placed_model(route: routes.Route, source, plan: RunPlan, by_block: bool):
    """The model placed as ``route`` places it for the run ``plan`` (its start settled), from
    the rows of ``source`` (a ``blockwise.RowSource``): built block by block from the rows
    each process reads (``by_block``), or from the whole observation and then placed. What
    ``tabascal run`` fits, for a caller that takes the steps itself."""
    model_cfg, init, seed = plan.model, plan.init, plan.seed
    row_blocks = plan.sharding.row_blocks
    mesh = route.make_mesh()
    if by_block:
        built = blockwise.build(
            source,
            model_cfg,
            mesh,
            init=init,
            seed=seed,
            reuse=route.reuse_plan,
            row_blocks=row_blocks,
        )
        return routes.keep_phase_moments(route.name, built)
    model = joint.build(_whole_observation(source), model_cfg, init=init, seed=seed)
    # A sharded route's placement leaves the unsharded model's device arrays unreferenced, so
    # that device 0 holds only its own block during the fit.
    return route.place(model, mesh, row_blocks=row_blocks)


def route_step(route: routes.Route, spec, fit_cfg: optimiser.FitConfig, optimizer):
    """``optimiser.make_step`` of ``route``'s loss on a model placed as ``spec``, with the
    Gauss-Newton product and the priors' curvature where ``fit_cfg``'s polish takes them
    (``polish: levenberg-marquardt``, the default, or ``polish_curvature: gauss-newton``)."""
    curvature_fn = route.curvature_fn(fit_cfg, spec)
    loss_fn = partial(route.loss, spec=spec)
    return optimiser.make_step(loss_fn, optimizer, curvature_fn, joint.prior_curvature)


def _optimise(
    route: routes.Route, placed, fit_cfg: optimiser.FitConfig, out_dir: Path, resume, progress
):
    """Run (or resume) the optimisation of ``placed``, checkpointing under ``out_dir``."""
    inputs = (placed.constants, placed.data)
    loss_fn = partial(route.loss, spec=placed.spec)
    optimizer = optimiser.make_optimizer(fit_cfg)
    state = optimiser.init_state(placed.params, optimizer)
    history = None
    if resume:
        template = state
        state, history = checkpoint.load_checkpoint(out_dir / CHECKPOINTS, state, optimizer)
        if phases.in_polish(state):
            # A checkpoint written in the polish holds no gradient-phase state to place.
            template = phases.polish_form(template, optimizer)
        if route.name != "none":
            state = _place_like(state, template)
        logger.info("resuming at step %d", int(state.step))
    # The gradient phases and the polish are two programs, each holding its own optimiser
    # state; both compile now, so that the memory reported is the larger one's.
    compile_began = time.perf_counter()
    step, programs = optimiser.compile_step(
        route_step(route, placed.spec, fit_cfg, optimizer), state, inputs
    )
    phase_memory = {name: memory.stage_memory(program) for name, program in programs.items()}
    # Before the first step: the polish's program would otherwise fail only as it begins.
    memory.check_programs_fit(
        phase_memory, routes.agreed_device_memory(routes.devices(placed.spec))
    )
    start = time.perf_counter()
    compile_seconds = start - compile_began
    state, history = optimiser.run(
        step,
        state,
        inputs,
        fit_cfg,
        history=history,
        checkpoint_dir=out_dir / CHECKPOINTS,
        progress=progress,
        n_points=float(placed.data.n_points),
    )
    seconds = time.perf_counter() - start
    # The peak as the optimisation ends, before the prediction and the outputs add their own.
    peak = _peak_bytes(list(phase_memory.values()), routes.devices(placed.spec))
    # Each step reports the loss at the parameters it starts from, so the first step's figure
    # (kept in the history, across resumes) is the initial chi-squared; only a fit of zero
    # steps needs its own evaluation.
    if len(history.chi2):
        chi2_init = float(history.chi2[0])
    else:
        chi2_init = float(jax.jit(loss_fn)(placed.params, inputs)[1]["chi2"])
    collectives = {name: memory.count_collectives(program) for name, program in programs.items()}
    # The step reported is the one that needs the most.
    limiting = max(phase_memory, key=lambda name: phase_memory[name].need)
    return _Fitted(
        state, history, phase_memory, collectives, limiting, peak, seconds, chi2_init,
        compile_began, compile_seconds, time.perf_counter(),
    )  # fmt: skip


class Outputs(NamedTuple):
    """The fitted model's outputs: the ``results.CUBES`` as (data rows, {name: cube}) blocks
    in the data's order, the gains (n_ant, n_freq, n_time), this process's (data rows, sky,
    RFI) blocks for the truth metrics, the final reduced chi-squared and the mean noise."""

    cubes: Iterable
    gains: np.ndarray
    fitted_blocks: Iterable
    chi2_final: float
    noise_mean: float


def predict_outputs(route: routes.Route, placed, params) -> Outputs:
    """The outputs of ``placed`` (``placed_model``'s) at ``params``, as ``tabascal run``
    writes and scores them; a baseline-sharded route's cubes leave block by block."""
    spec, data = placed.spec, placed.data
    n_bl = getattr(spec, "model", spec).n_bl
    # the mean over the baselines (and channels, with a noise per channel); padded rows left out
    noise_mean = float(jax.jit(lambda n: jax.numpy.sum(n[:n_bl]) / n[:n_bl].size)(data.noise))
    if getattr(spec, "row_blocks", 1) > 1:
        return _predicted_by_row_block(placed, params, noise_mean)
    prediction = jax.jit(partial(route.predict, spec=spec))(params, placed.constants)
    # Masked reductions on the devices that hold the rows (padded rows are flagged).
    chi2_final = float(
        jax.jit(likelihood.reduced_chi2)(
            prediction.model, data.vis, data.flags, data.noise, data.n_points
        )
    )
    if route.by_block:
        residual = jax.jit(likelihood.residual)(prediction.model, data.vis, data.flags)
        return Outputs(
            cubes=results.sharded_cubes(prediction, residual, data.flags, spec),
            gains=np.asarray(prediction.gains.addressable_data(0)),
            fitted_blocks=results.local_blocks(prediction, spec),
            chi2_final=chi2_final,
            noise_mean=noise_mean,
        )
    host = route.unpad(prediction, spec)
    flags = np.asarray(data.flags)
    residual = np.asarray(likelihood.residual(host.model, np.asarray(data.vis), flags))
    cubes = {
        "sky_vis": host.sky,
        "rfi_vis": host.rfi,
        "model_vis": host.model,
        "residual": residual,
        "flags": flags,
    }
    rows = np.arange(n_bl)
    # An unsharded fit is one block of every row.
    return Outputs(
        cubes=[(rows, cubes)],
        gains=host.gains,
        fitted_blocks=[(rows, host.sky, host.rfi)],
        chi2_final=chi2_final,
        noise_mean=noise_mean,
    )


def _predicted_by_row_block(placed, params, noise_mean: float) -> Outputs:
    """The outputs of a fit with its rows in blocks (``sharding.row_blocks``): block j of
    every device's rows is predicted, and its residual formed, in turn (``predict_block``,
    ``rows_block``), so that the devices hold one block's cubes at a time. Each pass over the
    blocks (the chi-squared; the truth's comparison, where there is a truth; the cubes
    written) predicts them again, each block about a loss evaluation's work."""
    spec, data = placed.spec, placed.data
    predict = jax.jit(partial(baseline_axis.predict_block, spec=spec))
    take = jax.jit(partial(baseline_axis.rows_block, spec=spec))
    export = jax.jit(likelihood.residual_and_chi2)

    def block(j: int):
        prediction = predict(params, placed.constants, j)
        vis, flags, noise = (take(x, j) for x in (data.vis, data.flags, data.noise))
        residual, chi2 = export(prediction.model, vis, flags, noise, data.n_points)
        return prediction, residual, flags, chi2

    chi2_final, first = 0.0, None
    for j in range(spec.row_blocks):
        prediction, _, _, chi2 = block(j)
        chi2_final += float(chi2)
        if first is None:
            first = np.asarray(prediction.gains.addressable_data(0))
        del prediction, _  # before the next block's: the devices hold one block at a time

    def cubes():
        # Each block's arrays live in its sharded_cubes generator, freed when it is done.
        for j in range(spec.row_blocks):
            yield from results.sharded_cubes(*block(j)[:3], spec, j)

    def fitted_blocks():
        for j in range(spec.row_blocks):
            yield from results.local_blocks(predict(params, placed.constants, j), spec, j)

    return Outputs(cubes(), first, fitted_blocks(), chi2_final, noise_mean)


def _timings(fitted: _Fitted, began: float) -> dict:
    """Where the run's wall time went, in seconds, from ``began`` (its start) to now (its
    summary about to be written): setup (reading, the noise, the model's build and start, its
    placement), compile (the step's programs), iterations, and writing (the outputs and
    plots)."""
    now = time.perf_counter()
    return {
        "setup_s": fitted.compile_began - began,
        "compile_s": fitted.compile_seconds,
        "iterations_s": fitted.seconds,
        "writing_s": now - fitted.ended,
        "total_s": now - began,
    }


def _write_outputs(
    route,
    placed,
    fitted: _Fitted,
    source,
    output: OutputSettings,
    out_dir,
    by_block,
    compiles_from: CompileCounts,
    began: float,
):
    """Write results.zarr, the plots and summary.json (process 0); return the summary."""
    meta = source.meta
    out = predict_outputs(route, placed, fitted.state.params)
    truth = None
    if source.has_truth:
        truth = results.truth_metrics(
            out.fitted_blocks, out.gains, source.read_truth, meta, out.noise_mean
        )
    devices = routes.devices(placed.spec)
    summary = RunSummary(
        chi2_init=fitted.chi2_init,
        chi2_final=out.chi2_final,
        steps=int(fitted.state.step),
        seconds_fit=fitted.seconds,
        fit={**fitted.history.summary(), "seconds": fitted.seconds},
        n_devices=len(devices),
        n_processes=processes.process_count(),
        shard_axis=route.shard_axis,
        reuse_plan=route.reuse_plan,
        read_by_block=by_block,
        per_device_peak_bytes=fitted.per_device_peak_bytes,
        step_memory=fitted.phase_memory[fitted.limiting].as_dict(),
        collectives=fitted.phase_collectives[fitted.limiting],
        step_phases={
            name: {"memory": stage.as_dict(), "collectives": fitted.phase_collectives[name]}
            for name, stage in fitted.phase_memory.items()
        },
        model=placed.info,
        truth=truth,
        data=data_noise.summary(source),
        orbits=orbit_corrections.summary(
            getattr(fitted.state.params, "orbits", None),
            getattr(placed.constants, "orbits", None),
            meta.orbits,
        ),
    )
    plot_rows = _plot_rows(meta, output.plot_baselines) if output.plots else np.arange(0)
    kept = {}
    whole = {
        "gains": out.gains,
        "a1": np.asarray(meta.a1, np.int32),
        "a2": np.asarray(meta.a2, np.int32),
        "times_s": np.asarray(meta.times_s),
        "freqs_hz": np.asarray(meta.freqs_hz),
        # every process: on the baseline axis the noise leaves block by block
        "noise": results.noise_rows(placed.data.noise, placed.spec, route.by_block, meta.n_bl),
    }
    if processes.is_writer():
        # summary.json says the outputs beside it are its run's: it goes until they are written.
        (out_dir / SUMMARY).unlink(missing_ok=True)
    by_satellite = satellites.plan(route, placed, fitted.state.params, meta, output)
    results.write_results(
        out_dir / RESULTS,
        _keeping(out.cubes, plot_rows, kept),
        whole,
        meta.n_bl,
        by_satellite.stacked,
    )
    summary = dataclasses.replace(
        summary,
        satellites=by_satellite.table(
            route, placed, fitted.state.params, orbit_corrections.table_extra(summary.orbits)
        ),
        rfi_vis_by_satellite=by_satellite.report,
    )
    signal_rms = None
    if output.plots and meta.n_sat:  # every process: the signal may be split
        signal_rms = satellites.signal_rms(placed, fitted.state.params, meta.n_sat)
    summary = dataclasses.replace(summary, compile=compile_summary(compiles_from))
    if processes.is_writer():
        if output.plots:
            model_rows = np.stack([kept[int(r)][0] for r in plot_rows])
            data_rows = np.stack([kept[int(r)][1] for r in plot_rows])
            _plot(out_dir, fitted.history, plot_rows, model_rows, data_rows, meta)
        if signal_rms is not None:
            _plot_satellites(out_dir, signal_rms, meta)
    summary = dataclasses.replace(summary, timings=_timings(fitted, began))
    if processes.is_writer():
        write_atomically(out_dir / SUMMARY, json.dumps(dict(summary), indent=2) + "\n")
    return summary
