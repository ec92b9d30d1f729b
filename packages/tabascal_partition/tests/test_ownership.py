import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tabascal_partition import ownership


@given(st.integers(0, 5000), st.integers(1, 40))
def test_blocks_are_contiguous_ceil_sized_and_cover_every_row_once(n_bl, n_dev):
    blocks = ownership(n_bl, n_dev)
    block = -(-n_bl // n_dev)
    assert blocks.block_size == block
    owner = np.concatenate([np.full(c, d) for d, c in enumerate(blocks.counts)])
    assert owner.shape == (n_bl,)
    # Rows are never reordered: device d owns rows [d*B, (d+1)*B), trimmed at the end.
    assert np.array_equal(owner, np.arange(n_bl) // max(block, 1))
    assert np.all(blocks.counts <= block)
    assert np.array_equal(blocks.start[1:], blocks.stop[:-1])


def test_indivisible_total_trims_the_last_block():
    blocks = ownership(10, 4)
    assert blocks.block_size == 3
    assert blocks.counts.tolist() == [3, 3, 3, 1]


def test_devices_past_the_end_own_nothing():
    blocks = ownership(3, 5)
    assert blocks.block_size == 1
    assert blocks.counts.tolist() == [1, 1, 1, 0, 0]
    assert blocks.start.tolist() == [0, 1, 2, 3, 3]


def test_arrays_are_read_only():
    with pytest.raises(ValueError):
        ownership(10, 2).start[0] = 5


@pytest.mark.parametrize(("n_bl", "n_dev"), [(10, 0), (-1, 2)])
def test_bad_sizes_are_refused(n_bl, n_dev):
    with pytest.raises(ValueError, match=">= "):
        ownership(n_bl, n_dev)
