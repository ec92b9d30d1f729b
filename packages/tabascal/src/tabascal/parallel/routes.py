"""The one registry of the ways a fit is laid out over devices.

A route is the choice of what the devices split (``ROUTES``):

* ``none``: one device runs the plain model functions (``tabascal.model.joint``);
* ``source``: the satellites are split across a 1-D mesh ("src", ``source_axis``), every
  device holding every baseline: the comparison route;
* ``baseline``: the baselines are split across a 1-D mesh ("bl", ``baseline_axis``), so the
  visibility memory divides across devices;
* ``reuse``: the baseline axis with its rows permuted by the antenna-reuse plan, so that each
  device touches few antennas.

The config's ``sharding.axis`` (and ``--shard-axis``) takes one of ``SHARD_AXES``; "reuse" is
the baseline axis with ``sharding.reuse_plan`` (``--reuse-plan``) on, which ``route`` joins.
Every consumer (``tabascal run``, the compiled stages, ``tabascal plan``, the demo and the
benchmarks) takes its functions from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from tabascal.config import ConfigError
from tabascal.model import joint, rfi_vis
from tabascal.parallel import baseline_axis, processes, row_placement, source_axis
from tabascal.planning import memory

#: What ``sharding.axis`` accepts.
SHARD_AXES = ("none", "source", "baseline")
#: Every route: the shard axes and the baseline axis with the antenna-reuse plan.
ROUTES = (*SHARD_AXES, "reuse")


@dataclass(frozen=True)
class Route:
    """How one route places a model and evaluates it.

    name: one of ``ROUTES``. place(model, mesh) -> the placed model (``spec``, ``constants``,
    ``data``, ``params``, ``info``), mesh from ``make_mesh`` (None for "none"), with the phase
    moments ``rfi.phase_cache`` keeps formed (``keep_phase_moments``; abstract with
    ``abstract_moments=True``). predict,
    predict_rfi and loss take the placed ``spec`` as their last argument (``joint.predict``'s
    signature); loss is ``joint.loss`` over this route's predict. unpad(prediction, spec) -> the
    prediction on the host (numpy) in the data's row order. make_mesh(n_dev=None) -> the mesh
    over the first n_dev devices (all when None). by_block: the baseline axis's outputs leave
    block by block and its model can be built block by block (``blockwise.build``).
    """

    name: str
    place: Callable[..., Any]
    predict: Callable[..., joint.Prediction]
    predict_rfi: Callable[..., jax.Array]
    loss: Callable[..., Any]
    unpad: Callable[..., joint.Prediction]
    make_mesh: Callable[..., Any]
    by_block: bool

    @property
    def shard_axis(self) -> str:
        """The ``sharding.axis`` value of this route."""
        return "baseline" if self.name == "reuse" else self.name

    @property
    def reuse_plan(self) -> bool:
        return self.name == "reuse"

    @property
    def gauss_newton(self) -> Callable[..., Any]:
        """``joint.gauss_newton`` over this route's predict: (params, tangent, inputs, spec)."""
        return partial(joint.gauss_newton, predict=self.predict)

    def curvature_fn(self, fit_config, spec) -> Callable[..., Any] | None:
        """The Gauss-Newton product for ``optimiser.make_step`` where ``fit_config``'s polish
        takes it (``polish: levenberg-marquardt``, or ``polish_curvature: gauss-newton``),
        else None."""
        takes = fit_config.polish == "levenberg-marquardt"
        if fit_config.polish_curvature != "gauss-newton" and not takes:
            return None
        if getattr(spec, "row_blocks", 1) > 1:  # the likelihood's part block by block
            return partial(baseline_axis.blocked_gauss_newton, spec=spec)
        return partial(self.gauss_newton, spec=spec)


def devices(spec) -> list:
    """The devices a placed model's ``spec`` runs on: its mesh's, or the first device."""
    mesh = getattr(spec, "mesh", None)
    return [jax.devices()[0]] if mesh is None else list(mesh.devices.flat)


def _place_single(model: joint.Model, mesh: None) -> joint.Model:
    return model


def _model_shape(placed):
    """The model spec, (n_src, n_freq, n_time) and the complex dtype of the kept moments."""
    model_spec = getattr(placed.spec, "model", placed.spec)
    shape = (model_spec.n_src, model_spec.n_freq, model_spec.n_time)
    cplx = np.result_type(np.dtype(placed.constants.phase.dtype), np.complex64)
    return model_spec, shape, cplx


def _moment_sizes(placed, centres: bool = False) -> tuple[list[int], Any]:
    """Each group's kept-moment bytes per device (with ``centres``, kept at the channels'
    centres), and the model spec."""
    model_spec, shape, cplx = _model_shape(placed)
    # Rows per block, and row_blocks blocks on each device (on the baseline axis).
    blocks = getattr(placed.spec, "row_blocks", 1)
    sizes = [
        blocks
        * rfi_vis.moments_bytes(
            spec, tables.indices.a1.shape[-1], shape, model_spec.rfi_vis, cplx, centres
        )
        for spec, tables in zip(model_spec.groups, placed.constants.groups, strict=True)
    ]
    return sizes, model_spec


def agreed_device_memory(mesh_devices) -> int | None:
    """The memory of the smallest device of ``mesh_devices`` that any process can see
    (``planning.memory.device_memory_bytes``), the same figure in every process, since every
    process must plan the same program; None where no process knows its devices' memory."""
    here = [d for d in mesh_devices if d.process_index == jax.process_index()]
    known = [memory.device_memory_bytes(d) for d in here]
    mine = min((b for b in known if b is not None), default=-1)
    every = processes.gather_exact(np.array(mine, np.int64))
    every = every[every >= 0]
    return int(every.min()) if every.size else None


def keep_phase_moments(name: str, placed, *, abstract: bool = False):
    """``placed`` (route ``name``) with the phase moments of the analytic groups that
    ``rfi.phase_cache`` keeps formed once (``rfi_vis.plan_phase_cache``), and
    ``info["rfi_phase_cache"]`` saying which. The source axis splits each group's satellites
    over devices and forms them at every step. abstract: the moments as
    ``jax.ShapeDtypeStruct``s of their shape and sharding, not formed (``tabascal plan``).
    """
    sizes, model_spec = _moment_sizes(placed)
    centre_sizes, _ = _moment_sizes(placed, centres=True)
    budget = rfi_vis.phase_cache_budget_bytes(
        model_spec.rfi_vis, agreed_device_memory(devices(placed.spec))
    )
    blocks = getattr(placed.spec, "row_blocks", 1)
    if blocks > 1:
        # Each block's share of the moments is copied for its turn: M kept cost M (1 + 1 / k).
        budget = (
            budget[0] * blocks // (blocks + 1),
            f"{budget[1]}; k / (k + 1) of it with row_blocks k = {blocks}, whose blocks each "
            "copy their share for their turn",
        )
    # Fitted orbit corrections move the delays at every step: the moments cannot be kept.
    orbits_fitted = getattr(placed.constants, "orbits", None) is not None
    if name == "source" or orbits_fitted:
        keep = (False,) * len(sizes)
    else:
        keep = rfi_vis.plan_phase_cache(
            sizes, model_spec.groups, model_spec.rfi_vis, budget[0], centre_sizes
        )
    report = rfi_vis.phase_cache_report(
        sizes, model_spec.groups, keep, model_spec.rfi_vis, budget, centre_sizes
    )
    if orbits_fitted:
        report["formed_every_step"] = "orbits.fit: the delays change at every step"
    if abstract:
        constants = _abstract_moments(placed, model_spec, keep)
    elif name == "none":
        constants = _single_device_moments(placed.constants, model_spec, keep)
    else:  # the baseline axis, with or without the reuse plan
        constants = baseline_axis.keep_phase_moments(placed.constants, placed.spec, keep)
    info = {**placed.info, "rfi_phase_cache": report}
    return dataclasses.replace(placed, constants=constants, info=info)


def _single_device_moments(constants: joint.ModelConstants, model_spec, keep):
    groups = list(constants.groups)
    for g, spec in enumerate(model_spec.groups):
        if keep[g]:
            moments = rfi_vis.group_moments(
                spec,
                groups[g],
                constants.phase,
                constants.delay_us,
                constants.freq_mhz,
                model_spec.rfi_vis,
            )
            groups[g] = groups[g]._replace(moments=moments)
    return constants._replace(groups=tuple(groups))


def _abstract_moments(placed, model_spec, keep):
    """The kept moments as abstract arrays: (n_mom, n_rows, n_freq, n_time, n_src, n_int_f) on
    one device, or a leading device axis on the baseline axis's mesh."""
    if not any(keep):
        return placed.constants
    mesh = getattr(placed.spec, "mesh", None)
    sharding = (
        SingleDeviceSharding(jax.devices()[0])
        if mesh is None
        else NamedSharding(mesh, PartitionSpec(row_placement.AXIS))
    )
    _, shape, cplx = _model_shape(placed)
    groups = list(placed.constants.groups)
    for g, spec in enumerate(model_spec.groups):
        if keep[g]:
            rows = groups[g].indices.a1.shape  # (n_rows,), or (n_dev, n_rows) on a mesh
            centres = keep[g] == rfi_vis.KEPT_AT_CENTRES
            moments = rfi_vis.moments_shape(spec, rows, shape, model_spec.rfi_vis, centres)
            if mesh is not None:  # the device axis leads, as baseline_axis forms them
                moments = (rows[0], moments[0], *moments[2:])
            moments = jax.ShapeDtypeStruct(moments, cplx, sharding=sharding)
            groups[g] = groups[g]._replace(moments=moments)
    return placed.constants._replace(groups=tuple(groups))


def _keeping_moments(name: str, place):
    """``place`` followed by ``keep_phase_moments``: every route's placement."""

    def placed(model, mesh, *, abstract_moments: bool = False, row_blocks: int = 1):
        if row_blocks == 1:
            model = place(model, mesh)
        elif name == "baseline":
            model = place(model, mesh, row_blocks=row_blocks)
        else:
            raise ConfigError(
                f"sharding.row_blocks {row_blocks} needs the plain baseline axis (--shard-axis "
                f"baseline, without the reuse plan), not route {name!r}; on one device, "
                "--shard-axis baseline places the model on a mesh of that device alone"
            )
        return keep_phase_moments(name, model, abstract=abstract_moments)

    return placed


def _to_host(prediction: joint.Prediction, spec) -> joint.Prediction:
    return jax.tree.map(np.asarray, prediction)


def _no_mesh(n_dev: int | None = None) -> None:
    return None


def _baseline_route(name: str, reuse: bool) -> Route:
    return Route(
        name=name,
        place=_keeping_moments(name, partial(baseline_axis.shard_model, reuse=reuse)),
        predict=baseline_axis.predict,
        predict_rfi=baseline_axis.predict_rfi,
        loss=baseline_axis.loss,
        unpad=baseline_axis.unpad,
        make_mesh=baseline_axis.make_mesh,
        by_block=True,
    )


_REGISTRY = {
    "none": Route(
        name="none",
        place=_keeping_moments("none", _place_single),
        predict=joint.predict,
        predict_rfi=joint.predict_rfi,
        loss=joint.loss,
        unpad=_to_host,
        make_mesh=_no_mesh,
        by_block=False,
    ),
    "source": Route(
        name="source",
        place=_keeping_moments("source", source_axis.shard_model),
        predict=source_axis.predict,
        predict_rfi=source_axis.predict_rfi,
        loss=source_axis.loss,
        unpad=source_axis.unpad,
        make_mesh=source_axis.make_mesh,
        by_block=False,
    ),
    "baseline": _baseline_route("baseline", reuse=False),
    "reuse": _baseline_route("reuse", reuse=True),
}


def route(axis: str, reuse_plan: bool = False) -> Route:
    """The ``Route`` of ``axis`` (one of ``ROUTES``); ``reuse_plan`` turns "baseline" into
    "reuse" and is refused on any other axis."""
    if axis not in _REGISTRY:
        raise ConfigError(f"shard axis {axis!r} is not known; choose one of {', '.join(ROUTES)}")
    if reuse_plan and axis not in ("baseline", "reuse"):
        raise ConfigError(
            f"the antenna-reuse plan needs the baseline axis, not {axis!r}; pass "
            "--shard-axis baseline or drop --reuse-plan"
        )
    return _REGISTRY["reuse" if reuse_plan else axis]
