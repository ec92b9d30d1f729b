import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from partition_checks import (
    assert_reuse_plan_invariants,
    assert_shard_plan_invariants,
    baseline_graphs,
    contiguous_width,
    group_labels,
)

from tabascal_partition import antenna_reuse_plan, plan_shards
from tabascal_partition._demo import demo_baselines

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def complete_graph(n):
    a1, a2 = np.triu_indices(n, 1)
    return a1.astype(np.int64), a2.astype(np.int64)


def ceil_div(a, b):
    return -(-a // b)


def test_four_devices_on_512_antennas_need_308_each_with_32704_baselines():
    a1, a2 = complete_graph(512)
    plan = antenna_reuse_plan(a1, a2, 512, 4)
    assert plan.width == 308
    assert plan.lower_bound == 308
    assert plan.counts.tolist() == [32704] * 4
    assert_reuse_plan_invariants(plan, a1, a2, 512, 4)


@pytest.mark.parametrize("n", [34, 35, 40, 47, 63, 64, 65, 100, 101, 137, 199, 256, 333])
def test_four_devices_attain_ceil_three_fifths_n(n):
    a1, a2 = complete_graph(n)
    plan = antenna_reuse_plan(a1, a2, n, 4)
    assert plan.width == ceil_div(3 * n, 5) == plan.lower_bound


@pytest.mark.parametrize(
    ("n_dev", "expected"),
    [
        (3, ceil_div(2 * 512, 3)),  # pairs of 3 parts: 2n/3
        (6, 512 // 2),  # 4 parts taken two at a time: n/2
        (7, ceil_div(3 * 512, 7)),  # Fano-plane lines: 3n/7
        (13, ceil_div(4 * 512, 13)),  # projective plane of order 3: 4n/13
    ],
)
def test_named_constructions_attain_their_width_and_the_lower_bound(n_dev, expected):
    a1, a2 = complete_graph(512)
    plan = antenna_reuse_plan(a1, a2, 512, n_dev)
    assert plan.width == expected == plan.lower_bound
    assert plan.counts.max() - plan.counts.min() <= n_dev


def test_two_devices_cannot_beat_every_antenna_on_one_device():
    a1, a2 = complete_graph(64)
    plan = antenna_reuse_plan(a1, a2, 64, 2)
    assert plan.width == plan.lower_bound == 64


@pytest.mark.parametrize("n_dev", range(3, 17))
def test_every_device_count_beats_contiguous_ownership_on_512_antennas(n_dev):
    a1, a2 = complete_graph(512)
    plan = antenna_reuse_plan(a1, a2, 512, n_dev)
    assert plan.contiguous_width == contiguous_width(a1, a2, n_dev) == 512
    # Three devices are the widest case (2n/3); every other count does better.
    assert plan.lower_bound <= plan.width <= ceil_div(2 * 512, 3) < 512
    assert_reuse_plan_invariants(plan, a1, a2, 512, n_dev)


def incomplete_graph(n, seed):
    """A fifth of the cross pairs missing, autocorrelations, a third reversed, rows shuffled."""
    rng = np.random.default_rng(seed)
    a1, a2 = np.triu_indices(n, 0)
    keep = (a1 == a2) | (rng.random(a1.size) >= 0.2)
    a1, a2 = a1[keep], a2[keep]
    flip = rng.random(a1.size) < 1 / 3
    a1, a2 = np.where(flip, a2, a1), np.where(flip, a1, a2)
    order = rng.permutation(a1.size)
    return a1[order].astype(np.int64), a2[order].astype(np.int64)


@pytest.mark.parametrize("n_dev", [4, 7, 8, 16])
def test_incomplete_graph_is_balanced_within_one_percent_and_narrower(n_dev):
    a1, a2 = incomplete_graph(256, n_dev)
    plan = antenna_reuse_plan(a1, a2, 256, n_dev)
    counts = plan.counts
    assert (counts.max() - counts.min()) <= 0.01 * counts.mean()
    assert plan.width < plan.contiguous_width
    assert_reuse_plan_invariants(plan, a1, a2, 256, n_dev)


def test_device_of_each_baseline_does_not_depend_on_the_row_order():
    a1, a2 = incomplete_graph(96, 1)
    shuffle = np.random.default_rng(2).permutation(a1.size)
    first = antenna_reuse_plan(a1, a2, 96, 5)
    second = antenna_reuse_plan(a1[shuffle], a2[shuffle], 96, 5)
    device_first = np.repeat(np.arange(5), first.counts)[first.inverse]
    device_second = np.repeat(np.arange(5), second.counts)[second.inverse]
    assert np.array_equal(device_first[shuffle], device_second)


@pytest.mark.parametrize(("n_dev", "n_groups"), [(4, 3), (8, 5), (16, 2)])
def test_each_length_group_is_spread_evenly_over_the_devices(n_dev, n_groups):
    a1, a2, groups = demo_baselines(256, n_groups, seed=3)
    plan = antenna_reuse_plan(a1, a2, 256, n_dev, groups)
    device = np.repeat(np.arange(n_dev), plan.counts)
    for label in range(n_groups):
        per_device = np.bincount(device[groups[plan.order] == label], minlength=n_dev)
        fair = (groups == label).sum() / n_dev
        assert per_device.max() <= 1.01 * fair + 1


def test_shard_plan_on_the_packed_order_uses_compact_antenna_numbers():
    a1, a2, groups = demo_baselines(40, 3, seed=1)
    reuse = antenna_reuse_plan(a1, a2, 40, 4, groups)
    plan = plan_shards(a1, a2, 40, 4, groups, reuse=reuse)
    assert plan.n_ant_total == reuse.width + plan.n_ghost
    assert plan.reuse is reuse
    assert np.array_equal(plan.row_a1, a1[reuse.order])
    assert np.array_equal(plan.antenna_ids[:, : reuse.width], reuse.antennas)
    assert_shard_plan_invariants(plan, a1, a2, 40, 4, groups, reuse)
    plan.validate()


@PROPERTY
@given(graph=baseline_graphs(), n_dev=st.integers(1, 16), data=st.data())
def test_reuse_and_packed_shard_plans_keep_every_invariant_on_random_graphs(graph, n_dev, data):
    a1, a2, n_ant = graph
    groups = data.draw(st.none() | group_labels(len(a1)))
    reuse = antenna_reuse_plan(a1, a2, n_ant, n_dev, groups)
    assert_reuse_plan_invariants(reuse, a1, a2, n_ant, n_dev)
    reuse.validate(a1, a2)
    plan = plan_shards(a1, a2, n_ant, n_dev, groups, reuse=reuse)
    assert_shard_plan_invariants(plan, a1, a2, n_ant, n_dev, groups, reuse)
    plan.validate()
