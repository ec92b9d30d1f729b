import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from partition_checks import (
    assert_shard_plan_invariants,
    baseline_graphs,
    expected_blocks,
    group_labels,
)

from tabascal_partition import (
    InvalidPlanError,
    antenna_reuse_plan,
    plan_shards,
    spread_order,
)

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The worked example of test_shard_plan: 15 rows on 3 devices (B = 5) in two groups of 9 and 6.
# In the data's order the groups have 2, 3, 4 and 3, 2, 1 rows on the devices.
EXAMPLE_A1, EXAMPLE_A2 = np.triu_indices(6, 1)
EXAMPLE_GROUPS = np.array([0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1])


def test_worked_example_gives_every_device_three_and_two():
    # By hand: group 0's rows 0 1 5 6 7 10 11 12 13 sit at (r + 1/2) / 9, group 1's rows 2 3 4 8
    # 9 14 at (r + 1/2) / 6; in order of position the first five are rows 0 2 1 3 5, the next
    # five 6 4 7 8 10 and the last 11 9 12 14 13.
    order = spread_order(EXAMPLE_GROUPS, 3)
    assert order.tolist() == [0, 1, 2, 3, 5, 4, 6, 7, 8, 10, 9, 11, 12, 13, 14]
    plan = plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, EXAMPLE_GROUPS, order=order)
    assert [group.n_real.tolist() for group in plan.groups] == [[3, 3, 3], [2, 2, 2]]
    assert plan.n_ghost == 0  # the data's order needs one ghost antenna (test_shard_plan)
    assert_shard_plan_invariants(plan, EXAMPLE_A1, EXAMPLE_A2, 6, 3, EXAMPLE_GROUPS, order=order)
    plan.validate()


@pytest.mark.parametrize("n_dev", [1, 2, 5])
def test_one_group_or_one_device_keeps_the_data_order(n_dev):
    assert spread_order(np.full(11, 4), n_dev).tolist() == list(range(11))
    assert spread_order(EXAMPLE_GROUPS, 1).tolist() == list(range(15))


@PROPERTY
@given(n_bl=st.integers(0, 300), n_dev=st.integers(1, 12), data=st.data())
def test_each_block_holds_its_share_of_every_group(n_bl, n_dev, data):
    groups = data.draw(group_labels(n_bl)) if n_bl else np.zeros(0, np.int64)
    if data.draw(st.booleans()):  # the data's order gathers each group, the hardest case
        groups = np.sort(groups)
    order = spread_order(groups, n_dev)
    assert sorted(order.tolist()) == list(range(n_bl))
    _, starts, stops = expected_blocks(n_bl, n_dev)
    for start, stop in zip(starts, stops, strict=True):
        block = order[start:stop]
        assert np.all(np.diff(block) > 0)  # each block in the data's order
        for label in np.unique(groups):
            size = np.count_nonzero(groups == label)
            share = size * (stop - start) / n_bl
            # The bound of spread_order's docstring; 1.5 at most measured over 3,300 random
            # cases (up to 60 groups, 32 devices, 20,000 rows).
            assert abs(np.count_nonzero(groups[block] == label) - share) < 2


@PROPERTY
@given(graph=baseline_graphs(), n_dev=st.integers(1, 16), data=st.data())
def test_a_plan_in_the_spread_order_keeps_every_invariant(graph, n_dev, data):
    a1, a2, n_ant = graph
    groups = data.draw(group_labels(len(a1)))
    order = spread_order(groups, n_dev)
    plan = plan_shards(a1, a2, n_ant, n_dev, groups, order=order)
    assert_shard_plan_invariants(plan, a1, a2, n_ant, n_dev, groups, order=order)
    plan.validate()


def test_a_sorted_group_pads_less_in_the_spread_order():
    # 40 rows of 2 groups sorted by label on 4 devices: in the data's order group 1 (the last 16
    # rows) lies on 2 devices and is padded to 10 on each; spread, 4 rows of it on each.
    a1, a2 = np.triu_indices(9, 1)
    a1, a2 = a1[:32], a2[:32]
    groups = np.repeat([0, 1], [16, 16])
    plain = plan_shards(a1, a2, 9, 4, groups)
    spread = plan_shards(a1, a2, 9, 4, groups, order=spread_order(groups, 4))
    assert [group.padded for group in plain.groups] == [8, 8]
    assert [group.padded for group in spread.groups] == [4, 4]
    assert spread.n_ghost == 0


def test_bad_orders_are_refused():
    with pytest.raises(ValueError, match=r"each of the 15 rows exactly once.*misses rows \[14\]"):
        plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, order=np.r_[np.arange(14), 0])
    with pytest.raises(ValueError, match=r"it has 14 entries"):
        plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, order=np.arange(14))
    with pytest.raises(TypeError, match="order has dtype float64"):
        plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, order=np.arange(15.0))
    reuse = antenna_reuse_plan(EXAMPLE_A1, EXAMPLE_A2, 6, 3)
    with pytest.raises(ValueError, match="either reuse or order, not both"):
        plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, reuse=reuse, order=np.arange(15))
    with pytest.raises(ValueError, match="groups must be 1-D"):
        spread_order(EXAMPLE_GROUPS[None], 3)
    with pytest.raises(ValueError, match="n_dev must be >= 1"):
        spread_order(EXAMPLE_GROUPS, 0)


def test_validate_finds_a_broken_order():
    order = spread_order(EXAMPLE_GROUPS, 3)
    plan = plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, EXAMPLE_GROUPS, order=order)
    broken = dataclasses.replace(plan, order=np.r_[order[:-1], order[0]])
    with pytest.raises(InvalidPlanError, match="order is not a permutation"):
        broken.validate()
    reuse = antenna_reuse_plan(EXAMPLE_A1, EXAMPLE_A2, 6, 3)
    packed = plan_shards(EXAMPLE_A1, EXAMPLE_A2, 6, 3, reuse=reuse)
    with pytest.raises(InvalidPlanError, match="order is not the reuse plan's"):
        dataclasses.replace(packed, order=np.arange(15)).validate()
