"""Host-side plans for splitting an interferometer's baseline axis over devices.

- :func:`ownership`: contiguous blocks of the data's rows, B = ceil(n_bl / n_dev) per device.
- :func:`plan_shards`: each device's rows of each baseline group, padded to a common count with
  pairs of zero-signal ghost antennas, and their scatter positions (padding goes to spare row B).
- :func:`spread_order`: a permutation of the rows whose ownership blocks hold an even share of
  every group, each block in the data's order.
- :func:`antenna_reuse_plan`: a permutation of the baselines into per-device blocks that touch
  few antennas, with its lower bound.

Pure numpy: importing this package never imports jax.
"""

from tabascal_partition._bounds import covering_fraction
from tabascal_partition._designs import Design, designs_for
from tabascal_partition._ghosts import ghost_pair_capacity, ghosts_needed
from tabascal_partition._ownership import Ownership, ownership
from tabascal_partition._plan_checks import InvalidPlanError
from tabascal_partition._reuse import ReusePlan, antenna_reuse_plan
from tabascal_partition._shard_plan import GroupPlan, ShardPlan, plan_shards
from tabascal_partition._spread import spread_order

__version__ = "0.1.0"

__all__ = [
    "Design",
    "GroupPlan",
    "InvalidPlanError",
    "Ownership",
    "ReusePlan",
    "ShardPlan",
    "antenna_reuse_plan",
    "covering_fraction",
    "designs_for",
    "ghost_pair_capacity",
    "ghosts_needed",
    "ownership",
    "plan_shards",
    "spread_order",
]
