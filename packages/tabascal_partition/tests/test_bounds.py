import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tabascal_partition import antenna_reuse_plan, covering_fraction


def brute_force_width(a1, a2, n_ant, n_dev):
    """Smallest width over every assignment of rows to devices with the ownership counts."""
    n_bl = len(a1)
    block = -(-n_bl // n_dev)
    counts = [max(0, min(block, n_bl - d * block)) for d in range(n_dev)]
    assignment = np.array(list(itertools.product(range(n_dev), repeat=n_bl)), np.int8)
    per_device = np.stack([(assignment == d).sum(axis=1) for d in range(n_dev)], axis=1)
    assignment = assignment[np.all(per_device == counts, axis=1)]
    incidence = np.zeros((n_bl, n_ant), np.int64)
    incidence[np.arange(n_bl), a1] = 1
    incidence[np.arange(n_bl), a2] = 1
    widths = np.stack(
        [(((assignment == d).astype(np.int64) @ incidence) > 0).sum(axis=1) for d in range(n_dev)],
        axis=1,
    )
    return int(widths.max(axis=1).min())


@pytest.mark.parametrize(("n", "n_dev"), [(4, 2), (4, 3), (4, 4), (5, 2), (5, 3), (5, 4)])
def test_lower_bound_never_exceeds_the_best_width_on_complete_graphs(n, n_dev):
    a1, a2 = (x.astype(np.int64) for x in np.triu_indices(n, 1))
    best = brute_force_width(a1, a2, n, n_dev)
    plan = antenna_reuse_plan(a1, a2, n, n_dev)
    assert plan.lower_bound <= best <= plan.width


@settings(max_examples=25, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=9, unique=True
    ),
    n_dev=st.integers(1, 3),
)
def test_lower_bound_never_exceeds_the_best_width_on_small_graphs(pairs, n_dev):
    a1, a2 = (np.array(x, np.int64) for x in zip(*pairs, strict=True))
    best = brute_force_width(a1, a2, 5, n_dev)
    plan = antenna_reuse_plan(a1, a2, 5, n_dev)
    assert plan.lower_bound <= best <= plan.width


@pytest.mark.parametrize(
    ("n_dev", "fraction"),
    [
        (1, Fraction(1)),
        (2, Fraction(1)),  # one device must hold every antenna
        (3, Fraction(2, 3)),
        (4, Fraction(3, 5)),  # the finer 4-device argument
        (6, Fraction(1, 2)),
        (7, Fraction(3, 7)),
        (12, Fraction(1, 3)),
        (13, Fraction(4, 13)),
        (16, Fraction(1, 4)),
    ],
)
def test_covering_fraction_matches_the_derivation(n_dev, fraction):
    assert covering_fraction(n_dev) == fraction


def test_missing_pair_drops_the_covering_bound_to_the_counting_bound():
    a1, a2 = (x.astype(np.int64) for x in np.triu_indices(40, 1))
    complete = antenna_reuse_plan(a1, a2, 40, 4)
    assert complete.lower_bound == 24  # ceil(3 * 40 / 5)
    incomplete = antenna_reuse_plan(a1[1:], a2[1:], 40, 4)
    # 779 rows: some device holds 195, and 20 antennas carry only 190 pairs.
    assert incomplete.lower_bound == 21
