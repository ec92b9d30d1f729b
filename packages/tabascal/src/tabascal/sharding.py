"""The joint model sharded along the baseline axis over a 1-D device mesh ("bl").

Device d owns rows [d B, (d + 1) B) of the data (``tabascal_partition.ownership``, no
reordering); the baseline axis is padded to n_dev B rows. Padded rows are flagged, with vis 0,
noise 1, a1 = a2 = 0, sky parameters 0 and sky constants copied from row 0, so they add exactly
nothing to the loss or its gradient.

Placement: every array with a baseline axis (data, a1, a2, the sky constants'
``sky.BASELINE_FIELDS``, the sky parameters and every visibility-shaped intermediate) lives on
``P("bl")``; per-antenna and per-source arrays (RFI signal, gains, phase, delay_us, freq_mhz)
are replicated. The RFI term runs in ``shard_map``: each device gets the whole per-antenna
signal, appends the plan's ghost antennas (zero signal), evaluates each group with its own
stacked index arrays through the ri_kernels seams, scatters into a local (B + 1, n_freq,
n_time) buffer at the plan's positions (padding lands in the spare row B) and keeps the first
B rows. The sky, the gains and the likelihood act row by row, so they run under ``jit`` on the
sharded arrays, with sharding constraints keeping ``P("bl")`` between components. Only scalars
and the gradients of replicated parameters are summed across devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import ri_kernels
import tabascal_partition
from tabascal.model import gains, joint, likelihood, rfi_signal, rfi_vis, sky

AXIS = "bl"


def make_mesh(n_dev: int | None = None, axis: str = AXIS) -> Mesh:
    """A 1-D mesh named ``axis`` over the first ``n_dev`` devices (all of them when None)."""
    devices = jax.devices()
    n_dev = len(devices) if n_dev is None else n_dev
    if not 1 <= n_dev <= len(devices):
        raise ValueError(
            f"make_mesh: {n_dev} devices asked for but {len(devices)} are visible; on CPU, set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n_dev} before importing jax"
        )
    return Mesh(np.asarray(devices[:n_dev]), (axis,))


@dataclass(frozen=True)
class ShardedSpec:
    """Static description of the sharded model (hashable, closed over by ``loss``).

    model: the single-device ``joint.ModelSpec`` (n_bl counts real rows only).
    mesh: the 1-D mesh; block_size: B rows per device; n_ghost: ghost antennas appended on
    every device (n_ant + n_ghost = n_ant_total).
    """

    model: joint.ModelSpec
    mesh: Mesh
    block_size: int
    n_ghost: int

    @property
    def n_dev(self) -> int:
        return self.mesh.size

    @property
    def n_rows(self) -> int:
        """Rows of every sharded visibility cube: n_dev * B (real rows first)."""
        return self.n_dev * self.block_size


@dataclass(frozen=True)
class ShardedModel:
    """``joint.Model`` with its arrays padded and placed on the mesh (see the module doc).

    constants.groups hold, per group, ``GroupTables`` whose ``indices`` are stacked one set per
    device (leading axis n_dev) and whose ``rows`` are the plan's local scatter positions
    (n_dev, padded), both on ``P("bl")``; plan is the ``tabascal_partition.ShardPlan``.
    """

    spec: ShardedSpec
    constants: joint.ModelConstants
    data: joint.Data
    params: joint.ModelParams
    plan: tabascal_partition.ShardPlan
    info: dict


def _rows(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXIS))


def _replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def _pad_rows(array, n_rows: int, fill) -> np.ndarray:
    """``array`` (n_bl, ...) extended to n_rows rows; ``fill`` is a value or "copy" (row 0)."""
    array = np.asarray(array)
    extra = n_rows - array.shape[0]
    if fill == "copy":
        tail = np.broadcast_to(array[:1], (extra, *array.shape[1:]))
    else:
        tail = np.full((extra, *array.shape[1:]), fill, array.dtype)
    return np.concatenate([array, tail.astype(array.dtype)])


def _put_rows(array: np.ndarray, mesh: Mesh) -> jax.Array:
    """Place a padded host array on ``P("bl")``, each device given only its own block."""
    sharding = _rows(mesh)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def _put_replicated(tree, mesh: Mesh):
    return jax.device_put(tree, _replicated(mesh))


def _group_labels(groups: tuple[rfi_vis.GroupTables, ...], n_bl: int) -> np.ndarray:
    labels = np.full(n_bl, -1, np.int64)
    for g, tables in enumerate(groups):
        labels[np.asarray(tables.rows)] = g
    if (labels < 0).any():
        raise ValueError("shard_model: some baselines belong to no RFI group")
    return labels


def _sharded_groups(model: joint.Model, plan, mesh: Mesh) -> tuple[rfi_vis.GroupTables, ...]:
    """Per group: stacked per-device indices and local positions on P("bl"), tables replicated."""
    out = []
    for tables, group in zip(model.constants.groups, plan.groups, strict=True):
        indices = ri_kernels.stack_indices(
            [
                ri_kernels.make_indices(plan.n_ant_total, group.a1[d], group.a2[d])
                for d in range(plan.n_dev)
            ]
        )
        indices = jax.tree.map(lambda x: _put_rows(np.asarray(x, np.int32), mesh), indices)
        positions = _put_rows(np.asarray(group.positions, np.int32), mesh)
        rest = _put_replicated(tables._replace(indices=None, rows=None), mesh)
        out.append(rest._replace(indices=indices, rows=positions))
    return tuple(out)


def shard_model(model: joint.Model, mesh: Mesh) -> ShardedModel:
    """Pad ``model``'s baseline axis to n_dev B rows and place every array on ``mesh``."""
    spec = model.spec
    n_dev = mesh.size
    a1, a2 = np.asarray(model.constants.a1), np.asarray(model.constants.a2)
    labels = _group_labels(model.constants.groups, spec.n_bl)
    plan = tabascal_partition.plan_shards(a1, a2, spec.n_ant, n_dev, groups=labels)
    n_rows = n_dev * plan.block_size

    def rows(array, fill):
        return _put_rows(_pad_rows(array, n_rows, fill), mesh)

    sky_c = model.constants.sky
    sky_c = _put_replicated(sky_c, mesh)._replace(
        **{name: rows(getattr(model.constants.sky, name), "copy") for name in sky.BASELINE_FIELDS}
    )
    constants = _put_replicated(
        model.constants._replace(sky=None, groups=None, a1=None, a2=None), mesh
    )
    constants = constants._replace(
        sky=sky_c,
        groups=_sharded_groups(model, plan, mesh),
        a1=rows(a1, 0),
        a2=rows(a2, 0),
    )
    data = joint.Data(
        vis=rows(model.data.vis, 0),
        flags=rows(model.data.flags, True),
        noise=rows(model.data.noise, 1),
        n_points=_put_replicated(model.data.n_points, mesh),
    )
    params = _put_replicated(model.params._replace(sky=None), mesh)._replace(
        sky=sky.SkyParams(rows(model.params.sky.z, 0))
    )
    info = dict(model.info, n_devices=n_dev, block_size=plan.block_size, n_ghost=plan.n_ghost)
    sharded_spec = ShardedSpec(spec, mesh, plan.block_size, plan.n_ghost)
    return ShardedModel(sharded_spec, constants, data, params, plan, info)


def _keep_rows(x: jax.Array, spec: ShardedSpec) -> jax.Array:
    return jax.lax.with_sharding_constraint(x, _rows(spec.mesh))


def _append_ghosts(x: jax.Array, n_ghost: int) -> jax.Array:
    return jnp.concatenate([x, jnp.zeros((n_ghost, *x.shape[1:]), x.dtype)])


def rfi_block(amp, phase, delay_us, freq_mhz, groups, spec: ShardedSpec) -> jax.Array:
    """One device's RFI visibilities (B, n_freq, n_time); runs inside ``shard_map``.

    amp, phase: (n_ant, n_src, n_freq, n_time), delay_us: (n_ant, n_src, n_time, n_path), all
    antennas (replicated); groups: this device's tables, indices and positions with a leading
    axis of 1.
    """
    amp, phase, delay_us = (_append_ghosts(x, spec.n_ghost) for x in (amp, phase, delay_us))
    n_freq, n_time = amp.shape[2], amp.shape[3]
    block = jnp.zeros((spec.block_size + 1, n_freq, n_time), amp.dtype)
    for group_spec, tables in zip(spec.model.groups, groups, strict=True):
        local = tables._replace(indices=jax.tree.map(lambda x: x[0], tables.indices))
        out = rfi_vis.evaluate_group(
            group_spec, local, amp, phase, delay_us, freq_mhz, spec.model.rfi_vis
        )
        # Real positions are distinct; padded entries all add into the spare row B.
        block = block.at[tables.rows[0]].add(out)
    return block[: spec.block_size]


def predict_rfi(rfi_params, constants: joint.ModelConstants, spec: ShardedSpec) -> jax.Array:
    """RFI visibilities (n_dev B, n_freq, n_time) on ``P("bl")``, before the gains."""
    amp = rfi_signal.forward(rfi_params, constants.rfi_signal)
    group_specs = tuple(
        tables._replace(indices=P(AXIS), rows=P(AXIS), **{f: P() for f in _TABLE_FIELDS})
        for tables in constants.groups
    )
    mapped = jax.shard_map(
        lambda *args: rfi_block(*args, spec=spec),
        mesh=spec.mesh,
        in_specs=(P(), P(), P(), P(), group_specs),
        out_specs=P(AXIS),
    )
    vis = mapped(amp, constants.phase, constants.delay_us, constants.freq_mhz, constants.groups)
    return _keep_rows(vis, spec)


_TABLE_FIELDS = tuple(f for f in rfi_vis.GroupTables._fields if f not in ("indices", "rows"))


def predict(params: joint.ModelParams, constants, spec: ShardedSpec) -> joint.Prediction:
    """Sharded ``joint.predict``: cubes (n_dev B, n_freq, n_time) on ``P("bl")``, padded rows
    last; gains (n_ant, n_freq, n_time) replicated. ``unpad`` returns the data's rows."""
    v_rfi = predict_rfi(params.rfi, constants, spec)
    v_sky = _keep_rows(sky.forward(params.sky, constants.sky), spec)
    g = gains.forward(params.gains, constants.gains)
    model = _keep_rows(gains.apply(v_sky + v_rfi, g, constants.a1, constants.a2), spec)
    return joint.Prediction(v_sky, v_rfi, g, model)


def loss(params: joint.ModelParams, inputs, spec: ShardedSpec):
    """Sharded ``joint.loss``: (loss, {"chi2": reduced chi-squared}); inputs = (constants,
    data) of a ``ShardedModel``. Padded rows are flagged, so n_points is the real data's."""
    constants, data = inputs
    model = predict(params, constants, spec).model
    nll = likelihood.neg_log_likelihood(model, data.vis, data.flags, data.noise)
    priors = (sky.prior(params.sky), rfi_signal.prior(params.rfi), gains.prior(params.gains))
    value = likelihood.loss(nll, priors, data.n_points)
    return value, {"chi2": nll / data.n_points.astype(nll.dtype)}


def unpad(prediction: joint.Prediction, spec: ShardedSpec) -> joint.Prediction:
    """The prediction on the host (numpy), cubes cut to the data's n_bl rows in their order."""
    n_bl = spec.model.n_bl
    return joint.Prediction(
        sky=np.asarray(prediction.sky)[:n_bl],
        rfi=np.asarray(prediction.rfi)[:n_bl],
        gains=np.asarray(prediction.gains),
        model=np.asarray(prediction.model)[:n_bl],
    )


def unpad_params(params: joint.ModelParams, spec: ShardedSpec) -> joint.ModelParams:
    """Parameters on the host with the sky's padded rows dropped (joint.Model's layout)."""
    host = jax.tree.map(np.asarray, params)
    return host._replace(sky=sky.SkyParams(host.sky.z[: spec.model.n_bl]))
