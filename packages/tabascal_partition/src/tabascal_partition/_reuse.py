"""The antenna-reuse plan: permute baselines so that each device touches few antennas.

Contiguous ownership in the usual (a1, a2) order gives every device almost every antenna, so
each device evaluates the per-antenna signal of all of them. The reuse plan instead splits the
antennas into parts held by chosen devices (a :class:`~tabascal_partition._designs.Design`),
sends each baseline to a device holding both of its parts, balances the counts with a maximum
flow (``_balance``), and packs the rows device by device. Device d's rows are then the d-th
ownership block of the packed order, so a shard plan over the packed order (``plan_shards(...,
reuse=plan)``) needs no other change.
"""

from dataclasses import dataclass

import numpy as np

from tabascal_partition._balance import balance_buckets
from tabascal_partition._bounds import width_lower_bound
from tabascal_partition._designs import Design, designs_for, part_sizes
from tabascal_partition._ownership import ownership, read_only, stable_order
from tabascal_partition._validate import check_baselines, check_count, check_groups

# Designs (and part sizes) tried at most; on large graphs the first one nearly always balances.
_MAX_TRIES = 48


@dataclass(frozen=True)
class ReusePlan:
    """A permutation of the baselines into per-device blocks that touch few antennas.

    Attributes:
        n_bl, n_ant, n_dev: rows, antennas, devices.
        order: (n_bl,) int64 input row of each packed row; device d's rows are packed rows
            ``[d*B, d*B + counts[d])``, the d-th ownership block.
        inverse: (n_bl,) int64 packed row of each input row (``order[inverse] == arange``).
        counts: (n_dev,) int64 rows per device, equal to the ownership counts.
        antennas: (n_dev, width) int32 each device's global antenna ids, sorted, padded with -1.
        widths: (n_dev,) int64 antennas each device touches.
        local_a1, local_a2: (n_bl,) int32 endpoints of each packed row in its device's compact
            numbering: ``antennas[d, local_a1[i]] == a1[order[i]]``, orientation kept.
        width: antennas the widest device touches.
        lower_bound: no plan with these counts can have a smaller width (``_bounds``).
        contiguous_width: the width of plain contiguous ownership, for comparison.
        design: name of the construction used.
    """

    n_bl: int
    n_ant: int
    n_dev: int
    order: np.ndarray
    inverse: np.ndarray
    counts: np.ndarray
    antennas: np.ndarray
    widths: np.ndarray
    local_a1: np.ndarray
    local_a2: np.ndarray
    width: int
    lower_bound: int
    contiguous_width: int
    design: str

    def pack(self, values, axis: int = 0) -> np.ndarray:
        """Reorder a per-baseline array from input order into packed order along ``axis``."""
        return np.take(values, self.order, axis=axis)

    def unpack(self, values, axis: int = 0) -> np.ndarray:
        """Reorder a per-baseline array from packed order back into input order."""
        return np.take(values, self.inverse, axis=axis)

    def validate(self, a1=None, a2=None) -> None:
        """Re-check the plan's invariants, and with a1, a2 that it maps back to them.

        Raises :class:`InvalidPlanError` naming the first broken invariant.
        """
        from tabascal_partition._plan_checks import check_reuse_plan

        check_reuse_plan(self, a1, a2)

    def summary(self) -> str:
        """A few readable lines: design, widths against the bound, rows per device."""
        return "\n".join(
            [
                f"ReusePlan: {self.n_bl} baselines, {self.n_ant} antennas, {self.n_dev} "
                f"device(s); design {self.design}",
                f"width {self.width} (width/n {self.width / max(self.n_ant, 1):.4f}), lower "
                f"bound {self.lower_bound}, contiguous ownership {self.contiguous_width}",
                f"antennas per device: {' '.join(str(int(w)) for w in self.widths)}",
                f"rows per device: {' '.join(str(int(c)) for c in self.counts)}",
            ]
        )


def antenna_reuse_plan(a1, a2, n_ant, n_dev, groups=None) -> ReusePlan:
    """Permute baselines into per-device blocks that each touch as few antennas as possible.

    Tries every design this package has for ``n_dev`` devices (narrowest predicted width first)
    and plain contiguous ownership, and keeps the narrowest that balances. Each device receives
    exactly its ownership count; with ``groups``, each group's rows are spread over the devices
    as evenly as the design's antenna sets allow.

    Args:
        a1, a2: (n_bl,) integer antenna ids of each baseline row, in [0, n_ant); no (a1, a2)
            pair may repeat. Autocorrelations, reversed pairs and missing baselines are fine.
        n_ant: number of antennas.
        n_dev: number of devices (>= 1).
        groups: None, or (n_bl,) integer group label of each row.

    Returns:
        The :class:`ReusePlan`.
    """
    caller = "antenna_reuse_plan"
    a1, a2, n_ant = check_baselines(a1, a2, n_ant, caller)
    n_dev = check_count(n_dev, "n_dev", caller, 1)
    _, group_index = check_groups(groups, a1.shape[0], caller)
    n_groups = int(group_index.max(initial=-1)) + 1
    quota = ownership(a1.shape[0], n_dev).counts
    contiguous = np.repeat(np.arange(n_dev, dtype=np.int64), quota)
    best_device, best_width = contiguous, _widths(contiguous, a1, a2, n_ant, n_dev).max(initial=0)
    contiguous_width, best_name = int(best_width), "contiguous ownership"

    present = np.flatnonzero(np.bincount(np.concatenate([a1, a2]), minlength=n_ant))
    candidates = []
    for design in designs_for(n_dev):
        candidates += _size_candidates(design, part_sizes(design, present.size))
    candidates.sort(key=lambda candidate: candidate[0])
    for predicted, design, sizes in candidates[:_MAX_TRIES]:
        if predicted >= best_width:
            break
        device, fits = _assign(
            design, sizes, present, (a1, a2, n_ant), group_index, n_groups, quota
        )
        width = _widths(device, a1, a2, n_ant, n_dev).max(initial=0)
        if width < best_width:
            best_device, best_width, best_name = device, width, design.name
        if fits:
            break
    return _pack(best_device, a1, a2, n_ant, n_dev, best_name, contiguous_width)


def _size_candidates(design: Design, sizes: np.ndarray) -> list:
    """(predicted width, design, sizes): the sizes given, then every single-antenna move
    between parts that keeps the predicted width. On small graphs the narrowest sizes can
    fail to balance (a device's private cells may exceed its quota) where a neighbour does."""
    held = design.membership.astype(np.int64)
    predicted = int((held @ sizes).max())
    found = [(predicted, design, sizes)]
    for source, target in np.ndindex(sizes.shape[0], sizes.shape[0]):
        if source == target or sizes[source] == 0:
            continue
        moved = sizes.copy()
        moved[source] -= 1
        moved[target] += 1
        width = int((held @ moved).max())
        if width <= predicted:
            found.append((width, design, moved))
    return found


def _assign(design: Design, sizes, present, baselines, group_index, n_groups, quota):
    """Device of every row under ``design``; also whether every row went to an eligible device."""
    a1, a2, n_ant = baselines
    held = design.membership
    n_parts = held.shape[1]
    part_of = np.zeros(n_ant, np.int64)
    part_of[present] = _interleaved_parts(
        sizes, _antenna_profile(a1, a2, n_ant, group_index, present)
    )
    low_part = np.minimum(part_of[a1], part_of[a2])
    high_part = np.maximum(part_of[a1], part_of[a2])
    # Cells (part i, part j) whose rows may go to the same devices form one class.
    cell_eligible = (held[:, :, None] & held[:, None, :]).reshape(design.n_dev, -1).T
    eligible, cell_class = np.unique(cell_eligible, axis=0, return_inverse=True)
    bucket = cell_class.reshape(-1)[low_part * n_parts + high_part] * n_groups + group_index
    n_buckets = eligible.shape[0] * n_groups
    supply = np.bincount(bucket, minlength=n_buckets).reshape(eligible.shape[0], n_groups)
    split = balance_buckets(supply, eligible, quota).reshape(n_buckets, design.n_dev)
    fits = bool(np.all(split[np.repeat(~eligible, n_groups, axis=0)] == 0))

    # Inside a bucket, rows in (lower antenna, higher antenna) order are cut into consecutive
    # runs, one per device, so the result does not depend on the input's row order.
    low_ant, high_ant = np.minimum(a1, a2), np.maximum(a1, a2)
    if n_buckets * n_ant * n_ant < 2**62:
        by_bucket = np.argsort((bucket * n_ant + low_ant) * n_ant + high_ant, kind="stable")
    else:
        by_bucket = np.lexsort((high_ant, low_ant, bucket))
    run_ends = np.cumsum(split.reshape(-1))
    device = np.empty(a1.shape[0], np.int64)
    device[by_bucket] = (
        np.searchsorted(run_ends, np.arange(a1.shape[0]), side="right") % design.n_dev
    )
    return device, fits


def _antenna_profile(a1, a2, n_ant, group_index, present) -> np.ndarray:
    """Per present antenna, its mean group index, then its degree: what the parts should mix."""
    degree = np.bincount(a1, minlength=n_ant) + np.bincount(a2, minlength=n_ant)
    label_sum = np.bincount(a1, group_index, n_ant) + np.bincount(a2, group_index, n_ant)
    mean_label = label_sum[present] / np.maximum(degree[present], 1)
    return np.lexsort((present, degree[present], mean_label))


def _interleaved_parts(sizes: np.ndarray, ranked: np.ndarray) -> np.ndarray:
    """Part of each present antenna, dealing parts evenly along the ranking ``ranked``.

    Part j takes the ranks nearest the quantiles (m + 1/2) / sizes[j], m < sizes[j], so every
    part gets a proportional sample of antennas from each end of the ranking (a part made of
    long-baseline antennas alone would leave its devices short of short baselines).
    """
    quantile = np.concatenate([(np.arange(size) + 0.5) / size for size in sizes])
    part_sequence = np.repeat(np.arange(sizes.shape[0]), sizes)[np.argsort(quantile, kind="stable")]
    part = np.empty(ranked.shape[0], np.int64)
    part[ranked] = part_sequence
    return part


def _used(device, a1, a2, n_ant, n_dev) -> np.ndarray:
    used = np.zeros((n_dev, n_ant), bool)
    used[device, a1] = True
    used[device, a2] = True
    return used


def _widths(device, a1, a2, n_ant, n_dev) -> np.ndarray:
    return _used(device, a1, a2, n_ant, n_dev).sum(axis=1)


def _pack(device, a1, a2, n_ant, n_dev, design_name, contiguous_width) -> ReusePlan:
    order = stable_order(device, n_dev)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.shape[0])
    packed_device = device[order]
    used = _used(device, a1, a2, n_ant, n_dev)
    widths = used.sum(axis=1)
    width = int(widths.max(initial=0))
    local_index = np.cumsum(used, axis=1) - 1
    antennas = np.full((n_dev, width), -1, np.int32)
    holder, antenna = np.nonzero(used)
    antennas[holder, local_index[holder, antenna]] = antenna
    return ReusePlan(
        n_bl=a1.shape[0],
        n_ant=n_ant,
        n_dev=n_dev,
        order=read_only(order),
        inverse=read_only(inverse),
        counts=read_only(np.bincount(device, minlength=n_dev).astype(np.int64)),
        antennas=read_only(antennas),
        widths=read_only(widths.astype(np.int64)),
        local_a1=read_only(local_index[packed_device, a1[order]].astype(np.int32)),
        local_a2=read_only(local_index[packed_device, a2[order]].astype(np.int32)),
        width=width,
        lower_bound=width_lower_bound(a1, a2, n_ant, n_dev),
        contiguous_width=contiguous_width,
        design=design_name,
    )


def check_reuse_matches(reuse: ReusePlan, a1, a2, n_ant: int, n_dev: int, caller: str) -> None:
    """Raise ValueError unless ``reuse`` was built for this validated baseline list."""
    expected = (a1.shape[0], n_ant, n_dev)
    if (reuse.n_bl, reuse.n_ant, reuse.n_dev) != expected:
        raise ValueError(
            f"{caller}: the reuse plan is for (n_bl, n_ant, n_dev) = "
            f"{(reuse.n_bl, reuse.n_ant, reuse.n_dev)} but the baselines give {expected}; build "
            "it with antenna_reuse_plan(a1, a2, n_ant, n_dev) on the same arrays"
        )
    if not np.array_equal(reuse.counts, ownership(a1.shape[0], n_dev).counts):
        raise ValueError(
            f"{caller}: the reuse plan's rows per device {reuse.counts.tolist()} are not the "
            "ownership blocks of the packed order; build it with antenna_reuse_plan"
        )
    device = np.repeat(np.arange(n_dev), reuse.counts)
    for name, local, values in (("a1", reuse.local_a1, a1), ("a2", reuse.local_a2, a2)):
        wrong = np.flatnonzero(reuse.antennas[device, local] != values[reuse.order])
        if wrong.size:
            raise ValueError(
                f"{caller}: the reuse plan's {name} differs from the baselines at input row "
                f"{int(reuse.order[wrong[0]])} ({wrong.size} rows in all); build it with "
                "antenna_reuse_plan on the same a1, a2"
            )
