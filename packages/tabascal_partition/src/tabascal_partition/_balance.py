"""Balancing buckets of baselines over devices with a maximum flow.

The reuse plan sorts baselines into buckets by (eligibility class, group): a class is the set
of devices that hold both antennas' parts. Every device must receive exactly its ownership
count, and within each group no device should receive more than it must. That is a flow

    source -> (class, group) [its row count] -> (device, group) [eligible devices only]
           -> device [at most its cap for the group] -> sink [exactly the device's quota],

with the caps as low as still route every row. The graph has at most (classes + devices) *
groups + devices nodes (a few hundred), so plain Python is fast enough.
"""

import numpy as np

_UNLIMITED = 1 << 62


class _FlowNetwork:
    """Residual graph with Dinic's maximum flow."""

    def __init__(self, n_nodes: int) -> None:
        self.edges_from: list[list[int]] = [[] for _ in range(n_nodes)]
        self.head: list[int] = []
        self.residual: list[int] = []
        self.limit: list[int] = []

    def add_edge(self, tail: int, head: int, capacity: int) -> int:
        edge = len(self.head)
        self.edges_from[tail].append(edge)
        self.edges_from[head].append(edge + 1)
        self.head += [head, tail]
        self.residual += [capacity, 0]
        self.limit += [capacity, 0]
        return edge

    def flow(self, edge: int) -> int:
        return self.limit[edge] - self.residual[edge]

    def max_flow(self, source: int, sink: int) -> int:
        """Push as much flow as the residual graph allows; return the amount pushed."""
        pushed = 0
        while True:
            level = self._levels(source)
            if level[sink] < 0:
                return pushed
            pushed += self._blocking_flow(source, sink, level)

    def _levels(self, source: int) -> list[int]:
        level = [-1] * len(self.edges_from)
        level[source] = 0
        frontier = [source]
        while frontier:
            following = []
            for node in frontier:
                for edge in self.edges_from[node]:
                    head = self.head[edge]
                    if self.residual[edge] > 0 and level[head] < 0:
                        level[head] = level[node] + 1
                        following.append(head)
            frontier = following
        return level

    def _blocking_flow(self, source: int, sink: int, level: list[int]) -> int:
        position = [0] * len(self.edges_from)
        pushed = 0
        path: list[int] = []
        node = source
        while True:
            if node == sink:
                amount = min(self.residual[edge] for edge in path)
                for edge in path:
                    self.residual[edge] -= amount
                    self.residual[edge ^ 1] += amount
                pushed += amount
                path.clear()
                node = source
                continue
            edges = self.edges_from[node]
            while position[node] < len(edges):
                edge = edges[position[node]]
                head = self.head[edge]
                if self.residual[edge] > 0 and level[head] == level[node] + 1:
                    break
                position[node] += 1
            else:
                if node == source:
                    return pushed
                level[node] = -1  # dead end for the rest of this phase
                edge = path.pop()
                node = self.head[edge ^ 1]
                position[node] += 1
                continue
            path.append(edge)
            node = head


def balance_buckets(supply: np.ndarray, eligible: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """Split every bucket's rows over devices: exact quotas, groups as even as eligibility allows.

    With several groups, device d may take at most ``ceil(quota[d] * group_rows / n_bl) + slack``
    rows of a group; the smallest common slack that routes every row is found by a doubling
    search and bisection, then each group's own slack is lowered as far as it goes with the
    others held.

    Args:
        supply: (n_class, n_group) int64 rows in each (class, group) bucket.
        eligible: (n_class, n_dev) bool, device may take rows of the class.
        quota: (n_dev,) int64 rows each device must receive; sums to ``supply.sum()``.

    Returns:
        (n_class, n_group, n_dev) int64 counts with ``sum over devices == supply`` and
        ``sum over buckets == quota``. Rows that no eligible device can take without breaking a
        quota are given to devices with room left whether eligible or not (widening them); this
        happens only for graphs a design does not fit.
    """
    n_group = supply.shape[1]
    total = int(supply.sum())
    group_rows = supply.sum(axis=0)
    if n_group == 1 or total == 0:
        counts, _ = _route(supply, eligible, quota, None)
        return counts
    share = -(-quota[:, None] * group_rows[None, :] // total)
    slack = np.full(n_group, int(group_rows.max()))
    counts, routed = _route(supply, eligible, quota, share + slack)
    if routed < total:
        _place_leftovers(counts, supply, quota)
        return counts

    def fits(trial: np.ndarray) -> bool:
        return _route(supply, eligible, quota, share + trial)[1] == total

    # Search the common slack upwards from 0 (it is usually small), then bisect; fits(high) holds.
    low, high = 0, 0
    while high < slack[0] and not fits(np.full(n_group, high)):
        low, high = high + 1, min(int(slack[0]), 2 * high + 1)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(np.full(n_group, middle)) else (middle + 1, high)
    slack[:] = high
    for g in range(n_group):
        low, high = 0, int(slack[g])
        while low < high:
            middle = (low + high) // 2
            trial = slack.copy()
            trial[g] = middle
            low, high = (low, middle) if fits(trial) else (middle + 1, high)
        slack[g] = high
    return _route(supply, eligible, quota, share + slack)[0]


def _route(supply, eligible, quota, cap):
    """Maximum flow of the bucket rows; cap (n_dev, n_group) limits each device's group rows."""
    n_class, n_group = supply.shape
    n_dev = quota.shape[0]
    source, sink, first_bucket = 0, 1, 2
    first_device_group = first_bucket + n_class * n_group
    first_device = first_device_group + n_dev * n_group
    network = _FlowNetwork(first_device + n_dev)
    bucket_edges = []
    for c, g in zip(*np.nonzero(supply), strict=True):
        node = first_bucket + c * n_group + g
        network.add_edge(source, node, int(supply[c, g]))
        for d in np.flatnonzero(eligible[c]):
            edge = network.add_edge(node, first_device_group + d * n_group + g, _UNLIMITED)
            bucket_edges.append((c, g, d, edge))
    for d in range(n_dev):
        for g in range(n_group):
            limit = _UNLIMITED if cap is None else int(cap[d, g])
            network.add_edge(first_device_group + d * n_group + g, first_device + d, limit)
        network.add_edge(first_device + d, sink, int(quota[d]))
    routed = network.max_flow(source, sink)
    counts = np.zeros((n_class, n_group, n_dev), np.int64)
    for c, g, d, edge in bucket_edges:
        counts[c, g, d] = network.flow(edge)
    if cap is None and routed < int(supply.sum()):
        _place_leftovers(counts, supply, quota)
    return counts, routed


def _place_leftovers(counts: np.ndarray, supply: np.ndarray, quota: np.ndarray) -> None:
    """Give rows the flow could not place to devices with room, least-loaded in the group first."""
    room = quota - counts.sum(axis=(0, 1))
    left = supply - counts.sum(axis=2)
    for c, g in zip(*np.nonzero(left), strict=True):
        need = int(left[c, g])
        while need:
            in_group = counts[:, g, :].sum(axis=0)
            candidates = np.flatnonzero(room > 0)
            d = candidates[np.argmin(in_group[candidates])]
            take = min(need, int(room[d]))
            counts[c, g, d] += take
            room[d] -= take
            need -= take
