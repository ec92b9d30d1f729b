"""make_indices, make_index_sets and stack_indices: validation on the host and index-array
contracts."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ri_kernels import BaselineIndices, make_index_sets, make_indices, stack_indices


@st.composite
def _pair_lists(draw):
    """(n_ant, a1, a2): a random list of distinct antenna pairs, reversed pairs and
    autocorrelations included."""
    n_ant = draw(st.integers(1, 12))
    pairs = [(p, q) for p in range(n_ant) for q in range(n_ant)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs)))
    a1 = np.array([p for p, _ in chosen], np.int64)
    a2 = np.array([q for _, q in chosen], np.int64)
    return n_ant, a1, a2


@settings(max_examples=60, deadline=None)
@given(_pair_lists())
def test_index_arrays_recover_every_pair_and_shapes_depend_only_on_counts(case):
    n_ant, a1, a2 = case
    idx = make_indices(n_ant, a1, a2)
    n_bl = a1.size
    expected = {
        "a1": n_bl,
        "a2": n_bl,
        "ant": min(2 * n_bl, n_ant),
        "row": min(n_bl, n_ant),
        "col": min(n_bl, n_ant),
        "bl_row": n_bl,
        "bl_col": n_bl,
    }
    for name, size in expected.items():
        leaf = getattr(idx, name)
        assert leaf.shape == (size,) and leaf.dtype == np.int32, name
    # Following row/col back through ant must give each baseline's own antennas.
    np.testing.assert_array_equal(idx.ant[idx.row[idx.bl_row]], a1)
    np.testing.assert_array_equal(idx.ant[idx.col[idx.bl_col]], a2)
    assert idx.n_ant == n_ant and idx.n_bl == n_bl


def test_reversed_pairs_and_autocorrelations_are_accepted():
    idx = make_indices(3, [0, 1, 2, 1], [1, 0, 2, 1])
    np.testing.assert_array_equal(idx.a1, [0, 1, 2, 1])
    np.testing.assert_array_equal(idx.a2, [1, 0, 2, 1])


def test_empty_list_is_valid():
    idx = make_indices(5, [], [])
    assert idx.n_bl == 0
    assert all(leaf.shape == (0,) for leaf in jax.tree.leaves(idx))


def test_repeated_pair_is_refused_naming_both_rows():
    a1 = np.arange(50) % 10
    a2 = (np.arange(50) * 7) % 13
    a1[40], a2[40] = a1[12], a2[12]
    with pytest.raises(ValueError, match=r"baseline \(2, 6\) appears twice \(rows 12 and 40\)"):
        make_indices(13, a1, a2)


def test_antenna_outside_range_is_refused_naming_the_row():
    with pytest.raises(ValueError, match=r"a2\[2\] = 4.*\[0, 4\)"):
        make_indices(4, [0, 1, 2], [1, 2, 4])
    with pytest.raises(ValueError, match=r"a1\[0\] = -1"):
        make_indices(4, [-1], [0])


def test_different_lengths_and_non_integer_dtypes_are_refused():
    with pytest.raises(ValueError, match="same length; got 2 and 3"):
        make_indices(4, [0, 1], [1, 2, 3])
    with pytest.raises(TypeError, match="a1 must hold integers; got dtype float64"):
        make_indices(4, np.array([0.0, 1.0]), [1, 2])
    with pytest.raises(ValueError, match="a2 must be 1-D"):
        make_indices(4, [0], [[1]])
    with pytest.raises(ValueError, match="n_ant must be >= 1"):
        make_indices(0, [], [])


def test_stacked_sets_split_back_into_each_device_set():
    sets = [make_indices(6, [0, 1, 2], [3, 4, 5]), make_indices(6, [5, 5, 0], [0, 1, 0])]
    stacked = stack_indices(sets)
    assert isinstance(stacked, BaselineIndices) and stacked.a1.shape == (2, 3)
    for d, one in enumerate(sets):
        local = jax.tree.map(lambda x, d=d: x[d], stacked)
        for mine, theirs in zip(jax.tree.leaves(local), jax.tree.leaves(one), strict=True):
            np.testing.assert_array_equal(mine, theirs)


def test_stacking_sets_of_different_lengths_is_refused():
    with pytest.raises(ValueError, match=r"entry 1 has \(n_ant, n_bl\) = \(6, 2\)"):
        stack_indices([make_indices(6, [0, 1, 2], [3, 4, 5]), make_indices(6, [0, 1], [1, 2])])


def test_index_sets_are_sized_to_the_widest_list_and_recover_every_pair():
    # Three blocks of 5 rows of the upper triangle of 8 antennas, as devices would own them.
    a1, a2 = (x.astype(np.int32) for x in np.triu_indices(8, 1))
    lists = [(a1[d * 5 : (d + 1) * 5], a2[d * 5 : (d + 1) * 5]) for d in range(3)]
    stacked = make_index_sets(8, lists)
    # Counted by hand: rows 0-4 touch a1 {0} and a2 {1..5}; rows 5-9 a1 {0, 1}, a2 {6, 7, 2,
    # 3, 4}; rows 10-14 a1 {1, 2}, a2 {5, 6, 7, 3, 4}. Touched: 6, 7 and 7 antennas.
    expected = {"a1": 5, "a2": 5, "ant": 7, "row": 2, "col": 5, "bl_row": 5, "bl_col": 5}
    for name, size in expected.items():
        assert getattr(stacked, name).shape == (3, size), name
    for d, (p, q) in enumerate(lists):
        local = jax.tree.map(lambda x, d=d: x[d], stacked)
        np.testing.assert_array_equal(local.ant[local.row[local.bl_row]], p)
        np.testing.assert_array_equal(local.ant[local.col[local.bl_col]], q)
    # make_indices sizes the same lists for any 5 baselines: 5 rows and 5 columns each.
    assert make_indices(8, *lists[0]).row.shape == (5,)


@settings(max_examples=40, deadline=None)
@given(_pair_lists(), st.integers(1, 4))
def test_index_sets_never_exceed_the_bounds_of_make_indices(case, n_sets):
    n_ant, a1, a2 = case
    n_bl = a1.size // n_sets
    lists = [(a1[d * n_bl : (d + 1) * n_bl], a2[d * n_bl : (d + 1) * n_bl]) for d in range(n_sets)]
    stacked = make_index_sets(n_ant, lists)
    bounds = make_indices(n_ant, *lists[0])
    for mine, bound in zip(jax.tree.leaves(stacked), jax.tree.leaves(bounds), strict=True):
        assert mine.shape[0] == n_sets and mine.shape[1] <= bound.shape[0]
    for d, (p, q) in enumerate(lists):
        local = jax.tree.map(lambda x, d=d: x[d], stacked)
        np.testing.assert_array_equal(local.ant[local.row[local.bl_row]], p)
        np.testing.assert_array_equal(local.ant[local.col[local.bl_col]], q)


def test_index_sets_refuse_bad_lists_naming_the_set():
    with pytest.raises(ValueError, match=r"make_index_sets: set 1: a2\[0\] = 9"):
        make_index_sets(4, [([0], [1]), ([0], [9])])
    with pytest.raises(ValueError, match=r"lengths \[1, 2\]"):
        make_index_sets(4, [([0], [1]), ([0, 1], [2, 3])])
    with pytest.raises(ValueError, match="at least one"):
        make_index_sets(4, [])
