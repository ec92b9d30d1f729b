"""The stages of a fit as compiled programs, and their per-device memory, from shapes alone.

A fit runs five kinds of device program: the set-up (the initial RFI prediction and the sky
mean of the data less it, then the optimiser's state), the initial diagnostics (loss and
reduced chi-squared), the optimisation step (stage "step": the gradient phases'; "polish":
the polish's, with its own optimiser state in place of theirs), the final prediction and the
export (the residual and the final chi-squared). ``compile_stages`` lowers and compiles each
of them for one sharding route from a model whose per-row arrays may be
``jax.ShapeDtypeStruct``s (``joint.abstract_model``), so the memory of a problem too large for
the machine at hand can be read before any data is read or simulated.

The routes are ``tabascal.parallel.routes.ROUTES``. ``place_abstract`` runs a route's own
placement on a stand-in model whose abstract arrays have every axis after the first of length
0, so the route's padding, permutation and shardings are its own, and returns the placed model
with those arrays abstract again, each carrying the sharding the route gave it.

Per-device peak estimate: the bytes resident on the device while a stage runs (the placed
model; from the diagnostics on, the optimiser state too: the gradient phases' up to their
step, the polish's from its step on; during the export, the prediction)
plus the stage's working set (outputs and temporaries, less outputs aliased to donated
arguments), maximised over the stages. XLA's buffer assignment gives the working set; SPMD
programs are the same on every device, so only the resident bytes differ between devices.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from functools import partial

import jax
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from tabascal.fitting import optimiser, phases
from tabascal.model import joint, likelihood, sky
from tabascal.parallel import baseline_axis, blockwise, routes
from tabascal.planning import memory

logger = logging.getLogger(__name__)


def _stand_in(leaf):
    """A host array of ``leaf``'s dtype with its first axis and no elements after it."""
    if not isinstance(leaf, jax.ShapeDtypeStruct):
        return leaf
    if leaf.ndim == 0:
        return np.zeros((), leaf.dtype)
    return np.zeros((leaf.shape[0], *(0,) * (leaf.ndim - 1)), leaf.dtype)


def _is_abstract(leaf) -> bool:
    return isinstance(leaf, jax.ShapeDtypeStruct)


def place_abstract(model: joint.Model, axis: str, mesh, row_blocks: int = 1):
    """``routes.route(axis).place(model, mesh, row_blocks=...)`` for a model with abstract
    per-row arrays.

    Returns the placed model whose abstract arrays are ``jax.ShapeDtypeStruct``s with the
    route's padded leading axis, the model's trailing axes, and the route's sharding; its real
    arrays (metadata constants, per-antenna parameters) are placed for real. With axis "none"
    every array is given a single-device sharding on the first device.
    """
    parts = (model.constants, model.data, model.params)
    stand_in = jax.tree.map(_stand_in, parts, is_leaf=_is_abstract)
    standing = joint.Model(model.spec, *stand_in, model.info)
    if axis == "none":
        device = SingleDeviceSharding(jax.devices()[0])
        placed_parts = jax.tree.map(
            lambda x: x if _is_abstract(x) else jax.device_put(x, device),
            parts,
            is_leaf=_is_abstract,
        )
        placed_parts = jax.tree.map(
            lambda x: (
                jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device) if _is_abstract(x) else x
            ),
            placed_parts,
            is_leaf=_is_abstract,
        )
        single = joint.Model(model.spec, *placed_parts, model.info)
        return routes.keep_phase_moments("none", single, abstract=True)
    placed = routes.route(axis).place(standing, mesh, abstract_moments=True, row_blocks=row_blocks)
    abstract_paths = {
        path: leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(parts, is_leaf=_is_abstract)
        if _is_abstract(leaf)
    }
    found = set()

    def restore(path, leaf):
        if path not in abstract_paths:
            return leaf
        found.add(path)
        like = abstract_paths[path]
        shape = (leaf.shape[0], *like.shape[1:]) if like.ndim else ()
        leaf.delete()
        return jax.ShapeDtypeStruct(shape, like.dtype, sharding=leaf.sharding)

    placed_parts = jax.tree_util.tree_map_with_path(
        restore, (placed.constants, placed.data, placed.params)
    )
    missing = set(abstract_paths) - found
    if missing:
        names = ", ".join(jax.tree_util.keystr(p) for p in sorted(missing, key=str))
        raise ValueError(f"place_abstract: the {axis!r} placement moved {names}; cannot restore")
    constants, data, params = placed_parts
    return dataclasses.replace(placed, constants=constants, data=data, params=params)


def bytes_per_device(tree, devices) -> list[int]:
    """Bytes each of ``devices`` holds of the arrays in ``tree`` (real or abstract), from each
    array's sharding: one shard of ``sharding.shard_shape`` on every device it names."""
    totals = dict.fromkeys(devices, 0)
    for leaf in jax.tree.leaves(tree):
        shard = leaf.sharding.shard_shape(leaf.shape)
        size = int(np.prod(shard, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
        for device in leaf.sharding.device_set:
            if device in totals:
                totals[device] += size
    return [totals[d] for d in devices]


@dataclass(frozen=True)
class StageReport:
    """One compiled stage: XLA's memory figures (per device) and the bytes resident beside it
    (per device)."""

    name: str
    memory: memory.StageMemory
    resident: list[int]

    @property
    def peak(self) -> list[int]:
        return [r + self.memory.working_set for r in self.resident]


def abstract_arrays(tree):
    """ShapeDtypeStructs (with shardings) of a tree of real or abstract arrays."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def _output_tree(compiled, out_shape, mesh):
    """The compiled program's outputs as ShapeDtypeStructs with their shardings."""
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=_committed(sh, mesh)),
        out_shape,
        compiled.output_shardings,
    )


def _committed(sharding, mesh):
    """Scalars that depend on no input come back on one device; on a mesh they are taken as
    replicated, as ``jit`` treats an uncommitted array."""
    if mesh is not None and isinstance(sharding, SingleDeviceSharding):
        return NamedSharding(mesh, P())
    return sharding


def compile_stages(
    placed, axis: str, fit_config: optimiser.FitConfig, devices
) -> list[StageReport]:
    """Compile every stage of a fit of ``placed`` (from ``place_abstract``, or a real placed
    model) on ``axis`` and report each stage's memory (see the module docstring)."""
    r = routes.route(axis)
    spec = placed.spec
    constants, data, params = abstract_arrays((placed.constants, placed.data, placed.params))
    resident = bytes_per_device((constants, data, params), devices)
    reports = []

    def setup(params, constants, data):
        if getattr(spec, "row_blocks", 1) > 1:  # as blockwise's sky start: block by block
            args = (params.rfi, None, constants, data.vis, data.flags, spec)
            return baseline_axis.sky_mean_from_data(*args)
        rfi = r.predict_rfi(params.rfi, constants, spec)
        return sky.mean_from_data(data.vis - rfi, data.flags)

    optimizer = optimiser.make_optimizer(fit_config)
    loss_fn = partial(r.loss, spec=spec)

    def diagnostics(params, inputs):
        value, aux = loss_fn(params, inputs)
        return value, aux["chi2"]

    def export(prediction, vis, flags, noise, n_points):
        return likelihood.residual_and_chi2(prediction.model, vis, flags, noise, n_points)

    def stage(name, jitted, args, extra=()):
        start = time.perf_counter()
        compiled = jitted.lower(*args).compile()
        logger.info("%s: stage %s compiled in %.1f s", axis, name, time.perf_counter() - start)
        beside = bytes_per_device(extra, devices)
        here = [a + b for a, b in zip(resident, beside, strict=True)]
        reports.append(StageReport(name, memory.stage_memory(compiled), here))
        return compiled

    stage("setup", jax.jit(setup), (params, constants, data))
    mesh = getattr(spec, "mesh", None)
    state_shape = jax.eval_shape(optimizer.init, params)
    shardings = phases.state_shardings(params, state_shape, mesh, SingleDeviceSharding(devices[0]))
    init = jax.jit(optimizer.init, out_shardings=shardings)
    opt_state = _output_tree(stage("optimiser_init", init, (params,)), state_shape, mesh)
    state = phases.FitState(params, opt_state, jax.ShapeDtypeStruct((), np.int32))
    inputs = (constants, data)
    stage("diagnostics", jax.jit(diagnostics), (params, inputs), extra=opt_state)
    step = optimiser.make_step(loss_fn, optimizer, r.curvature_fn(fit_config, spec))
    stage("step", step, (state, inputs), extra=opt_state)
    if isinstance(step, optimiser.PhasedStep):
        # The polish's own program: its state in place of the gradient phases', which is
        # what the fit ends holding.
        opt_state = phases.polish_form(state, optimizer).opt_state
        stage("polish", step.jitted, (state._replace(opt_state=opt_state), inputs), opt_state)
    if getattr(spec, "row_blocks", 1) > 1:
        # The export takes each device's blocks of rows in turn (job's
        # _predicted_by_row_block): one block's prediction, then its residual.
        j = jax.ShapeDtypeStruct((), np.int32)
        predict_fn = partial(baseline_axis.predict_block, spec=spec)
        predicted = stage("predict", jax.jit(predict_fn), (params, constants, j), opt_state)
        prediction = _output_tree(predicted, jax.eval_shape(predict_fn, params, constants, j), mesh)
        take = jax.jit(partial(baseline_axis.rows_block, spec=spec))
        rows = [_output_tree(take.lower(x, j).compile(), jax.eval_shape(take, x, j), mesh)
                for x in (data.vis, data.flags, data.noise)]  # fmt: skip
        stage(
            "export", jax.jit(export), (prediction, *rows, data.n_points),
            extra=(opt_state, prediction, rows),
        )  # fmt: skip
        return reports
    predict_fn = partial(r.predict, spec=spec)
    predicted = stage("predict", jax.jit(predict_fn), (params, constants), extra=opt_state)
    prediction = _output_tree(predicted, jax.eval_shape(predict_fn, params, constants), mesh)
    rows = (data.vis, data.flags, data.noise, data.n_points)
    stage("export", jax.jit(export), (prediction, *rows), extra=(opt_state, prediction))
    return reports


def limiting_step(reports: list[StageReport]) -> StageReport:
    """Of the optimisation's stages ("step", and "polish" where the fit has one), the one
    whose program needs the most per device (arguments and working set)."""
    steps = [r for r in reports if r.name in ("step", "polish")]
    return max(steps, key=lambda r: r.memory.need)


def plan_stages(
    source,
    model_config,
    fit_config,
    route,
    *,
    init: str = "data",
    seed: int = 0,
    row_blocks: int = 1,
):
    """The placed abstract model of ``source`` on ``route`` over every device, and the report
    of each stage (``compile_stages``), with no visibility held beyond one read's rows.

    source: a ``blockwise.RowSource``; its statistics are read a chunk of rows at a time
    (``blockwise.data_stats``) because they size the RFI operators' fine sampling, and hence
    the shapes. init: the fit's; the shapes do not depend on it, so the inits that need the
    data or the truth are planned as "data". row_blocks: ``sharding.row_blocks``.
    """
    stats = blockwise.data_stats(source)
    meta = source.meta
    abstract = joint.abstract_model(
        meta,
        model_config,
        snr=stats.snr,
        rfi_level=model_config.rfi_sigma or stats.rfi_level(meta.n_sat),
        init="prior" if init == "prior" else "data",
        seed=seed,
        noise_per_channel=source.noise_per_channel,
    )
    placed = place_abstract(abstract, route.name, route.make_mesh(), row_blocks)
    return placed, compile_stages(placed, route.name, fit_config, routes.devices(placed.spec))
