import itertools

import numpy as np
import pytest

from tabascal_partition import ghost_pair_capacity, ghosts_needed
from tabascal_partition._ghosts import ghost_pairs


@pytest.mark.parametrize(("n_ant", "n_ghost"), [(0, 3), (1, 1), (3, 2), (5, 4), (7, 1)])
def test_ghost_pairs_enumerate_every_pair_with_a_ghost_exactly_once(n_ant, n_ghost):
    total = n_ant + n_ghost
    expected = {
        (p, q) for p, q in itertools.combinations_with_replacement(range(total), 2) if q >= n_ant
    }
    assert ghost_pair_capacity(n_ant, n_ghost) == len(expected)
    a1, a2 = ghost_pairs(n_ant, n_ghost, np.arange(len(expected)))
    got = [(min(p, q), max(p, q)) for p, q in zip(a1.tolist(), a2.tolist(), strict=True)]
    assert len(set(got)) == len(got)
    assert set(got) == expected


def test_first_ghost_pairs_with_every_real_antenna_first():
    a1, a2 = ghost_pairs(4, 2, np.arange(6))
    assert a1.tolist() == [0, 1, 2, 3, 0, 1]
    assert a2.tolist() == [4, 4, 4, 4, 5, 5]


def test_ghost_pairs_refuse_numbers_past_the_capacity():
    with pytest.raises(ValueError, match="more than 1 ghosts"):
        ghost_pairs(3, 1, np.array([4]))


@pytest.mark.parametrize("n_ant", [0, 1, 2, 5, 512])
def test_ghosts_needed_is_the_fewest_that_suffice(n_ant):
    for n_pairs in [0, 1, 2, 3, n_ant, n_ant + 1, 3 * n_ant + 7, 20000]:
        n_ghost = ghosts_needed(n_ant, n_pairs)

        # Count pairs of the enlarged set that involve a ghost, independently of the formula.
        def fresh(g):
            return (n_ant + g) * (n_ant + g + 1) // 2 - n_ant * (n_ant + 1) // 2

        assert fresh(n_ghost) >= n_pairs
        assert n_ghost == 0 or fresh(n_ghost - 1) < n_pairs
