"""Shard plans: each device's rows of each group, padded with ghost pairs to one common count.

``shard_map`` runs one program with one set of shapes, so every device must process the same
number of rows of each baseline group. A device computes its real rows, then fresh ghost pairs
up to the group's padded count (the largest per-device real count); every result is scattered
into the device's own block of B rows, and the padded ones into the spare row B, which the
caller allocates and drops. No device reads another device's rows.
"""

from dataclasses import dataclass

import numpy as np

from tabascal_partition._ghosts import ghost_pairs, ghosts_needed
from tabascal_partition._ownership import ownership, read_only, stable_order
from tabascal_partition._reuse import ReusePlan, check_reuse_matches
from tabascal_partition._validate import check_baselines, check_count, check_groups, check_order


@dataclass(frozen=True)
class GroupPlan:
    """One baseline group's rows on every device, stacked one row per device.

    Attributes:
        label: the group's label.
        padded: padded count P, the largest per-device real count of this group.
        a1, a2: (n_dev, P) int32 antenna ids in the device's numbering (see
            :attr:`ShardPlan.antenna_ids`); ghosts have ids >= the device's real antenna count.
        rows: (n_dev, P) int64 row of the sharded baseline list (the data's order, or the reuse
            plan's packed order); -1 for a padded entry.
        positions: (n_dev, P) int32 scatter row in the device's block: ``row - start`` for a real
            entry, the spare row B for a padded one.
        n_real: (n_dev,) int32 real entries per device; they come first, padding after them.
    """

    label: int
    padded: int
    a1: np.ndarray
    a2: np.ndarray
    rows: np.ndarray
    positions: np.ndarray
    n_real: np.ndarray

    @property
    def n_padding(self) -> np.ndarray:
        """(n_dev,) int32 padded entries per device: ``padded - n_real``."""
        return self.padded - self.n_real


@dataclass(frozen=True)
class ShardPlan:
    """Per-device index arrays for running one baseline-sharded program on every device.

    Attributes:
        n_bl: number of baseline rows.
        n_ant: real antennas in the global numbering.
        n_dev: number of devices.
        block_size: B = ceil(n_bl / n_dev); device d owns rows [d*B, (d+1)*B) of the sharded
            list (see :func:`ownership`) and writes padding to its spare row B.
        n_ghost: ghost antennas appended on every device.
        n_ant_total: antennas every device uses: its real antenna slots plus ``n_ghost``. That is
            ``n_ant + n_ghost``, or ``reuse.width + n_ghost`` in the compact numbering.
        row_a1, row_a2: (n_bl,) int64 global antenna ids of the sharded rows, in sharded order.
        row_group: (n_bl,) int64 group label of each sharded row.
        antenna_ids: (n_dev, n_ant_total) int64 global antenna behind each device antenna, -1
            for a zero-signal one (a ghost, or an unused slot of the compact numbering). A caller
            gathers the per-device signal with ``signal_with_zero_row[antenna_ids]``, where the
            appended last row is zero, so that -1 selects it.
        groups: one :class:`GroupPlan` per distinct label, in increasing label order.
        reuse: the antenna-reuse plan the rows were packed by, or None (global ids).
        order: (n_bl,) int64 input row behind each sharded row (``reuse.order`` with a reuse
            plan), or None: the data's order.
    """

    n_bl: int
    n_ant: int
    n_dev: int
    block_size: int
    n_ghost: int
    n_ant_total: int
    row_a1: np.ndarray
    row_a2: np.ndarray
    row_group: np.ndarray
    antenna_ids: np.ndarray
    groups: tuple[GroupPlan, ...]
    reuse: ReusePlan | None = None
    order: np.ndarray | None = None

    @property
    def spare_row(self) -> int:
        """Local row every padded entry scatters into (one past the block)."""
        return self.block_size

    @property
    def n_real_ant(self) -> int:
        """Real antenna slots per device: n_ant, or the reuse plan's width."""
        return self.n_ant_total - self.n_ghost

    def antenna_widths(self) -> np.ndarray:
        """(n_dev,) int64 distinct real antennas the rows each device owns touch."""
        device = np.repeat(np.arange(self.n_dev), ownership(self.n_bl, self.n_dev).counts)
        touched = np.zeros((self.n_dev, self.n_ant), bool)
        touched[device, self.row_a1] = True
        touched[device, self.row_a2] = True
        return touched.sum(axis=1)

    def validate(self) -> None:
        """Re-check every invariant; raise :class:`InvalidPlanError` naming the first broken."""
        from tabascal_partition._plan_checks import check_shard_plan

        check_shard_plan(self)

    def summary(self) -> str:
        """A few readable lines: blocks, ghosts, and each group's padding."""
        widths = self.antenna_widths()
        lines = [
            f"ShardPlan: {self.n_bl} baselines on {self.n_dev} device(s), block size B = "
            f"{self.block_size} (spare row {self.spare_row})",
            f"antennas per device: {self.n_real_ant} real slots + {self.n_ghost} ghost = "
            f"{self.n_ant_total}; the widest device's rows touch {int(widths.max(initial=0))} "
            f"real antennas",
        ]
        if self.reuse is not None:
            lines.append(
                f"compact antenna numbering from the reuse plan: width {self.reuse.width} of "
                f"{self.n_ant} (lower bound {self.reuse.lower_bound})"
            )
        lines.append("group label  padded  real per device (min..max)  padding per device (max)")
        for index, group in enumerate(self.groups):
            real = group.n_real
            low, high = (int(real.min()), int(real.max())) if real.size else (0, 0)
            lines.append(
                f"{index:5d} {group.label:5d} {group.padded:7d}  {low:>10d}..{high:<13d}"
                f"  {int(group.n_padding.max()) if real.size else 0:>8d}"
            )
        total = sum(group.padded for group in self.groups)
        lines.append(f"rows computed per device: {total} for {self.block_size} owned")
        return "\n".join(lines)


def plan_shards(
    a1, a2, n_ant, n_dev, groups=None, *, reuse: ReusePlan | None = None, order=None
) -> ShardPlan:
    """Plan each device's rows of each group, padded with ghost pairs to a common count.

    Args:
        a1, a2: (n_bl,) integer antenna ids of each baseline row, in [0, n_ant); no (a1, a2)
            pair may repeat.
        n_ant: number of real antennas.
        n_dev: number of devices (>= 1).
        groups: None for one group (label 0), or (n_bl,) integer label of each row.
        reuse: optional :class:`ReusePlan` built by ``antenna_reuse_plan`` from the same a1, a2,
            n_ant and n_dev. The rows are then sharded in its packed order (``rows`` index the
            packed order; ``reuse.order[rows]`` gives the input rows) and a1/a2 in the group plans
            are each device's compact antenna numbers (indices into ``reuse.antennas[d]``), with
            ghosts from ``reuse.width`` up.
        order: optional (n_bl,) permutation of the rows, the input row behind each sharded row
            (e.g. :func:`spread_order`), for the global numbering; not with ``reuse``, which
            carries its own.

    Returns:
        The :class:`ShardPlan`. Ghost antennas are the fewest that give every device enough
        distinct ghost pairs for all of its padding in all groups together, so that no pair
        repeats on a device, across its groups as well as within each.
    """
    caller = "plan_shards"
    a1, a2, n_ant = check_baselines(a1, a2, n_ant, caller)
    n_dev = check_count(n_dev, "n_dev", caller, 1)
    labels, group_index = check_groups(groups, a1.shape[0], caller)
    n_bl = a1.shape[0]
    n_real_ant = n_ant
    if reuse is not None:
        if order is not None:
            raise ValueError(
                f"{caller}: pass either reuse or order, not both; a reuse plan's rows are "
                "sharded in its own order (reuse.order)"
            )
        check_reuse_matches(reuse, a1, a2, n_ant, n_dev, caller)
        order = np.asarray(reuse.order)
        n_real_ant = reuse.width
    elif order is not None:
        order = check_order(order, a1.shape[0], caller)
    if order is not None:
        a1, a2, group_index = a1[order], a2[order], group_index[order]
    row_a1, row_a2, dev_a1, dev_a2 = a1, a2, a1, a2
    if reuse is not None:
        dev_a1, dev_a2 = reuse.local_a1, reuse.local_a2

    blocks = ownership(n_bl, n_dev)
    block_size = blocks.block_size
    device = np.repeat(np.arange(n_dev, dtype=np.int64), blocks.counts)
    n_groups = labels.shape[0]
    counts = np.bincount(device * n_groups + group_index, minlength=n_dev * n_groups)
    counts = counts.reshape(n_dev, n_groups)
    padded = counts.max(axis=0, initial=0)
    padding = padded - counts
    n_ghost = ghosts_needed(n_real_ant, int(padding.sum(axis=1).max(initial=0)))
    # Device d's ghost pairs are numbered consecutively through its groups, so no pair repeats
    # on a device even across groups.
    first_ghost_pair = np.cumsum(padding, axis=1) - padding

    by_group = stable_order(group_index, n_groups)
    group_starts = np.searchsorted(group_index[by_group], np.arange(n_groups + 1))
    plans = []
    for g in range(n_groups):
        rows = by_group[group_starts[g] : group_starts[g + 1]]
        plans.append(
            _group_plan(
                int(labels[g]),
                rows,
                row_device=device[rows],
                endpoints=(dev_a1[rows], dev_a2[rows]),
                n_real=counts[:, g],
                first_ghost_pair=first_ghost_pair[:, g],
                start=blocks.start,
                spare_row=block_size,
                ghosts=(n_real_ant, n_ghost),
            )
        )
    return ShardPlan(
        n_bl=n_bl,
        n_ant=n_ant,
        n_dev=n_dev,
        block_size=block_size,
        n_ghost=n_ghost,
        n_ant_total=n_real_ant + n_ghost,
        row_a1=read_only(row_a1),
        row_a2=read_only(row_a2),
        row_group=read_only(labels[group_index]),
        antenna_ids=read_only(_antenna_ids(reuse, n_dev, n_ant, n_ghost)),
        groups=tuple(plans),
        reuse=reuse,
        order=None if order is None else read_only(order),
    )


def _group_plan(
    label, rows, *, row_device, endpoints, n_real, first_ghost_pair, start, spare_row, ghosts
) -> GroupPlan:
    """One group's (n_dev, padded) arrays.

    Args:
        rows: (m,) the group's rows, increasing (so ``row_device`` is sorted too).
        row_device, endpoints: (m,) each row's device and its (a1, a2) in device numbering.
        n_real, first_ghost_pair, start: (n_dev,) real rows per device, number of its first
            ghost pair, first row it owns.
        spare_row: B; ghosts: (real antenna slots, ghost count).
    """
    n_dev = n_real.shape[0]
    padded = int(n_real.max(initial=0))
    slot = np.arange(rows.shape[0]) - np.searchsorted(row_device, row_device)
    out_rows = np.full((n_dev, padded), -1, np.int64)
    positions = np.full((n_dev, padded), spare_row, np.int32)
    a1 = np.empty((n_dev, padded), np.int32)
    a2 = np.empty((n_dev, padded), np.int32)
    out_rows[row_device, slot] = rows
    positions[row_device, slot] = rows - start[row_device]
    a1[row_device, slot], a2[row_device, slot] = endpoints
    pad_device, pad_slot = np.nonzero(np.arange(padded) >= n_real[:, None])
    number = first_ghost_pair[pad_device] + pad_slot - n_real[pad_device]
    a1[pad_device, pad_slot], a2[pad_device, pad_slot] = ghost_pairs(*ghosts, number)
    return GroupPlan(
        label=label,
        padded=padded,
        a1=read_only(a1),
        a2=read_only(a2),
        rows=read_only(out_rows),
        positions=read_only(positions),
        n_real=read_only(n_real.astype(np.int32)),
    )


def _antenna_ids(reuse: ReusePlan | None, n_dev: int, n_ant: int, n_ghost: int) -> np.ndarray:
    if reuse is None:
        real = np.broadcast_to(np.arange(n_ant, dtype=np.int64), (n_dev, n_ant))
    else:
        real = reuse.antennas.astype(np.int64)
    return np.concatenate([real, np.full((n_dev, n_ghost), -1, np.int64)], axis=1)
