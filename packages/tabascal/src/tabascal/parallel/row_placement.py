"""Where the baseline axis's rows go: which rows each device of a 1-D mesh ("bl") owns, their
padding, and the model's arrays placed on the mesh from the host.

Device d owns rows [d B, (d + 1) B) (``tabascal_partition.ownership``) of the rows in the spread
order of each baseline's (RFI group, sky group) (``tabascal_partition.spread_order``, see
``plan_rows``): every device holds its share of every group, each block in the data's order;
the baseline axis is padded to n_dev B rows. Padded rows are flagged, with vis 0,
noise 1, a1 = a2 = 0, sky parameters 0 and sky constants copied from row 0, so they add exactly
nothing to the loss or its gradient.

With ``reuse=True`` the rows are instead permuted by the partition's antenna-reuse plan
(``tabascal_partition.antenna_reuse_plan``), so that each device's block touches few antennas:
every per-baseline array (data, a1, a2, sky constants and parameters, RFI group membership) is
taken in the plan's packed order, and each device numbers its antennas compactly (its table of
global antennas, padded to one common length with zero-signal entries and ghosts).
``baseline_axis.unpad`` and ``unpad_params`` invert the permutation, so results leave in the
data's order either way.

Placement: every array with a baseline axis (data, a1, a2, the sky constants'
``sky.BASELINE_FIELDS``) lives on ``P("bl")``. Each RFI group's index sets and scatter
positions are stacked one set per device on ``P("bl")``, padding scattering into the spare row
B of the device's block. The sky's groups (``sky``: one box of modes per group) are placed like
the RFI groups: each device holds the members among its own rows of every group, padded to the
group's most on any device (``SkySlots``), with their rows within the device's block (the spare
row B for a padding slot, whose weights and parameters are zero). The rest: per-antenna and
per-source parameters (RFI signal modes, gains) and freq_mhz are replicated. With fixed orbits
the RFI geometry (phase, delay_us, and the shared signal's per-antenna factor) is placed per
device (``ShardedSpec.device_geometry``): (n_dev, n_ant_total, ...) on ``P("bl")``, each device
holding the rows of its antennas (``device_antenna_table``): with the reuse plan its compact
table's, so no device holds or copies the geometry of antennas it does not use; without it
every antenna's with the ghosts appended. With fitted orbits, corrected before the map, it is
replicated.

With ``row_blocks`` k (``ShardedSpec.row_blocks``, ``sharding.row_blocks``) the rows are placed
as for k n_dev devices, each device holding k blocks of B rows.

Everything here runs on the host, each device's block built from its own rows alone.
``baseline_axis`` evaluates the placed model; ``blockwise`` builds the same placed model from
the rows each process reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import ri_kernels
import tabascal_partition
from tabascal.model import joint, rfi_signal, rfi_vis, sky

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
    """Static description of the sharded model (hashable, closed over by ``baseline_axis.loss``).

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
    the host only (``baseline_axis.unpad``), so they take no part in comparing specs.
    device_geometry: constants.phase and constants.delay_us, and the shared RFI signal's
    per-antenna factor (``signal_factor_by_device``), are placed per device, (n_dev,
    n_ant_total, ...) on ``P("bl")`` in each device's antenna numbering (``place_geometry``);
    False: replicated, (n_ant, ...) (see ``_geometry_by_device``).
    row_blocks: each device's rows are this many blocks of B rows, planned as blocks of
    ``row_blocks * n_dev`` devices would be (each holding its share of every group); ``loss``
    then runs them in turn (``sharding.row_blocks``, see ``baseline_axis.blocked_nll``). 1: one
    block per device.
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


def _group_labels(groups: tuple[rfi_vis.GroupTables, ...], n_bl: int) -> np.ndarray:
    labels = np.full(n_bl, -1, np.int64)
    for g, tables in enumerate(groups):
        labels[np.asarray(tables.rows)] = g
    if (labels < 0).any():
        raise ValueError("shard_model: some baselines belong to no RFI group")
    return labels


def sky_labels(sky_c: sky.SkyConstants, n_bl: int) -> np.ndarray:
    """(n_bl,) int64: each baseline's sky group (the whole model's constants, host)."""
    labels = np.zeros(n_bl, np.int64)
    for g, group in enumerate(sky_c.groups):
        labels[np.asarray(group.rows)] = g
    return labels


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


def with_sky_groups(placement: RowPlacement, sky_c: sky.SkyConstants) -> RowPlacement:
    """``placement`` with the slots of the whole model's sky groups (``plan_sky_slots``)."""
    spec = placement.spec
    group_rows = [np.asarray(group.rows) for group in sky_c.groups]
    slots = plan_sky_slots(group_rows, placement.order, spec.n_blocks, spec.block_size)
    return placement._replace(spec=replace(spec, sky_slots=slots))


def _compact_antennas(plan: tabascal_partition.ShardPlan) -> tuple[tuple[int, ...], ...]:
    """``plan.antenna_ids`` with n_ant (the appended zero row) for every zero-signal entry."""
    ids = np.where(plan.antenna_ids < 0, plan.n_ant, plan.antenna_ids)
    return tuple(tuple(int(i) for i in row) for row in ids)


def _geometry_by_device(constants: joint.ModelConstants) -> bool:
    """Whether the RFI phase and delays (and the shared signal's factor) are placed per device:
    where the orbits are fixed (fitted orbits correct the delays of every antenna before the
    map). With the reuse plan each device then holds only its compact table's antennas;
    without it every antenna and the ghosts, already appended, so that the step does not pad
    them into copies of its own (at bench-512 on 4 devices with the trust-region polish the
    step held three such copies at its peak, 209 MB)."""
    return constants.orbits is None


def _fewest_antennas_plan(a1, a2, n_ant: int, n_blocks: int, label_sets):
    """The antenna-reuse plan, among those balancing each of ``label_sets`` (per baseline, its
    label) over ``n_blocks`` blocks, with the fewest antennas per device."""
    plans = [
        tabascal_partition.antenna_reuse_plan(a1, a2, n_ant, n_blocks, groups)
        for groups in label_sets
    ]
    # The fewest antennas per device first, the plan's purpose: on small arrays balancing
    # both labels can miss the narrowest design (8 stations on 4 devices: 6 antennas, not 5).
    return min(plans, key=lambda plan: plan.width)


def _spread_order(labels: np.ndarray, n_blocks: int) -> np.ndarray | None:
    """``tabascal_partition.spread_order`` of ``labels``, None where it is the data's order."""
    order = tabascal_partition.spread_order(labels, n_blocks)
    return None if np.array_equal(order, np.arange(order.size)) else order


def _device_share(model_spec: joint.ModelSpec, n_dev: int) -> joint.ModelSpec:
    """``model_spec`` with the RFI operators' working memory divided over ``n_dev`` devices:
    each device evaluates its share of the rows, so their fine-grid blocks then divide over
    devices like the visibilities."""
    rfi_config = model_spec.rfi_vis
    rfi_config = replace(rfi_config, memory_budget_mb=rfi_config.memory_budget_mb / n_dev)
    return replace(model_spec, rfi_vis=rfi_config)


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
        label_sets = (both, labels) if len(constants.sky.groups) > 1 else (labels,)
        reuse_plan = _fewest_antennas_plan(a1, a2, model_spec.n_ant, n_blocks, label_sets)
    else:
        order = _spread_order(both, n_blocks)
    plan = tabascal_partition.plan_shards(
        a1, a2, model_spec.n_ant, n_blocks, groups=labels, reuse=reuse_plan, order=order
    )
    spec = ShardedSpec(
        _device_share(model_spec, mesh.size),
        mesh,
        plan.block_size,
        plan.n_ghost,
        antenna_ids=None if reuse_plan is None else _compact_antennas(plan),
        reuse=reuse_plan,
        device_geometry=_geometry_by_device(constants),
        order=plan.order,
        row_blocks=row_blocks,
    )
    return with_sky_groups(RowPlacement(spec, plan, reuse_plan, plan.order), constants.sky)


def _rows(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXIS))


def _replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def replicate(tree, mesh: Mesh):
    return jax.device_put(tree, _replicated(mesh))


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


def place_rows(array, fill, placement: RowPlacement) -> jax.Array:
    """A host array (n_bl, ...) in the data's order on ``P("bl")`` in the placement's rows; each
    device's block is built from its own rows (``fill`` for padding: a value or "copy")."""
    return _place_rows(array, fill, placement.spec.mesh, placement.n_rows, placement.order)


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


def signal_factor_by_device(signal: rfi_signal.RfiSignalConstants, spec: ShardedSpec) -> bool:
    """Whether the RFI signal's factor is placed per device with the geometry: the shared
    signal's (n_ant, n_src, n_freq, n_time) factor, the size of the phase, where
    ``spec.device_geometry``; the per-antenna signal's factor has no antenna axis."""
    return spec.device_geometry and signal.factor.ndim == 4 and rfi_signal.is_shared(signal)


def factor_per_device(signal: rfi_signal.RfiSignalConstants) -> bool:
    """Whether ``signal``'s factor arrives placed per device (``signal_factor_by_device``):
    (n_dev, n_ant_total, ...) on the mesh, or this device's block of it inside the map."""
    return signal.factor.ndim == 5


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
