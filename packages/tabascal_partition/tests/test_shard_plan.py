import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from partition_checks import assert_shard_plan_invariants, baseline_graphs, group_labels

from tabascal_partition import plan_shards

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The worked example of docs/partition.md: the 15 pairs of 6 antennas in the usual order on
# 3 devices (B = 5), in two groups.
EXAMPLE_A1, EXAMPLE_A2 = np.triu_indices(6, 1)
EXAMPLE_GROUPS = np.array([0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1])


def test_worked_example_matches_the_hand_computed_plan():
    plan = plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, EXAMPLE_GROUPS)
    assert (plan.block_size, plan.n_ghost, plan.n_ant_total) == (5, 1, 7)
    group0, group1 = plan.groups
    # Group 0 has 2, 3 and 4 rows on the devices: padded to 4, spare row 5.
    assert group0.padded == 4
    assert group0.n_real.tolist() == [2, 3, 4]
    assert group0.rows.tolist() == [[0, 1, -1, -1], [5, 6, 7, -1], [10, 11, 12, 13]]
    assert group0.positions.tolist() == [[0, 1, 5, 5], [0, 1, 2, 5], [0, 1, 2, 3]]
    assert group0.a1.tolist() == [[0, 0, 0, 1], [1, 1, 1, 0], [2, 2, 3, 3]]
    assert group0.a2.tolist() == [[1, 2, 6, 6], [2, 3, 4, 6], [4, 5, 4, 5]]
    # Group 1 has 3, 2 and 1 rows; device 1's ghost pair continues its numbering from group 0.
    assert group1.padded == 3
    assert group1.rows.tolist() == [[2, 3, 4], [8, 9, -1], [14, -1, -1]]
    assert group1.positions.tolist() == [[2, 3, 4], [3, 4, 5], [4, 5, 5]]
    assert group1.a1.tolist() == [[0, 0, 0], [1, 2, 1], [4, 0, 1]]
    assert group1.a2.tolist() == [[3, 4, 5], [5, 3, 6], [5, 6, 6]]
    assert plan.antenna_ids[:, 6].tolist() == [-1, -1, -1]


def test_group_that_divides_evenly_gets_no_ghosts_and_no_ghost_antennas():
    a1, a2 = np.triu_indices(5, 1)  # 10 rows on 2 devices: 5 each
    groups = np.array([7, 7, 9, 9, 9, 9, 7, 9, 7, 9])  # 2 and 3 of each group per device
    plan = plan_shards(a1, a2, 5, 2, groups)
    assert plan.n_ghost == 0
    assert [g.padded for g in plan.groups] == [2, 3]
    assert all(np.all(g.rows >= 0) for g in plan.groups)
    assert_shard_plan_invariants(plan, a1, a2, 5, 2, groups)


def test_only_the_uneven_group_is_padded():
    a1, a2 = np.triu_indices(5, 1)
    groups = np.array([1, 1, 2, 2, 3, 1, 1, 2, 2, 2])  # group 1 even, 2 and 3 uneven
    plan = plan_shards(a1, a2, 5, 2, groups)
    even, uneven2, uneven3 = plan.groups
    assert np.all(even.rows >= 0)
    assert uneven2.n_padding.tolist() == [1, 0]
    assert uneven3.n_padding.tolist() == [0, 1]
    assert plan.n_ghost == 1


def test_indivisible_total_pads_the_short_last_block_to_the_spare_row():
    a1, a2 = np.triu_indices(5, 1)  # 10 rows, 4 devices: 3, 3, 3, 1
    plan = plan_shards(a1, a2, 5, 4)
    (group,) = plan.groups
    assert group.padded == 3
    assert group.n_real.tolist() == [3, 3, 3, 1]
    assert group.positions[3].tolist() == [0, 3, 3]
    assert group.rows[3].tolist() == [9, -1, -1]
    assert_shard_plan_invariants(plan, a1, a2, 5, 4)


def test_more_devices_than_rows_pads_the_empty_devices():
    plan = plan_shards([0, 0, 1], [1, 2, 2], 3, 5)
    (group,) = plan.groups
    assert group.n_real.tolist() == [1, 1, 1, 0, 0]
    assert group.rows[3:].tolist() == [[-1], [-1]]
    assert plan.n_ghost == 1


def test_one_device_has_no_padding_and_no_ghosts():
    a1, a2 = np.triu_indices(8, 1)
    groups = np.arange(a1.size) % 3
    plan = plan_shards(a1, a2, 8, 1, groups)
    assert plan.n_ghost == 0
    assert [g.padded for g in plan.groups] == [10, 9, 9]


def test_padding_spread_over_groups_needs_more_ghost_pairs_than_any_one_group():
    # Two antennas, four rows in four groups on two devices: each device pads the two groups it
    # lacks, so it needs two ghost pairs in all, one per group.
    plan = plan_shards([0, 0, 1, 1], [0, 1, 0, 1], 2, 2, [0, 1, 2, 3])
    assert plan.n_ghost == 1
    device0 = {(g.a1[0, 0], g.a2[0, 0]) for g in plan.groups[2:]}
    assert device0 == {(0, 2), (1, 2)}


def test_ghost_ghost_pairs_are_used_once_real_ghost_pairs_run_out():
    # Two antennas, four rows in four groups, one row per device: each device pads the three
    # groups it lacks, and one ghost (id 2) gives exactly three fresh pairs, the last (2, 2).
    a1, a2, groups = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([0, 1, 2, 3])
    plan = plan_shards(a1, a2, 2, 4, groups)
    assert plan.n_ghost == 1
    for d in range(4):
        padded = {(int(g.a1[d, 0]), int(g.a2[d, 0])) for g in plan.groups if g.rows[d, 0] < 0}
        assert padded == {(0, 2), (1, 2), (2, 2)}
    assert_shard_plan_invariants(plan, a1, a2, 2, 4, groups)


def test_plan_arrays_have_device_facing_dtypes_and_are_read_only():
    plan = plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, EXAMPLE_GROUPS)
    group = plan.groups[0]
    assert group.a1.dtype == group.a2.dtype == group.positions.dtype == np.int32
    assert group.rows.dtype == np.int64
    with pytest.raises(ValueError):
        group.positions[0, 0] = 0


def test_summary_names_blocks_ghosts_and_padding():
    text = plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, EXAMPLE_GROUPS).summary()
    assert "block size B = 5" in text
    assert "1 ghost" in text
    assert "rows computed per device: 7 for 5 owned" in text


@PROPERTY
@given(graph=baseline_graphs(), n_dev=st.integers(1, 16), data=st.data())
def test_every_invariant_holds_on_random_graphs(graph, n_dev, data):
    a1, a2, n_ant = graph
    groups = data.draw(st.none() | group_labels(len(a1)))
    plan = plan_shards(a1, a2, n_ant, n_dev, groups)
    assert_shard_plan_invariants(plan, a1, a2, n_ant, n_dev, groups)
    plan.validate()


@settings(max_examples=25, deadline=None)
@given(n_ant=st.integers(2, 30), n_dev=st.integers(1, 16), n_groups=st.integers(1, 5))
def test_divisible_totals_with_round_robin_groups_need_no_ghosts(n_ant, n_dev, n_groups):
    # Rows are cut to a multiple of n_dev * n_groups and labelled round robin, so every group
    # has the same count on every device.
    a1, a2 = np.triu_indices(n_ant, 0)
    keep = (a1.size // (n_dev * n_groups)) * n_dev * n_groups
    a1, a2 = a1[:keep], a2[:keep]
    groups = np.arange(keep) % n_groups
    plan = plan_shards(a1, a2, n_ant, n_dev, groups)
    assert plan.n_ghost == 0
    assert all(np.all(g.rows >= 0) for g in plan.groups)
    assert_shard_plan_invariants(plan, a1, a2, n_ant, n_dev, groups)
