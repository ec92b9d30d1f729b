"""Re-checks of every plan invariant, used by ``ShardPlan.validate`` and ``ReusePlan.validate``.

These checks read only the plan's own arrays (and, for a reuse plan, the baselines it was
built for); they do not call the planners, so a planner bug cannot hide from them.
"""

import numpy as np

from tabascal_partition._ghosts import ghost_pair_capacity
from tabascal_partition._ownership import ownership


class InvalidPlanError(ValueError):
    """A plan breaks one of its invariants; the message names which and where."""


def _require(condition, message: str) -> None:
    if not condition:
        raise InvalidPlanError(message)


def check_reuse_plan(plan, a1=None, a2=None) -> None:
    """Check a ReusePlan's permutation, blocks and compact numbering (and its baselines)."""
    n_bl, n_dev = plan.n_bl, plan.n_dev
    _require(
        np.array_equal(np.sort(plan.order), np.arange(n_bl)), "order is not a permutation of rows"
    )
    _require(
        np.array_equal(plan.inverse[plan.order], np.arange(n_bl)), "inverse does not undo order"
    )
    _require(
        np.array_equal(plan.counts, ownership(n_bl, n_dev).counts),
        f"rows per device {plan.counts.tolist()} are not the ownership blocks",
    )
    _require(plan.antennas.shape == (n_dev, plan.width), "antennas is not (n_dev, width)")
    _require(plan.width == int(plan.widths.max(initial=0)), "width is not the largest device width")
    _require(plan.width >= plan.lower_bound, f"width {plan.width} < lower bound {plan.lower_bound}")
    slot = np.arange(plan.width)
    real = slot < plan.widths[:, None]
    _require(
        np.all((plan.antennas >= 0) == real), "antennas padding is not -1 after each device's ids"
    )
    ids = np.where(real, plan.antennas, plan.n_ant + slot)
    _require(np.all(np.diff(ids, axis=1) > 0), "a device's antenna ids are not strictly increasing")
    _require(np.all(ids[real] < plan.n_ant), "an antenna id is >= n_ant")
    device = np.repeat(np.arange(n_dev), plan.counts)
    for name, local in (("local_a1", plan.local_a1), ("local_a2", plan.local_a2)):
        inside = (local >= 0) & (local < plan.widths[device])
        _require(np.all(inside), f"{name} points outside its device's antennas")
    for name, local, values in (("a1", plan.local_a1, a1), ("a2", plan.local_a2, a2)):
        if values is not None:
            wrong = np.flatnonzero(plan.antennas[device, local] != np.asarray(values)[plan.order])
            _require(wrong.size == 0, f"{name} of packed row {wrong[:1]} does not map back")


def check_shard_plan(plan) -> None:
    """Check every ShardPlan invariant; raise InvalidPlanError naming the first broken one."""
    n_bl, n_dev, block = plan.n_bl, plan.n_dev, plan.block_size
    blocks = ownership(n_bl, n_dev)
    _require(block == blocks.block_size, f"block size {block} is not ceil(n_bl / n_dev)")
    n_real_ant = plan.n_ant if plan.reuse is None else plan.reuse.width
    _require(plan.n_ant_total == n_real_ant + plan.n_ghost, "n_ant_total is not real + ghost")
    _check_antenna_ids(plan, n_real_ant)
    if plan.order is not None:
        _require(
            np.array_equal(np.sort(plan.order), np.arange(n_bl)),
            "order is not a permutation of rows",
        )
    if plan.reuse is not None:
        _require(
            plan.order is not None and np.array_equal(plan.order, plan.reuse.order),
            "order is not the reuse plan's",
        )
    if plan.reuse is not None:
        check_reuse_plan(plan.reuse)
        device = np.repeat(np.arange(n_dev), plan.reuse.counts)
        for local, values in (
            (plan.reuse.local_a1, plan.row_a1),
            (plan.reuse.local_a2, plan.row_a2),
        ):
            _require(
                np.array_equal(plan.reuse.antennas[device, local], values), "rows differ from reuse"
            )
    labels = [group.label for group in plan.groups]
    _require(labels == sorted(set(labels)), "group labels are not distinct and increasing")
    _require(set(np.unique(plan.row_group).tolist()) <= set(labels), "a row's group has no plan")

    computed = np.zeros(n_bl, np.int64)
    pairs, padding = [], np.zeros(n_dev, np.int64)
    for group in plan.groups:
        where = f"group {group.label}"
        shape = (n_dev, group.padded)
        for name in ("a1", "a2", "rows", "positions"):
            _require(getattr(group, name).shape == shape, f"{where}: {name} is not {shape}")
        _require(group.n_real.shape == (n_dev,), f"{where}: n_real is not (n_dev,)")
        _require(
            group.padded == int(group.n_real.max(initial=0)), f"{where}: padded is not max n_real"
        )
        real = np.arange(group.padded) < group.n_real[:, None]
        _require(
            np.all((group.rows >= 0) == real), f"{where}: real entries are not first, -1 after"
        )
        _check_real_entries(plan, group, real, blocks, where)
        _check_padded_entries(plan, group, ~real, n_real_ant, where)
        np.add.at(computed, group.rows[real], 1)
        pairs.append(group.a1.astype(np.int64) * plan.n_ant_total + group.a2)
        padding += group.n_padding
        if np.all(group.n_real == group.n_real[0]):
            _require(not np.any(~real), f"{where}: divides evenly but has padding")
    bad = np.flatnonzero(computed != 1)
    _require(bad.size == 0, f"row {bad[:1]} is computed {computed[bad[:1]]} times, not once")
    if pairs:
        keys = np.sort(np.concatenate(pairs, axis=1), axis=1)
        repeated = np.nonzero(keys[:, 1:] == keys[:, :-1])[0]
        _require(repeated.size == 0, f"device {repeated[:1]} computes an (a1, a2) pair twice")
    need = int(padding.max(initial=0))
    enough = ghost_pair_capacity(n_real_ant, plan.n_ghost) >= need
    fewest = plan.n_ghost == 0 or ghost_pair_capacity(n_real_ant, plan.n_ghost - 1) < need
    _require(enough and fewest, f"{plan.n_ghost} ghosts are not the fewest for {need} padded rows")


def _check_antenna_ids(plan, n_real_ant: int) -> None:
    ids = plan.antenna_ids
    _require(ids.shape == (plan.n_dev, plan.n_ant_total), "antenna_ids is not (n_dev, n_ant_total)")
    _require(np.all(ids[:, n_real_ant:] == -1), "a ghost antenna maps to a real antenna")
    if plan.reuse is None:
        _require(
            np.all(ids[:, :n_real_ant] == np.arange(plan.n_ant)), "antenna_ids is not identity"
        )
    else:
        _require(
            np.array_equal(ids[:, :n_real_ant], plan.reuse.antennas),
            "antenna_ids differ from reuse",
        )


def _check_real_entries(plan, group, real, blocks, where: str) -> None:
    device, slot = np.nonzero(real)
    rows = group.rows[device, slot]
    inside = (rows >= blocks.start[device]) & (rows < blocks.stop[device])
    _require(np.all(inside), f"{where}: a device computes a row it does not own")
    _require(np.all(plan.row_group[rows] == group.label), f"{where}: a row of another group")
    positions = group.positions[device, slot]
    _require(np.all(positions == rows - blocks.start[device]), f"{where}: a real position is wrong")
    for name, values, expected in (("a1", group.a1, plan.row_a1), ("a2", group.a2, plan.row_a2)):
        local = values[device, slot]
        in_range = (local >= 0) & (local < plan.n_ant_total)
        _require(np.all(in_range), f"{where}: a real {name} is outside the device's antennas")
        global_id = plan.antenna_ids[device, local]
        _require(
            np.all(global_id == expected[rows]), f"{where}: a real {name} is not the row's antenna"
        )


def _check_padded_entries(plan, group, padded, n_real_ant: int, where: str) -> None:
    _require(
        np.all(group.positions[padded] == plan.block_size), f"{where}: padding misses the spare row"
    )
    a1, a2 = group.a1[padded], group.a2[padded]
    in_range = (a1 >= 0) & (a2 >= 0) & (a1 < plan.n_ant_total) & (a2 < plan.n_ant_total)
    _require(np.all(in_range), f"{where}: a padded pair is outside the device's antennas")
    _require(
        np.all((a1 >= n_real_ant) | (a2 >= n_real_ant)), f"{where}: a padded pair has no ghost"
    )
