"""Random baseline graphs and plan invariant checks written from the issue, not from the code.

The checks here recompute what each plan must be from the baselines alone (ownership blocks,
per-group counts, fresh-pair counts) with plain loops over devices, and never call
``validate()`` or any planner internals.
"""

import numpy as np
from hypothesis import strategies as st


@st.composite
def baseline_graphs(draw, max_ant: int = 24):
    """(a1, a2, n_ant): a random subset of all pairs, maybe with autocorrelations, some rows
    reversed, some pairs present in both orientations, rows shuffled, spare antenna ids."""
    n_used = draw(st.integers(1, max_ant))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    autos = draw(st.booleans()) or n_used == 1  # one antenna has only its autocorrelation
    a1, a2 = np.triu_indices(n_used, 0 if autos else 1)
    keep = rng.random(a1.size) < draw(st.sampled_from([1.0, 0.8, 0.5, 0.1]))
    if not keep.any():
        keep[rng.integers(a1.size)] = True
    a1, a2 = a1[keep], a2[keep]
    if draw(st.booleans()):  # reversed rows
        flip = rng.random(a1.size) < 0.4
        a1, a2 = np.where(flip, a2, a1), np.where(flip, a1, a2)
    if draw(st.booleans()):  # a few pairs in both orientations (allowed: pairs are ordered)
        cross = np.flatnonzero(a1 != a2)
        both = cross[rng.random(cross.size) < 0.2]
        a1, a2 = np.concatenate([a1, a2[both]]), np.concatenate([a2, a1[both]])
    if draw(st.booleans()):
        order = rng.permutation(a1.size)
        a1, a2 = a1[order], a2[order]
    n_ant = n_used + draw(st.integers(0, 3))  # antennas that appear in no baseline
    return a1.astype(np.int64), a2.astype(np.int64), n_ant


@st.composite
def group_labels(draw, n_bl: int):
    """Labels for n_bl rows with 1..5 groups: random, in runs (uneven per device), or with one
    group confined to a single run; label values are arbitrary integers, not 0..K-1."""
    n_groups = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    style = draw(st.sampled_from(["random", "runs", "one run"]))
    if style == "random":
        index = rng.integers(0, n_groups, n_bl)
    elif style == "runs":
        index = np.sort(rng.integers(0, n_groups, n_bl))
    else:
        index = np.zeros(n_bl, np.int64)
        start = rng.integers(0, n_bl)
        index[start : start + rng.integers(1, n_bl + 1)] = n_groups - 1
    values = np.array(draw(st.lists(st.integers(-50, 50), min_size=5, max_size=5, unique=True)))
    return values[index]


def fresh_pairs_available(n_real: int, n_ghost: int) -> int:
    """Unordered pairs (autocorrelations included) among n_real + n_ghost antennas that
    involve a ghost: all pairs of the enlarged set minus the all-real ones."""
    total = n_real + n_ghost
    return total * (total + 1) // 2 - n_real * (n_real + 1) // 2


def expected_blocks(n_bl: int, n_dev: int):
    block = -(-n_bl // n_dev)
    starts = [min(d * block, n_bl) for d in range(n_dev)]
    stops = [min((d + 1) * block, n_bl) for d in range(n_dev)]
    return block, starts, stops


def assert_shard_plan_invariants(plan, a1, a2, n_ant, n_dev, groups=None, reuse=None, order=None):
    """Every invariant of issue 4 for a ShardPlan built from these arguments."""
    n_bl = len(a1)
    labels = np.zeros(n_bl, np.int64) if groups is None else np.asarray(groups)
    if reuse is not None:
        order = reuse.order
    if order is None:
        assert plan.order is None
        order = np.arange(n_bl)
    else:
        assert np.array_equal(plan.order, order)
    sharded_a1, sharded_a2, sharded_label = a1[order], a2[order], labels[order]
    n_real_ant = n_ant if reuse is None else reuse.width
    block, starts, stops = expected_blocks(n_bl, n_dev)
    assert plan.block_size == block
    assert plan.n_ant_total == n_real_ant + plan.n_ghost

    def global_id(d, local):
        return local if reuse is None else reuse.antennas[d, local]

    computed = np.zeros(n_bl, np.int64)
    padding_per_device = np.zeros(n_dev, np.int64)
    real_pairs = [set() for _ in range(n_dev)]
    ghost_pairs = [set() for _ in range(n_dev)]
    for group in plan.groups:
        owned = [
            [r for r in range(starts[d], stops[d]) if sharded_label[r] == group.label]
            for d in range(n_dev)
        ]
        assert group.padded == max(len(rows) for rows in owned)
        for d in range(n_dev):
            rows, positions = group.rows[d], group.positions[d]
            real = rows >= 0
            # Real rows: exactly the device's owned rows of this group, each once.
            assert sorted(rows[real].tolist()) == owned[d]
            assert group.n_real[d] == len(owned[d])
            assert (~real).sum() == group.padded - len(owned[d])
            np.add.at(computed, rows[real], 1)
            assert np.array_equal(positions[real], rows[real] - starts[d])
            assert np.all(positions[~real] == block)
            assert np.all((positions >= 0) & (positions <= block))
            # Real endpoints map back to the row's antennas with orientation kept.
            assert np.array_equal(global_id(d, group.a1[d, real]), sharded_a1[rows[real]])
            assert np.array_equal(global_id(d, group.a2[d, real]), sharded_a2[rows[real]])
            # Padded pairs: inside the device's antennas, always with a ghost.
            g1, g2 = group.a1[d, ~real], group.a2[d, ~real]
            assert np.all((g1 >= 0) & (g2 >= 0))
            assert np.all((g1 < plan.n_ant_total) & (g2 < plan.n_ant_total))
            assert np.all((g1 >= n_real_ant) | (g2 >= n_real_ant))
            padding_per_device[d] += (~real).sum()
            # No (a1, a2) pair repeats on a device, across its groups too; ghost pairs do not
            # repeat even reversed. (A real pair has no ghost, so the two kinds cannot meet.)
            for p, q, is_real in zip(group.a1[d].tolist(), group.a2[d].tolist(), real, strict=True):
                seen, key = (
                    (real_pairs[d], (p, q)) if is_real else (ghost_pairs[d], (min(p, q), max(p, q)))
                )
                assert key not in seen, f"device {d} computes {key} twice"
                seen.add(key)
        if len({len(rows) for rows in owned}) == 1:
            assert not np.any(group.rows < 0), "an evenly dividing group has padding"
    assert np.all(computed == 1), "a baseline is not computed exactly once"
    assert set(labels.tolist()) <= {group.label for group in plan.groups}
    # Ghost antennas: real-antenna ids are never ghosts, and the count is the fewest enough.
    assert np.all(plan.antenna_ids[:, n_real_ant:] == -1)
    need = int(padding_per_device.max(initial=0))
    assert fresh_pairs_available(n_real_ant, plan.n_ghost) >= need
    if plan.n_ghost:
        assert fresh_pairs_available(n_real_ant, plan.n_ghost - 1) < need
    if need == 0:
        assert plan.n_ghost == 0


def assert_reuse_plan_invariants(plan, a1, a2, n_ant, n_dev):
    """Permutation, blocks, compact numbering, orientation and the width's bounds."""
    n_bl = len(a1)
    _, starts, stops = expected_blocks(n_bl, n_dev)
    assert sorted(plan.order.tolist()) == list(range(n_bl))
    assert np.array_equal(plan.counts, np.subtract(stops, starts))
    rng = np.random.default_rng(n_bl)
    values = rng.normal(size=(n_bl, 3))
    assert np.array_equal(plan.unpack(plan.pack(values)), values)
    assert np.array_equal(plan.pack(plan.unpack(values)), values)
    assert np.array_equal(plan.pack(values.T, axis=1), values[plan.order].T)
    widths = []
    for d in range(n_dev):
        rows = plan.order[starts[d] : stops[d]]
        touched = sorted(set(a1[rows].tolist()) | set(a2[rows].tolist()))
        widths.append(len(touched))
        assert plan.antennas[d, : len(touched)].tolist() == touched
        assert np.all(plan.antennas[d, len(touched) :] == -1)
        local1, local2 = plan.local_a1[starts[d] : stops[d]], plan.local_a2[starts[d] : stops[d]]
        assert np.array_equal(plan.antennas[d, local1], a1[rows])
        assert np.array_equal(plan.antennas[d, local2], a2[rows])
    assert plan.width == max(widths, default=0)
    assert plan.width >= plan.lower_bound
    assert plan.width <= contiguous_width(a1, a2, n_dev)


def contiguous_width(a1, a2, n_dev) -> int:
    """Most antennas any device touches under plain contiguous ownership."""
    _, starts, stops = expected_blocks(len(a1), n_dev)
    return max(
        (
            len(set(a1[s:e].tolist()) | set(a2[s:e].tolist()))
            for s, e in zip(starts, stops, strict=True)
        ),
        default=0,
    )
