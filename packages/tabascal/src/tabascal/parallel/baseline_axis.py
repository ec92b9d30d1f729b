"""The joint model sharded along the baseline axis over a 1-D device mesh ("bl").

Device d owns rows [d B, (d + 1) B) (``tabascal_partition.ownership``) of the rows in the spread
order of each baseline's (RFI group, sky group) (``tabascal_partition.spread_order``, see
``plan_rows``): every device holds its share of every group, each block in the data's order;
the baseline axis is padded to n_dev B rows. Padded rows are flagged, with vis 0,
noise 1, a1 = a2 = 0, sky parameters 0 and sky constants copied from row 0, so they add exactly
nothing to the loss or its gradient.

With ``reuse=True`` the rows are instead permuted by the partition's antenna-reuse plan
(``tabascal_partition.antenna_reuse_plan``), so that each device's block touches few antennas:
every per-baseline array (data, a1, a2, sky constants and parameters, RFI group membership) is
taken in the plan's packed order, each device numbers its antennas compactly (its table of
global antennas, padded to one common length with zero-signal entries and ghosts) and gathers
the per-antenna signal of just those inside the map. ``unpad`` and ``unpad_params`` invert the
permutation, so results leave in the data's order either way.

Placement: every array with a baseline axis (data, a1, a2, the sky constants'
``sky.BASELINE_FIELDS`` and every visibility-shaped intermediate) lives on ``P("bl")``. The sky's
groups (``sky``: one box of modes per group) are placed like the RFI groups: each device holds the
members among its own rows of every group, padded to the group's most on any device (``SkySlots``),
with their rows within the device's block (the spare row B for a padding slot, whose weights and
parameters are zero); the sky runs in ``shard_map``, each device scattering its groups into its
block. The rest: per-antenna and per-source parameters (RFI signal modes, gains) and freq_mhz are
replicated. With fixed orbits the RFI geometry (phase, delay_us, and the shared signal's
per-antenna factor) is placed per device (``ShardedSpec.device_geometry``): (n_dev, n_ant_total,
...) on ``P("bl")``, each device holding the rows of its antennas (``device_antenna_table``): with
the reuse plan its compact table's, so no device holds or copies the geometry of antennas it does
not use; without it every antenna's with the ghosts appended. With fitted orbits, corrected before
the map, it is replicated. The RFI term runs in ``shard_map``: each device synthesises the
per-antenna signal of its antennas from the replicated parameters (all of them, or with a reuse
plan its compact table), appends the plan's ghost antennas (zero signal), evaluates each group with
its own stacked index arrays through the ri_kernels seams, scatters into a local (B + 1, n_freq,
n_time) buffer at the plan's positions (padding lands in the spare row B) and keeps the first B
rows. The gains and the likelihood act row by row, so they run under ``jit`` on the
sharded arrays, with sharding constraints keeping ``P("bl")`` between components. Only scalars and
the gradients of replicated parameters are summed across devices.

With ``row_blocks`` k (``ShardedSpec.row_blocks``, ``sharding.row_blocks``) the rows are placed
as for k n_dev devices, each device holding k blocks of B rows, and every map above takes its
device's blocks in turn; ``loss`` then sums the likelihood block by block (``blocked_nll``), each
block recomputed in reverse mode, so that derivatives hold one block's visibility-shaped
intermediates at a time. The Gauss-Newton product does the same (``blocked_gauss_newton``), and
the export predicts block j of every device's rows in turn (``predict_block``, ``rows_block``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import ri_kernels
import tabascal_partition
from tabascal.model import gains, joint, likelihood, orbit_corrections, rfi_signal, rfi_vis, sky

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


class SkySlots(NamedTuple):
    """One sky group's slots, C per device (n_dev C in all, device d's from d C): member, the
    group member (its index in the group's rows in the data's order) in each slot, -1 for a
    padding slot; local, the slot's row within its device's block, B for a padding slot. Read
    on the host only."""

    member: np.ndarray
    local: np.ndarray


def plan_sky_slots(group_rows, order: np.ndarray | None, n_dev: int, block_size: int):
    """Each sky group's ``SkySlots`` (host). group_rows: per group, its members' data rows (the
    whole model's ``SkyGroup.rows``); order: the data row behind each sharded row (None: the
    data's order). Members keep their sharded rows' order on each device."""
    n_bl = sum(len(rows) for rows in group_rows)
    sharded = np.arange(n_bl) if order is None else np.argsort(np.asarray(order))
    slots = []
    for rows in group_rows:
        at = sharded[np.asarray(rows, np.int64)]  # each member's sharded row
        by_row = np.argsort(at, kind="stable")
        device = at[by_row] // block_size
        counts = np.bincount(device, minlength=n_dev)
        per_device = max(int(counts.max(initial=0)), 1)
        rank = np.arange(by_row.size) - np.concatenate([[0], np.cumsum(counts)])[device]
        member = np.full((n_dev, per_device), -1, np.int64)
        local = np.full((n_dev, per_device), block_size, np.int32)
        member[device, rank] = by_row
        local[device, rank] = at[by_row] - device * block_size
        slots.append(SkySlots(member.reshape(-1), local.reshape(-1)))
    return tuple(slots)


@dataclass(frozen=True)
class ShardedSpec:
    """Static description of the sharded model (hashable, closed over by ``loss``).

    model: the single-device ``joint.ModelSpec`` (n_bl counts real rows only).
    mesh: the 1-D mesh; block_size: B rows per device; n_ghost: ghost antennas appended on
    every device (n_ant + n_ghost = n_ant_total).
    antenna_ids: None (every device takes all antennas, in order), or with the reuse plan, per
    device the global antenna behind each of its compact antennas (n_dev tuples of
    n_ant_total), n_ant for a zero-signal one (ghost or unused slot). Small and static: it is
    part of the compiled program, selected by the device's position on the mesh.
    reuse: the ``tabascal_partition.ReusePlan`` the rows were permuted by, or None.
    order: the data row behind each sharded row (the reuse plan's order, or
    ``tabascal_partition.spread_order``), or None: the data's order. reuse and order are read on
    the host only (``unpad``), so they take no part in comparing specs.
    device_geometry: constants.phase and constants.delay_us, and the shared RFI signal's
    per-antenna factor (``signal_factor_by_device``), are placed per device, (n_dev,
    n_ant_total, ...) on ``P("bl")`` in each device's antenna numbering (``place_geometry``);
    False: replicated, (n_ant, ...) (see ``_geometry_by_device``).
    row_blocks: each device's rows are this many blocks of B rows, planned as blocks of
    ``row_blocks * n_dev`` devices would be (each holding its share of every group); ``loss``
    then runs them in turn (``sharding.row_blocks``, see ``blocked_nll``). 1: one block per
    device.
    """

    model: joint.ModelSpec
    mesh: Mesh
    block_size: int
    n_ghost: int
    antenna_ids: tuple[tuple[int, ...], ...] | None = None
    reuse: tabascal_partition.ReusePlan | None = field(default=None, compare=False, repr=False)
    device_geometry: bool = False
    order: np.ndarray | None = field(default=None, compare=False, repr=False)
    sky_slots: tuple[SkySlots, ...] | None = field(default=None, compare=False, repr=False)
    row_blocks: int = 1

    @property
    def n_dev(self) -> int:
        return self.mesh.size

    @property
    def n_blocks(self) -> int:
        """Blocks of B rows: ``row_blocks`` per device, device d holding blocks [d row_blocks,
        (d + 1) row_blocks)."""
        return self.n_dev * self.row_blocks

    @property
    def device_rows(self) -> int:
        """Rows each device holds: row_blocks * B."""
        return self.row_blocks * self.block_size

    @property
    def n_rows(self) -> int:
        """Rows of every sharded visibility cube: n_blocks * B (real rows first)."""
        return self.n_blocks * self.block_size


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


def _put_rows(array: np.ndarray, mesh: Mesh) -> jax.Array:
    """Place a host array of n_dev B rows on ``P("bl")``, each device given only its block."""
    sharding = _rows(mesh)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def _place_rows(array, fill, mesh: Mesh, n_rows: int, order: np.ndarray | None) -> jax.Array:
    """``array`` (n_bl, ...) in the data's order, on ``P("bl")`` as n_rows sharded rows.

    Sharded row i holds data row ``order[i]`` (row i without a reuse plan); rows from n_bl on
    are padding, ``fill`` (a value, or "copy" for a copy of data row 0). Each device's block is
    built from its own rows only.
    """
    array = np.asarray(array)
    n_bl = array.shape[0]
    if fill == "copy":
        pad_row = array[:1]
    else:
        pad_row = np.full((1, *array.shape[1:]), fill, array.dtype)

    def block(index):
        start, stop, _ = index[0].indices(n_rows)
        real_stop = max(min(stop, n_bl), start)
        rows = slice(start, real_stop) if order is None else order[start:real_stop]
        tail = np.broadcast_to(pad_row, (stop - real_stop, *array.shape[1:]))
        whole = np.concatenate([array[rows], tail.astype(array.dtype)])
        return whole[(slice(None), *index[1:])]

    shape = (n_rows, *array.shape[1:])
    return jax.make_array_from_callback(shape, _rows(mesh), block)


def _place_slots(array, member: np.ndarray, mesh: Mesh) -> jax.Array:
    """A group's array (n_g, ...) in its slots on ``P("bl")``: slot i holds member
    ``member[i]``, zeros for a padding slot (-1); each device's block from its own slots."""
    array = np.asarray(array)
    padded = np.concatenate([array, np.zeros((1, *array.shape[1:]), array.dtype)])
    source = np.where(member < 0, array.shape[0], member)

    def block(index):
        return padded[source[index[0]]][(slice(None), *index[1:])]

    return jax.make_array_from_callback((member.size, *array.shape[1:]), _rows(mesh), block)


def place_sky(sky_c: sky.SkyConstants, placement: RowPlacement) -> sky.SkyConstants:
    """The whole model's sky constants in the placement's slots (``placement.spec.sky_slots``):
    scale and mean in its rows (padding rows copy row 0), each group's weights in its slots
    with their local rows, the DFT matrices replicated."""
    spec = placement.spec
    mesh, slots = spec.mesh, spec.sky_slots
    groups = tuple(
        group._replace(
            rows=_put_rows(slot.local, mesh),
            weight_freq=_place_slots(group.weight_freq, slot.member, mesh),
            weight_time=_place_slots(group.weight_time, slot.member, mesh),
            dft_freq=replicate(group.dft_freq, mesh),
            dft_time=replicate(group.dft_time, mesh),
        )
        for group, slot in zip(sky_c.groups, slots, strict=True)
    )
    return sky.SkyConstants(
        groups=groups,
        scale=place_rows(sky_c.scale, "copy", placement),
        mean=place_rows(sky_c.mean, "copy", placement),
    )


def place_sky_params(z, placement: RowPlacement) -> tuple[jax.Array, ...]:
    """The whole model's sky parameters (one array per group) in the placement's slots, zeros
    in padding slots."""
    mesh, slots = placement.spec.mesh, placement.spec.sky_slots
    return tuple(_place_slots(zg, slot.member, mesh) for zg, slot in zip(z, slots, strict=True))


def with_sky_groups(placement: RowPlacement, sky_c: sky.SkyConstants) -> RowPlacement:
    """``placement`` with the slots of the whole model's sky groups (``plan_sky_slots``)."""
    spec = placement.spec
    group_rows = [np.asarray(group.rows) for group in sky_c.groups]
    slots = plan_sky_slots(group_rows, placement.order, spec.n_blocks, spec.block_size)
    return placement._replace(spec=replace(spec, sky_slots=slots))


def sky_labels(sky_c: sky.SkyConstants, n_bl: int) -> np.ndarray:
    """(n_bl,) int64: each baseline's sky group (the whole model's constants, host)."""
    labels = np.zeros(n_bl, np.int64)
    for g, group in enumerate(sky_c.groups):
        labels[np.asarray(group.rows)] = g
    return labels


def replicate(tree, mesh: Mesh):
    return jax.device_put(tree, _replicated(mesh))


def _group_labels(groups: tuple[rfi_vis.GroupTables, ...], n_bl: int) -> np.ndarray:
    labels = np.full(n_bl, -1, np.int64)
    for g, tables in enumerate(groups):
        labels[np.asarray(tables.rows)] = g
    if (labels < 0).any():
        raise ValueError("shard_model: some baselines belong to no RFI group")
    return labels


def _sharded_groups(groups, plan, mesh: Mesh) -> tuple[rfi_vis.GroupTables, ...]:
    """Per group: stacked per-device indices and local positions on P("bl"), tables replicated."""
    out = []
    for tables, group in zip(groups, plan.groups, strict=True):
        # Sized to what the devices' lists touch: a block of rows pairs few distinct a1 with
        # the a2 after them, so the quadrature operator's Gram products per cell shrink with it.
        indices = ri_kernels.make_index_sets(
            plan.n_ant_total, [(group.a1[d], group.a2[d]) for d in range(plan.n_dev)]
        )
        indices = jax.tree.map(lambda x: _put_rows(np.asarray(x, np.int32), mesh), indices)
        positions = _put_rows(np.asarray(group.positions, np.int32), mesh)
        rest = replicate(tables._replace(indices=None, rows=None), mesh)
        out.append(rest._replace(indices=indices, rows=positions))
    return tuple(out)


def _compact_antennas(plan: tabascal_partition.ShardPlan) -> tuple[tuple[int, ...], ...]:
    """``plan.antenna_ids`` with n_ant (the appended zero row) for every zero-signal entry."""
    ids = np.where(plan.antenna_ids < 0, plan.n_ant, plan.antenna_ids)
    return tuple(tuple(int(i) for i in row) for row in ids)


def signal_factor_by_device(signal: rfi_signal.RfiSignalConstants, spec: ShardedSpec) -> bool:
    """Whether the RFI signal's factor is placed per device with the geometry: the shared
    signal's (n_ant, n_src, n_freq, n_time) factor, the size of the phase, where
    ``spec.device_geometry``; the per-antenna signal's factor has no antenna axis."""
    return spec.device_geometry and signal.factor.ndim == 4 and rfi_signal.is_shared(signal)


def factor_per_device(signal: rfi_signal.RfiSignalConstants) -> bool:
    """Whether ``signal``'s factor arrives placed per device (``signal_factor_by_device``):
    (n_dev, n_ant_total, ...) on the mesh, or this device's block of it inside the map."""
    return signal.factor.ndim == 5


def device_antenna_table(spec: ShardedSpec) -> np.ndarray:
    """(n_dev, n_ant_total) int64: the global antenna behind each of every device's antennas,
    n_ant for a zero-signal one. With a reuse plan its compact tables; without one every
    antenna in order, then the ghosts."""
    if spec.antenna_ids is not None:
        return np.asarray(spec.antenna_ids, np.int64)
    n_ant = spec.model.n_ant
    row = np.concatenate([np.arange(n_ant), np.full(spec.n_ghost, n_ant)])
    return np.tile(row, (spec.n_dev, 1))


def antenna_weights(spec: ShardedSpec) -> np.ndarray:
    """(n_dev, n_ant_total) float64: for each device's antennas (``device_antenna_table``), one
    over the number of devices that hold that antenna, 0 for ghosts and unused slots; a
    per-device, per-antenna quantity summed with these weights counts every antenna once."""
    n_ant = spec.model.n_ant
    ids = device_antenna_table(spec)
    real = ids < n_ant
    holders = np.bincount(ids[real], minlength=n_ant)
    weights = np.zeros(ids.shape)
    weights[real] = 1.0 / holders[ids[real]]
    return weights


def _geometry_by_device(constants: joint.ModelConstants) -> bool:
    """Whether the RFI phase and delays (and the shared signal's factor) are placed per device:
    where the orbits are fixed (fitted orbits correct the delays of every antenna before the
    map). With the reuse plan each device then holds only its compact table's antennas;
    without it every antenna and the ghosts, already appended, so that the step does not pad
    them into copies of its own (at bench-512 on 4 devices with the trust-region polish the
    step held three such copies at its peak, 209 MB)."""
    return constants.orbits is None


def check_row_blocks(row_blocks: int, reuse: bool) -> None:
    """Refuse a ``row_blocks`` the baseline axis cannot run, with what to do instead."""
    if not isinstance(row_blocks, (int, np.integer)) or row_blocks < 1:
        raise ValueError(f"row_blocks must be a whole number >= 1, not {row_blocks!r}")
    if reuse and row_blocks > 1:
        raise ValueError(
            f"row_blocks {row_blocks} with the antenna-reuse plan: the plan's antenna tables are "
            "per device, not per block of rows; drop the reuse plan (--reuse-plan off) or set "
            "row_blocks to 1"
        )


class RowPlacement(NamedTuple):
    """Where every baseline row goes: the shard plan, the reuse plan (None without one) and
    ``order``, the data row behind each sharded row (None: the data's own order)."""

    spec: ShardedSpec
    plan: tabascal_partition.ShardPlan
    reuse_plan: tabascal_partition.ReusePlan | None
    order: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return self.spec.n_rows


def plan_rows(
    model_spec: joint.ModelSpec,
    constants: joint.ModelConstants,
    mesh: Mesh,
    *,
    reuse: bool,
    row_blocks: int = 1,
) -> RowPlacement:
    """The placement of a model's rows over ``mesh`` from its a1, a2, RFI groups and sky
    groups (``constants.sky``, the whole model's, on the host), with the sky's slots.

    Each baseline is labelled by its (RFI group, sky group), and every device is to hold its
    share of each label, since each group is padded to the most any device holds of it: without
    a reuse plan the rows go in ``tabascal_partition.spread_order`` of the labels, and the reuse
    plan balances them (or the RFI groups alone, where that gives fewer antennas per device).
    In the data's order the longest baselines, whose sky groups hold the most modes, gather in
    the last devices' blocks: at bench-512 on 4 devices every device held 0.47 of the sky's
    modes and computed 1.52 B RFI rows for its B (spread: 0.250 and 1.000; the reuse plan
    balancing the RFI groups alone held 0.272, with both 0.250).

    row_blocks: the rows are planned in ``row_blocks`` blocks per device (``ShardedSpec``), each
    holding its share of every label; refused with the reuse plan, whose antenna tables are
    per device."""
    check_row_blocks(row_blocks, reuse)
    n_blocks = mesh.size * row_blocks
    a1, a2 = np.asarray(constants.a1), np.asarray(constants.a2)
    labels = _group_labels(constants.groups, model_spec.n_bl)
    both = labels * len(constants.sky.groups) + sky_labels(constants.sky, model_spec.n_bl)
    reuse_plan, order = None, None
    if reuse:
        by = (both, labels) if len(constants.sky.groups) > 1 else (labels,)
        plans = [
            tabascal_partition.antenna_reuse_plan(a1, a2, model_spec.n_ant, n_blocks, groups)
            for groups in by
        ]
        # The fewest antennas per device first, the plan's purpose: on small arrays balancing
        # both labels can miss the narrowest design (8 stations on 4 devices: 6 antennas, not 5).
        reuse_plan = min(plans, key=lambda plan: plan.width)
    else:
        order = tabascal_partition.spread_order(both, n_blocks)
        if np.array_equal(order, np.arange(order.size)):
            order = None
    plan = tabascal_partition.plan_shards(
        a1, a2, model_spec.n_ant, n_blocks, groups=labels, reuse=reuse_plan, order=order
    )
    antenna_ids = None if reuse_plan is None else _compact_antennas(plan)
    # Each device evaluates its share of the rows, so it takes its share of the operators'
    # working memory: their fine-grid blocks then divide over devices like the visibilities.
    rfi_config = model_spec.rfi_vis
    rfi_config = replace(rfi_config, memory_budget_mb=rfi_config.memory_budget_mb / mesh.size)
    model_spec = replace(model_spec, rfi_vis=rfi_config)
    spec = ShardedSpec(
        model_spec,
        mesh,
        plan.block_size,
        plan.n_ghost,
        antenna_ids=antenna_ids,
        reuse=reuse_plan,
        device_geometry=_geometry_by_device(constants),
        order=plan.order,
        row_blocks=row_blocks,
    )
    return with_sky_groups(RowPlacement(spec, plan, reuse_plan, plan.order), constants.sky)


def place_rows(array, fill, placement: RowPlacement) -> jax.Array:
    """A host array (n_bl, ...) in the data's order on ``P("bl")`` in the placement's rows; each
    device's block is built from its own rows (``fill`` for padding: a value or "copy")."""
    return _place_rows(array, fill, placement.spec.mesh, placement.n_rows, placement.order)


def place_geometry(array, spec: ShardedSpec) -> jax.Array:
    """A per-antenna array (n_ant, ...) as (n_dev, n_ant_total, ...) on ``P("bl")``: device d
    holds the rows of its antennas (``device_antenna_table``), zeros for ghosts and unused
    slots, built on the host from its rows alone."""
    array = np.asarray(array)
    padded = np.concatenate([array, np.zeros((1, *array.shape[1:]), array.dtype)])
    rows = device_antenna_table(spec)
    shape = (spec.n_dev, rows.shape[1], *array.shape[1:])

    def block(index):
        devices = range(*index[0].indices(spec.n_dev))
        whole = np.stack([padded[rows[d]] for d in devices])
        return whole[(slice(None), *index[1:])]

    return jax.make_array_from_callback(shape, _rows(spec.mesh), block)


def place_constants(
    constants: joint.ModelConstants, placement: RowPlacement
) -> joint.ModelConstants:
    """Everything of ``constants`` but the sky (left None): a1, a2 and the RFI groups' indices
    and positions on ``P("bl")``; with ``spec.device_geometry`` the phase and delays per device
    (``place_geometry``), and the shared signal's factor (``signal_factor_by_device``); the rest
    replicated."""
    spec = placement.spec
    mesh = spec.mesh
    signal = constants.rfi_signal
    factor_apart = signal_factor_by_device(signal, spec)
    apart = {"sky": None, "groups": None, "a1": None, "a2": None}
    if spec.device_geometry:
        apart.update(phase=None, delay_us=None)
    if factor_apart:
        apart.update(rfi_signal=signal._replace(factor=None))
    placed = replicate(constants._replace(**apart), mesh)
    if spec.device_geometry:
        placed = placed._replace(
            phase=place_geometry(constants.phase, spec),
            delay_us=place_geometry(constants.delay_us, spec),
        )
    if factor_apart:
        placed = placed._replace(
            rfi_signal=placed.rfi_signal._replace(factor=place_geometry(signal.factor, spec))
        )
    return placed._replace(
        groups=_sharded_groups(constants.groups, placement.plan, mesh),
        a1=place_rows(constants.a1, 0, placement),
        a2=place_rows(constants.a2, 0, placement),
    )


def placement_info(info: dict, placement: RowPlacement) -> dict:
    """The model's ``info`` with the placement's figures added."""
    info = dict(
        info,
        n_devices=placement.spec.n_dev,
        block_size=placement.plan.block_size,
        n_ghost=placement.plan.n_ghost,
    )
    if placement.spec.row_blocks > 1:
        info["row_blocks"] = placement.spec.row_blocks
    reuse_plan = placement.reuse_plan
    if reuse_plan is not None:
        info["reuse_plan"] = {
            "design": reuse_plan.design,
            "width": reuse_plan.width,
            "lower_bound": reuse_plan.lower_bound,
            "contiguous_width": reuse_plan.contiguous_width,
        }
    return info


def shard_model(
    model: joint.Model, mesh: Mesh, *, reuse: bool = False, row_blocks: int = 1
) -> ShardedModel:
    """Pad ``model``'s baseline axis to n_blocks B rows and place every array on ``mesh``.

    reuse: permute the baselines by the antenna-reuse plan first (see the module docstring);
    row_blocks: blocks of rows per device (``ShardedSpec``).
    """
    placement = plan_rows(model.spec, model.constants, mesh, reuse=reuse, row_blocks=row_blocks)

    def rows(array, fill):
        return place_rows(array, fill, placement)

    sky_c = place_sky(model.constants.sky, placement)
    constants = place_constants(model.constants, placement)._replace(sky=sky_c)
    data = joint.Data(
        vis=rows(model.data.vis, 0),
        flags=rows(model.data.flags, True),
        noise=rows(model.data.noise, 1),
        n_points=replicate(model.data.n_points, mesh),
    )
    params = replicate(model.params._replace(sky=None), mesh)._replace(
        sky=sky.SkyParams(place_sky_params(model.params.sky.z, placement))
    )
    info = placement_info(model.info, placement)
    return ShardedModel(placement.spec, constants, data, params, placement.plan, info)


def _keep_rows(x: jax.Array, spec: ShardedSpec) -> jax.Array:
    return jax.lax.with_sharding_constraint(x, _rows(spec.mesh))


def _append_ghosts(x: jax.Array, n_ghost: int) -> jax.Array:
    return jnp.concatenate([x, jnp.zeros((n_ghost, *x.shape[1:]), x.dtype)])


def _device_antennas(x: jax.Array, spec: ShardedSpec) -> jax.Array:
    """This device's per-antenna rows (n_ant_total, ...) of ``x`` (n_ant, ...); in the map.

    Without a reuse plan: every antenna, then the ghosts. With one: a gather of the device's
    compact antenna table from ``x`` with a zero row appended (ghosts and unused slots select
    it). The gather's transpose adds each compact antenna's cotangent into its global antenna.
    """
    if spec.antenna_ids is None:
        return _append_ghosts(x, spec.n_ghost)
    table = jnp.asarray(np.asarray(spec.antenna_ids, np.int32))
    ids = table[jax.lax.axis_index(AXIS)]
    return _append_ghosts(x, 1)[ids]


def _device_geometry(phase, delay_us, spec: ShardedSpec):
    """This device's phase and delays (n_ant_total, ...) in its antenna numbering; in the map.
    Placed per device (``spec.device_geometry``) they arrive as this device's block, a
    leading axis of 1; replicated, they are taken from every antenna's."""
    if spec.device_geometry:
        return phase[0], delay_us[0]
    return _device_antennas(phase, spec), _device_antennas(delay_us, spec)


def _geometry_partition_spec(spec: ShardedSpec):
    return P(AXIS) if spec.device_geometry else P()


def device_signal(rfi_params, signal, phase, delay_us, spec: ShardedSpec):
    """This device's RFI signal and geometry, in the map: (amp, factor, phase, delay_us), each
    with an antenna axis of the device's antennas (with a reuse plan, its compact table).

    rfi_params, signal: the RFI signal's parameters and constants (``rfi_signal``; the shared
    signal's factor this device's block, (1, n_ant_total, ...), where it is placed per device),
    phase: (n_ant, n_src, n_freq, n_time), delay_us: (n_ant, n_src, n_time, n_path), all antennas
    (replicated), or with ``spec.device_geometry`` this device's block of them (1,
    n_ant_total, ...). The signal is synthesised for the device's antennas alone, so its
    fine-grid arrays and their cotangents scale with those antennas; the shared signal is
    passed to the operators as its part shared by every antenna and the factor, whose product
    they form per block (``rfi_signal.forward_parts``).
    """
    # Varying from the parameters on: every group's cotangent then accumulates on the device
    # and crosses devices once, as the modes' gradient, rather than once per group as a
    # signal-sized cube.
    varying = rfi_params._replace(z=jax.lax.pcast(rfi_params.z, AXIS, to="varying"))
    if factor_per_device(signal):  # the shared signal's factor, this device's block of it
        device_params, device_signal = varying, signal._replace(factor=signal.factor[0])
    else:
        device_params, device_signal = rfi_signal.take_antennas(
            varying, signal, lambda x: _device_antennas(x, spec)
        )
    amp, factor = rfi_signal.forward_parts(device_params, device_signal)
    phase, delay_us = _device_geometry(phase, delay_us, spec)
    return amp, factor, phase, delay_us


def _rfi_rows(signal, freq_mhz, groups, spec: ShardedSpec) -> jax.Array:
    """One block's RFI visibilities (B, n_freq, n_time) from ``device_signal``'s ``signal``;
    groups: the block's tables, indices, positions and kept moments with a leading axis of 1."""
    amp, factor, phase, delay_us = signal
    n_freq, n_time = amp.shape[2], amp.shape[3]
    block = jnp.zeros((spec.block_size + 1, n_freq, n_time), amp.dtype)
    for group_spec, tables in zip(spec.model.groups, groups, strict=True):
        local = tables._replace(
            indices=jax.tree.map(lambda x: x[0], tables.indices),
            moments=None if tables.moments is None else tables.moments[0],
        )
        out = rfi_vis.evaluate_group(
            group_spec, local, amp, phase, delay_us, freq_mhz, spec.model.rfi_vis, factor
        )
        # Real positions are distinct; padded entries all add into the spare row B.
        block = block.at[tables.rows[0]].add(out)
    return block[: spec.block_size]


def _block_parts(groups) -> tuple:
    """The parts of the RFI groups' tables that differ between blocks of rows: indices,
    positions and kept moments (one entry per block on their leading axis)."""
    return tuple((t.indices, t.rows, t.moments) for t in groups)


def _with_parts(groups, parts) -> tuple:
    return tuple(
        t._replace(indices=i, rows=r, moments=m) for t, (i, r, m) in zip(groups, parts, strict=True)
    )


def _sky_parts(constants: sky.SkyConstants) -> tuple:
    """The sky constants' parts that differ between blocks (slots and rows)."""
    groups = tuple((g.rows, g.weight_freq, g.weight_time) for g in constants.groups)
    return groups, constants.scale, constants.mean


def _with_sky_parts(constants: sky.SkyConstants, parts) -> sky.SkyConstants:
    groups, scale, mean = parts
    return sky.SkyConstants(
        groups=tuple(
            g._replace(rows=r, weight_freq=wf, weight_time=wt)
            for g, (r, wf, wt) in zip(constants.groups, groups, strict=True)
        ),
        scale=scale,
        mean=mean,
    )


def _in_blocks(tree, n: int):
    """Each leaf's leading axis (n k, ...) as (n, k, ...): a device's arrays by block."""
    return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), tree)


def _by_block(fn, parts, spec: ShardedSpec, *, remat: bool = False):
    """fn(block's parts) over the device's ``spec.row_blocks`` blocks in turn (``lax.map``),
    the outputs' block axis merged into their leading one; with one block, fn(parts). remat:
    each block's work is recomputed in reverse mode (``jax.checkpoint``), so that derivatives
    hold one block's intermediates at a time."""
    n = spec.row_blocks
    if n == 1:
        return fn(parts)
    out = jax.lax.map(jax.checkpoint(fn) if remat else fn, _in_blocks(parts, n))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)


def rfi_block(rfi_params, signal, phase, delay_us, freq_mhz, groups, spec: ShardedSpec):
    """One device's RFI visibilities (row_blocks B, n_freq, n_time); runs inside ``shard_map``.

    The arguments as ``device_signal`` takes them, and groups: this device's tables, indices
    and positions with a leading axis of row_blocks (antenna ids in the device's numbering:
    global, or compact with a reuse plan). The blocks run in turn. The replicated parameters'
    gradients are summed over devices by the map's transpose.
    """
    device = device_signal(rfi_params, signal, phase, delay_us, spec)

    def block(parts):
        return _rfi_rows(device, freq_mhz, _with_parts(groups, parts), spec)

    return _by_block(block, _block_parts(groups), spec)


def _group_partition_specs(groups):
    """Each group's tables on the map: indices, positions and kept moments split ("bl"), the
    rest replicated."""
    return tuple(
        tables._replace(
            indices=P(AXIS),
            rows=P(AXIS),
            **{f: P() for f in _TABLE_FIELDS},
            moments=None if tables.moments is None else P(AXIS),
            view=None if tables.view is None else P(),
        )
        for tables in groups
    )


def keep_phase_moments(constants: joint.ModelConstants, spec: ShardedSpec, keep):
    """``constants`` with the phase moments of the groups ``keep`` marks formed once, each
    device forming those of its own rows (a leading axis of row_blocks per device, on
    ``P("bl")``), from the antennas ``rfi_block`` gives its operators."""
    kept = [g for g, k in enumerate(keep) if k]
    if not kept:
        return constants

    def block(phase, delay_us, freq_mhz, groups):
        phase, delay_us = _device_geometry(phase, delay_us, spec)

        def one(indices):
            out = []
            for g, index in zip(kept, indices, strict=True):
                local = groups[g]._replace(indices=jax.tree.map(lambda x: x[0], index))
                moments = rfi_vis.group_moments(
                    spec.model.groups[g],
                    local,
                    phase,
                    delay_us,
                    freq_mhz,
                    spec.model.rfi_vis,
                )
                out.append(moments[None])
            return tuple(out)

        return _by_block(one, tuple(groups[g].indices for g in kept), spec)

    geometry = _geometry_partition_spec(spec)
    mapped = jax.jit(
        jax.shard_map(
            block,
            mesh=spec.mesh,
            in_specs=(geometry, geometry, P(), _group_partition_specs(constants.groups)),
            out_specs=tuple(P(AXIS) for _ in kept),
        )
    )
    moments = mapped(constants.phase, constants.delay_us, constants.freq_mhz, constants.groups)
    groups = list(constants.groups)
    for g, m in zip(kept, moments, strict=True):
        groups[g] = groups[g]._replace(moments=m)
    return constants._replace(groups=tuple(groups))


def _signal_partition_specs(signal: rfi_signal.RfiSignalConstants):
    """The RFI signal's constants on the map: replicated, but for a factor placed per device."""
    specs = jax.tree.map(lambda _: P(), signal)
    return specs._replace(factor=P(AXIS)) if factor_per_device(signal) else specs


def predict_rfi(
    rfi_params, constants: joint.ModelConstants, spec: ShardedSpec, orbit_params=None
) -> jax.Array:
    """RFI visibilities (n_dev B, n_freq, n_time) on ``P("bl")``, before the gains;
    orbit_params: the orbit corrections, applied to the replicated per-antenna delays before
    the map (None: the orbits as given)."""
    inputs = _rfi_inputs(rfi_params, orbit_params, constants, spec, "predict_rfi")
    vis = _map_devices(partial(rfi_block, spec=spec), inputs, P(AXIS), spec)
    return _keep_rows(vis, spec)


def sky_mean_from_data(
    rfi_params, orbit_params, constants: joint.ModelConstants, vis, flags, spec: ShardedSpec
) -> jax.Array:
    """``sky.mean_from_data(vis - predict_rfi(...), flags)`` (n_dev B,) on ``P("bl")``, each
    device taking its blocks of rows in turn: the sky's data start holds one block's RFI cube
    at a time. vis, flags: the placed data's (``P("bl")``)."""

    def device(rfi_params, signal, phase, delay_us, freq_mhz, groups, rows):
        rfi = device_signal(rfi_params, signal, phase, delay_us, spec)

        def block(parts):
            group_parts, (vis, flags) = parts
            v_rfi = _rfi_rows(rfi, freq_mhz, _with_parts(groups, group_parts), spec)
            return sky.mean_from_data(vis - v_rfi, flags)

        return _by_block(block, (_block_parts(groups), rows), spec)

    inputs = _rfi_inputs(rfi_params, orbit_params, constants, spec, "sky_mean_from_data")
    inputs["rows"] = ((vis, flags), (P(AXIS), P(AXIS)))
    return _map_devices(device, inputs, P(AXIS), spec)


_TABLE_FIELDS = tuple(
    f for f in rfi_vis.GroupTables._fields if f not in ("indices", "rows", "moments", "view")
)


def _sky_partition_specs(constants: sky.SkyConstants):
    group = sky.SkyGroup(rows=P(AXIS), weight_freq=P(AXIS), weight_time=P(AXIS), dft_freq=P(),
                         dft_time=P())  # fmt: skip
    return sky.SkyConstants(groups=(group,) * len(constants.groups), scale=P(AXIS), mean=P(AXIS))


def _sky_rows(sky_params: sky.SkyParams, constants: sky.SkyConstants, spec: ShardedSpec):
    """One device's sky visibilities (row_blocks B, n_freq, n_time), block by block; in the
    map."""

    def block(parts):
        z, rows = parts
        return sky.forward(sky.SkyParams(z), _with_sky_parts(constants, rows))

    return _by_block(block, (sky_params.z, _sky_parts(constants)), spec)


def predict_sky(sky_params: sky.SkyParams, constants: sky.SkyConstants, spec: ShardedSpec):
    """Sky visibilities (n_blocks B, n_freq, n_time) on ``P("bl")``: each device scatters its
    groups' slots into its blocks (``sky.forward`` on each block's rows)."""
    mapped = jax.shard_map(
        partial(_sky_rows, spec=spec),
        mesh=spec.mesh,
        in_specs=(
            sky.SkyParams((P(AXIS),) * len(constants.groups)),
            _sky_partition_specs(constants),
        ),
        out_specs=P(AXIS),
    )
    return mapped(sky_params, constants)


def predict(params: joint.ModelParams, constants, spec: ShardedSpec) -> joint.Prediction:
    """Sharded ``joint.predict``: cubes (n_dev B, n_freq, n_time) on ``P("bl")``, padded rows
    last; gains (n_ant, n_freq, n_time) replicated. ``unpad`` returns the data's rows."""
    v_rfi = predict_rfi(params.rfi, constants, spec, params.orbits)
    v_sky = _keep_rows(predict_sky(params.sky, constants.sky, spec), spec)
    g = gains.forward(params.gains, constants.gains)
    model = _keep_rows(gains.apply(v_sky + v_rfi, g, constants.a1, constants.a2), spec)
    return joint.Prediction(v_sky, v_rfi, g, model)


def _rfi_inputs(rfi_params, orbit_params, constants, spec: ShardedSpec, name: str) -> dict:
    """What each device's RFI rows are computed from, by argument name: (value, partition
    spec) of the RFI signal's parameters and constants, the geometry with the orbit
    corrections applied, the frequencies and the RFI groups' tables. name: the caller, for the
    error."""
    if spec.device_geometry and orbit_params is not None:
        raise ValueError(
            f"baseline_axis.{name}: orbit corrections given for a model placed with fixed "
            "orbits (its phase and delays are per device); place a model built with orbits.fit"
        )
    phase, delay_us = orbit_corrections.corrected(
        orbit_params, constants.orbits, constants.phase, constants.delay_us, constants.freq_mhz
    )
    geometry = _geometry_partition_spec(spec)
    return {
        "rfi_params": (rfi_params, P()),
        "signal": (
            joint.corrected_signal(constants, orbit_params),
            _signal_partition_specs(constants.rfi_signal),
        ),
        "phase": (phase, geometry),
        "delay_us": (delay_us, geometry),
        "freq_mhz": (constants.freq_mhz, P()),
        "groups": (constants.groups, _group_partition_specs(constants.groups)),
    }


def _device_inputs(params: joint.ModelParams, constants, spec: ShardedSpec, name: str) -> dict:
    """``_rfi_inputs``, and the sky's modes and constants and the gains (synthesised here,
    replicated): what each device's blocks of the model are computed from."""
    return {
        **_rfi_inputs(params.rfi, params.orbits, constants, spec, name),
        "z": (params.sky.z, (P(AXIS),) * len(params.sky.z)),
        "sky_c": (constants.sky, _sky_partition_specs(constants.sky)),
        "g": (gains.forward(params.gains, constants.gains), P()),
    }


def _block_model(rfi, freq_mhz, groups, sky_c, g, parts, spec: ShardedSpec):
    """One block's (sky, RFI, model) visibilities (B, n_freq, n_time), in the map: rfi, the
    device's ``device_signal``; parts: the block's (group parts, sky modes, sky parts, (a1,
    a2))."""
    group_parts, z_b, sky_b, (a1, a2) = parts
    v_rfi = _rfi_rows(rfi, freq_mhz, _with_parts(groups, group_parts), spec)
    v_sky = sky.forward(sky.SkyParams(z_b), _with_sky_parts(sky_c, sky_b))
    return v_sky, v_rfi, gains.apply(v_sky + v_rfi, g, a1, a2)


def _map_devices(device, inputs: dict, out_specs, spec: ShardedSpec):
    """``device`` over the mesh, called with ``inputs``'s values by name."""
    names = list(inputs)
    mapped = jax.shard_map(
        lambda *values: device(**dict(zip(names, values, strict=True))),
        mesh=spec.mesh,
        in_specs=tuple(part for _, part in inputs.values()),
        out_specs=out_specs,
    )
    return mapped(*(value for value, _ in inputs.values()))


def blocked_nll(params: joint.ModelParams, constants, data: joint.Data, spec: ShardedSpec):
    """The likelihood's -log L (``likelihood.neg_log_likelihood``) summed block by block.

    Each device synthesises its RFI signal and the gains once, then takes its row_blocks
    blocks in turn (``lax.map``): each block's RFI, sky, gains and residuals, reduced to its
    -log L, recomputed in reverse mode (``jax.checkpoint``). So the loss, its gradient and
    Hessian-vector products hold one block's visibility-shaped intermediates at a time, not
    the device's, for one more forward pass per derivative. The devices' sums are added.
    """

    def device(rfi_params, signal, phase, delay_us, freq_mhz, groups, z, sky_c, g, rows):
        rfi = device_signal(rfi_params, signal, phase, delay_us, spec)

        def block(parts):
            *model_parts, (a1, a2, vis, flags, noise) = parts
            _, _, model = _block_model(
                rfi, freq_mhz, groups, sky_c, g, (*model_parts, (a1, a2)), spec
            )
            return likelihood.neg_log_likelihood(model, vis, flags, noise)

        parts = (_block_parts(groups), z, _sky_parts(sky_c), rows)
        per_block = _by_block(lambda p: block(p)[None], parts, spec, remat=True)
        return jax.lax.psum(jnp.sum(per_block), AXIS)

    inputs = _device_inputs(params, constants, spec, "blocked_nll")
    rows = (constants.a1, constants.a2, data.vis, data.flags, data.noise)
    inputs["rows"] = (rows, (P(AXIS),) * len(rows))
    return _map_devices(device, inputs, P(), spec)


#: The device inputs (``_device_inputs``) that depend on the parameters.
_VARYING = ("rfi_params", "signal", "phase", "delay_us", "z", "g")


def blocked_gauss_newton(
    params: joint.ModelParams, tangent: joint.ModelParams, inputs, spec: ShardedSpec
) -> joint.ModelParams:
    """``joint.gauss_newton`` with the likelihood's part summed block by block: J' W J v is
    the gradient over v of q(v) = sum over blocks of |J_b v|^2 / (2 noise^2) (unflagged), each
    block's J_b v a forward-mode derivative of its model, rematerialised in reverse mode. So the
    product holds one block's visibility-shaped tangents at a time, as ``blocked_nll``'s
    derivatives do."""
    constants, data = inputs

    def varying(p):
        full = _device_inputs(p, constants, spec, "blocked_gauss_newton")
        return {name: full[name][0] for name in _VARYING}

    def device(primals, tangents, freq_mhz, groups, sky_c, rows):
        keys = ("rfi_params", "signal", "phase", "delay_us")
        rfi, rfi_dot = jax.jvp(
            partial(device_signal, spec=spec),
            tuple(primals[k] for k in keys),
            tuple(tangents[k] for k in keys),
        )

        def block(parts):
            group_parts, z_b, z_dot, sky_b, (a1, a2, flags, noise) = parts

            def model(rfi, z_b, g):
                parts = (group_parts, z_b, sky_b, (a1, a2))
                return _block_model(rfi, freq_mhz, groups, sky_c, g, parts, spec)[2]

            primal = (rfi, z_b, primals["g"])
            _, m_dot = jax.jvp(model, primal, (rfi_dot, z_dot, tangents["g"]))
            return likelihood.neg_log_likelihood(m_dot, jnp.zeros_like(m_dot), flags, noise)

        parts = (_block_parts(groups), primals["z"], tangents["z"], _sky_parts(sky_c), rows)
        per_block = _by_block(lambda p: block(p)[None], parts, spec, remat=True)
        return jax.lax.psum(jnp.sum(per_block), AXIS)

    placed = _device_inputs(params, constants, spec, "blocked_gauss_newton")
    specs = {name: part for name, (_, part) in placed.items()}
    rows = (constants.a1, constants.a2, data.flags, data.noise)

    def q(v):
        primals, tangents = jax.jvp(varying, (params,), (v,))
        inputs = {
            "primals": (primals, {name: specs[name] for name in _VARYING}),
            "tangents": (tangents, {name: specs[name] for name in _VARYING}),
            "freq_mhz": (constants.freq_mhz, specs["freq_mhz"]),
            "groups": (constants.groups, specs["groups"]),
            "sky_c": (constants.sky, specs["sky_c"]),
            "rows": (rows, (P(AXIS),) * len(rows)),
        }
        return _map_devices(device, inputs, P(), spec)

    pulled = jax.grad(q)(tangent)
    return joint.with_prior_curvature(pulled, params, tangent, data.n_points)


def _block_of(tree, j, spec: ShardedSpec):
    """Block ``j`` (a traced index) of a device's per-block arrays (leading axis row_blocks
    k, ...), each (k, ...); in the map."""
    return jax.tree.map(lambda x: x[j], _in_blocks(tree, spec.row_blocks))


def predict_block(
    params: joint.ModelParams, constants, j: jax.Array, spec: ShardedSpec
) -> joint.Prediction:
    """Block ``j`` (0 to row_blocks - 1) of every device's rows of ``predict``: cubes (n_dev
    B, n_freq, n_time) on ``P("bl")``, device d's B rows its block j (``results.blocks(spec,
    j)`` names their data rows); gains replicated. The export takes the blocks in turn, so
    that it holds one block's cubes at a time; ``j`` is traced, so one program serves every
    block."""

    def device(rfi_params, signal, phase, delay_us, freq_mhz, groups, z, sky_c, g, rows, j):
        rfi = device_signal(rfi_params, signal, phase, delay_us, spec)
        parts = _block_of((_block_parts(groups), z, _sky_parts(sky_c), rows), j[0], spec)
        return _block_model(rfi, freq_mhz, groups, sky_c, g, parts, spec)

    inputs = _device_inputs(params, constants, spec, "predict_block")
    g = inputs["g"][0]
    inputs["rows"] = ((constants.a1, constants.a2), (P(AXIS), P(AXIS)))
    inputs["j"] = (jnp.reshape(j, (1,)), P())
    v_sky, v_rfi, model = _map_devices(device, inputs, P(AXIS), spec)
    return joint.Prediction(v_sky, v_rfi, g, model)


def rows_block(x: jax.Array, j: jax.Array, spec: ShardedSpec) -> jax.Array:
    """Block ``j`` of every device's rows of a ``P("bl")`` per-row array (n_dev row_blocks
    B, ...): (n_dev B, ...), on ``P("bl")``, as ``predict_block`` orders its rows."""
    mapped = jax.shard_map(
        lambda x, j: _block_of(x, j[0], spec),
        mesh=spec.mesh,
        in_specs=(P(AXIS), P()),
        out_specs=P(AXIS),
    )
    return mapped(x, jnp.reshape(j, (1,)))


def loss(params: joint.ModelParams, inputs, spec: ShardedSpec):
    """Sharded ``joint.loss``: (loss, {"chi2": reduced chi-squared}); inputs = (constants,
    data) of a ``ShardedModel``. With ``spec.row_blocks`` > 1 the likelihood is summed block by
    block (``blocked_nll``)."""
    if spec.row_blocks == 1:
        return joint.loss(params, inputs, spec, predict=predict)
    constants, data = inputs
    return joint.posterior(blocked_nll(params, constants, data, spec), params, data.n_points)


def data_order(rows, spec: ShardedSpec) -> np.ndarray:
    """A sharded per-baseline array (n_dev B, ...) on the host, in the data's n_bl rows:
    padded rows dropped and the placement's order (if any) undone."""
    rows = np.asarray(rows)[: spec.model.n_bl]
    if spec.order is None:
        return rows
    out = np.empty_like(rows)
    out[spec.order] = rows
    return out


def unpad(prediction: joint.Prediction, spec: ShardedSpec) -> joint.Prediction:
    """The prediction on the host (numpy), cubes cut to the data's n_bl rows in their order."""
    return joint.Prediction(
        sky=data_order(prediction.sky, spec),
        rfi=data_order(prediction.rfi, spec),
        gains=np.asarray(prediction.gains),
        model=data_order(prediction.model, spec),
    )


def unpad_params(params: joint.ModelParams, spec: ShardedSpec) -> joint.ModelParams:
    """Parameters on the host in joint.Model's placement: each sky group's padding slots
    dropped, its members in the data's order."""
    host = jax.tree.map(np.asarray, params)
    z = []
    for zg, slot in zip(host.sky.z, spec.sky_slots, strict=True):
        used = slot.member >= 0
        members = np.empty((int(used.sum()), *zg.shape[1:]), zg.dtype)
        members[slot.member[used]] = zg[used]
        z.append(members)
    return host._replace(sky=sky.SkyParams(tuple(z)))
