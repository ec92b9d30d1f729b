import dataclasses

import numpy as np
import pytest

from tabascal_partition import InvalidPlanError, antenna_reuse_plan, plan_shards

A1, A2 = (x.astype(np.int64) for x in np.triu_indices(6, 1))
GROUPS = np.array([0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1])


@pytest.mark.parametrize("planner", [plan_shards, antenna_reuse_plan])
@pytest.mark.parametrize(
    ("a1", "a2", "n_ant", "n_dev", "error", "message"),
    [
        ([0, 1, 2], [1, 2], 3, 2, ValueError, r"a1 has 3 rows but a2 has 2; pass exactly one"),
        ([0, -1, 2], [1, 2, 0], 3, 2, ValueError, r"negative antenna id in a1 at rows \[1\]"),
        ([0, 1], [1, 5], 3, 2, ValueError, r"a2 >= n_ant=3 at rows \[1\].*pass n_ant >= 6"),
        ([0, 1, 0], [1, 2, 1], 3, 2, ValueError, r"\(0, 1\) appears 2 times \(rows \[0, 2\]\)"),
        ([0.0, 1.0], [1, 2], 3, 2, TypeError, r"a1 has dtype float64; it must hold integers"),
        ([True, False], [1, 2], 3, 2, TypeError, r"a1 has dtype bool"),
        ([[0, 1]], [[1, 2]], 3, 2, ValueError, r"a1 must be 1-D"),
        ([0, 1], [1, 2], 3, 0, ValueError, r"n_dev must be >= 1, got 0"),
        ([0, 1], [1, 2], 3, 2.0, TypeError, r"n_dev must be an integer"),
        ([0, 1], [1, 2], -1, 2, ValueError, r"n_ant must be >= 0"),
    ],
)
def test_bad_input_gets_an_error_naming_rows_and_the_fix(
    planner, a1, a2, n_ant, n_dev, error, message
):
    with pytest.raises(error, match=message):
        planner(a1, a2, n_ant, n_dev)


def test_many_bad_rows_are_summarised():
    a1 = np.arange(10)
    with pytest.raises(ValueError, match=r"rows \[4, 5, 6, 7, 8, ... 1 more\]"):
        plan_shards(a1, a1, 4, 2)


def test_reversed_pair_is_not_a_repeat():
    plan_shards([3, 7], [7, 3], 8, 2).validate()


@pytest.mark.parametrize("planner", [plan_shards, antenna_reuse_plan])
def test_group_labels_must_match_the_rows(planner):
    with pytest.raises(ValueError, match="groups has 2 labels but there are 15 baseline rows"):
        planner(A1, A2, 6, 3, [0, 1])
    with pytest.raises(TypeError, match="groups has dtype float64"):
        planner(A1, A2, 6, 3, GROUPS.astype(float))


def test_reuse_plan_for_other_baselines_is_refused():
    reuse = antenna_reuse_plan(A1, A2, 6, 3)
    with pytest.raises(ValueError, match=r"is for \(n_bl, n_ant, n_dev\) = \(15, 6, 3\)"):
        plan_shards(A1, A2, 6, 2, reuse=reuse)
    swapped = A2.copy(), A1.copy()
    with pytest.raises(ValueError, match="reuse plan's a1 differs from the baselines"):
        plan_shards(*swapped, 6, 3, reuse=reuse)


def _replace_array(obj, name, change):
    array = np.array(getattr(obj, name))
    change(array)
    return dataclasses.replace(obj, **{name: array})


def _replace_group(plan, index, name, change):
    groups = list(plan.groups)
    groups[index] = _replace_array(groups[index], name, change)
    return dataclasses.replace(plan, groups=tuple(groups))


def _copy_entry(plan, group, source, target):
    """Make entry ``target`` of a group a copy of entry ``source`` in every array."""
    for name in ("rows", "positions", "a1", "a2"):
        value = getattr(plan.groups[group], name)[source]
        plan = _replace_group(plan, group, name, _set(target, value))
    return plan


def _set(index, value):
    def change(array):
        array[index] = value

    return change


# Each corruption breaks one invariant of the worked example's plan (see test_shard_plan.py),
# with the message validate() should give: group 0 has real rows [[0, 1], [5, 6, 7],
# [10, 11, 12, 13]], and devices 0 and 1 pad it with ghost pairs.
CORRUPTIONS = {
    "row computed twice, another never": (
        lambda p: _copy_entry(p, 0, (2, 0), (2, 1)),
        r"row \[10\] is computed \[2\] times, not once",
    ),
    "row of another device": (
        lambda p: _replace_group(p, 0, "rows", _set((0, 1), 5)),
        "a device computes a row it does not own",
    ),
    "real entry after padding": (
        lambda p: _replace_group(p, 0, "rows", _set((0, 2), 2)),
        "real entries are not first",
    ),
    "real position off by one": (
        lambda p: _replace_group(p, 0, "positions", _set((1, 0), 1)),
        "a real position is wrong",
    ),
    "padding not in the spare row": (
        lambda p: _replace_group(p, 0, "positions", _set((0, 3), 4)),
        "padding misses the spare row",
    ),
    "position past the spare row": (
        lambda p: _replace_group(p, 0, "positions", _set((0, 3), 6)),
        "padding misses the spare row",
    ),
    "real endpoint wrong": (
        lambda p: _replace_group(p, 0, "a2", _set((1, 0), 3)),
        "a real a2 is not the row's antenna",
    ),
    "real endpoint reversed": (
        lambda p: _replace_group(
            _replace_group(p, 0, "a1", _set((1, 0), 2)), 0, "a2", _set((1, 0), 1)
        ),
        "a real a1 is not the row's antenna",
    ),
    "ghost pair without a ghost": (
        lambda p: _replace_group(p, 0, "a2", _set((0, 2), 5)),
        "a padded pair has no ghost",
    ),
    "ghost pair repeated across groups": (
        lambda p: _replace_group(p, 1, "a1", _set((1, 2), 0)),
        r"device \[1\] computes an \(a1, a2\) pair twice",
    ),
    "padded count not the maximum": (
        lambda p: _replace_group(p, 1, "n_real", _set(2, 2)),
        "real entries are not first",
    ),
    "more ghosts than needed": (
        lambda p: dataclasses.replace(
            p, n_ghost=2, n_ant_total=8, antenna_ids=np.c_[p.antenna_ids, [-1, -1, -1]]
        ),
        "2 ghosts are not the fewest for 2 padded rows",
    ),
    "ghost maps to a real antenna": (
        lambda p: _replace_array(p, "antenna_ids", _set((0, 6), 3)),
        "a ghost antenna maps to a real antenna",
    ),
    "wrong block size": (
        lambda p: dataclasses.replace(p, block_size=6),
        r"block size 6 is not ceil\(n_bl / n_dev\)",
    ),
    "rows whose group has no plan": (
        lambda p: dataclasses.replace(
            p, groups=(p.groups[0], dataclasses.replace(p.groups[1], label=2))
        ),
        "a row's group has no plan",
    ),
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_validate_catches_a_corrupted_shard_plan(name):
    plan = plan_shards(A1, A2, 6, 3, GROUPS)
    plan.validate()
    corrupt, message = CORRUPTIONS[name]
    with pytest.raises(InvalidPlanError, match=message):
        corrupt(plan).validate()


def _reverse_first_row(array):
    array[0] = array[0, ::-1]


def _shift_one_row(array):
    array[:2] += [1, -1]


REUSE_CORRUPTIONS = {
    "order not a permutation": (
        lambda r: _replace_array(r, "order", _set(0, 1)),
        "order is not a permutation",
    ),
    "inverse wrong": (
        lambda r: _replace_array(r, "inverse", lambda a: a.__setitem__(slice(None), a[::-1])),
        "inverse does not undo order",
    ),
    "local endpoint wrong": (
        lambda r: _replace_array(r, "local_a1", _set(0, 3)),
        r"a1 of packed row \[0\] does not map back",
    ),
    "antennas not sorted": (
        lambda r: _replace_array(r, "antennas", _reverse_first_row),
        "not strictly increasing",
    ),
    "width below its bound": (
        lambda r: dataclasses.replace(r, lower_bound=r.width + 1),
        "< lower bound",
    ),
    "counts not the blocks": (
        lambda r: _replace_array(r, "counts", _shift_one_row),
        "are not the ownership blocks",
    ),
}


@pytest.mark.parametrize("name", REUSE_CORRUPTIONS)
def test_validate_catches_a_corrupted_reuse_plan(name):
    reuse = antenna_reuse_plan(A1, A2, 6, 3)
    reuse.validate(A1, A2)
    corrupt, message = REUSE_CORRUPTIONS[name]
    with pytest.raises(InvalidPlanError, match=message):
        corrupt(reuse).validate(A1, A2)
