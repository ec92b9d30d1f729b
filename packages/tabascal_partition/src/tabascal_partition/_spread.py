"""An order of the rows that spreads every group evenly over the ownership blocks.

In the data's usual order a group's rows can gather in a few devices' blocks (a telescope lists
its baselines antenna by antenna, and a group of long baselines then falls mostly in the last
blocks). A shard plan pads every group to its largest per-device count, so such a group costs
every device as much as the device that holds most of it. :func:`spread_order` gives each
device the d-th share of every group instead, its rows still in the data's order.
"""

import numpy as np

from tabascal_partition._ownership import ownership, stable_order
from tabascal_partition._validate import check_count, check_groups


def spread_order(groups, n_dev) -> np.ndarray:
    """A permutation of the rows whose ownership blocks each hold an even share of every group.

    Each group's rows, in the data's order, are cut into ``n_dev`` runs in proportion to the
    ownership counts; device d receives the d-th run of every group. Exactly: row i, the r-th of
    its group's n rows, is given the position (r + 1/2) / n in its group; the rows ordered by
    position are split into the ownership blocks. A group of n rows then has n * count_d / n_bl
    rows on device d up to rounding: within 2 of it (1.5 at most over 3,300 random cases of up to
    60 groups, 32 devices and 20,000 rows).

    Args:
        groups: (n_bl,) integer group label of each row.
        n_dev: number of devices (>= 1).

    Returns:
        (n_bl,) int64 ``order``: device d's rows are ``order[d*B : d*B + count_d]`` (the
        :func:`ownership` blocks), each block in increasing data order. With one group (or one
        device) it is ``arange(n_bl)``: contiguous ownership, unchanged.
    """
    caller = "spread_order"
    n_dev = check_count(n_dev, "n_dev", caller, 1)
    groups = np.asarray(groups)
    n_bl = groups.shape[0] if groups.ndim == 1 else -1
    labels, index = check_groups(groups, n_bl, caller)
    if labels.size <= 1 or n_dev == 1:
        return np.arange(n_bl, dtype=np.int64)
    sizes = np.bincount(index, minlength=labels.size)
    by_group = stable_order(index, labels.size)
    rank = np.empty(n_bl, np.int64)
    rank[by_group] = np.arange(n_bl) - (np.cumsum(sizes) - sizes)[index[by_group]]
    position = (rank + 0.5) / sizes[index]
    by_position = np.lexsort((index, position))
    device = np.empty(n_bl, np.int64)
    device[by_position] = np.repeat(np.arange(n_dev), ownership(n_bl, n_dev).counts)
    return stable_order(device, n_dev)
