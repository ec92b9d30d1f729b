"""make_indices and stack_indices: validation on the host and index-array contracts."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ri_kernels import BaselineIndices, make_indices, stack_indices


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
