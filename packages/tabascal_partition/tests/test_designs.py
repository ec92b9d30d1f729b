import itertools
from fractions import Fraction

import numpy as np
import pytest

from tabascal_partition import antenna_reuse_plan, designs_for
from tabascal_partition._designs import cyclic_design, difference_cover, hub_design, pairs_design


@pytest.mark.parametrize("n_dev", range(1, 25))
def test_every_design_covers_every_pair_of_parts_and_uses_every_device(n_dev):
    for design in designs_for(n_dev):
        assert design.n_dev == n_dev
        assert sum(design.weights) == 1
        assert all(w > 0 for w in design.weights)
        for first, second in itertools.combinations_with_replacement(design.holders, 2):
            assert set(first) & set(second), f"{design.name}: two parts share no device"
        assert set().union(*design.holders) == set(range(n_dev))


@pytest.mark.parametrize("n_dev", range(2, 61))
def test_difference_cover_covers_every_residue_with_the_fewest_elements(n_dev):
    cover = difference_cover(n_dev)
    assert {(a - b) % n_dev for a in cover for b in cover} == set(range(n_dev))
    # s elements give at most s(s-1) nonzero differences, and these sizes reach that bound.
    if n_dev <= 16:
        assert len(cover) == min(s for s in range(1, n_dev + 1) if s * (s - 1) >= n_dev - 1)


def test_constructions_have_their_textbook_widths():
    assert hub_design().width_fraction == Fraction(3, 5)
    assert pairs_design(3).width_fraction == Fraction(2, 3)
    assert pairs_design(4).width_fraction == Fraction(1, 2)
    assert cyclic_design(7).width_fraction == Fraction(3, 7)
    assert cyclic_design(13).width_fraction == Fraction(4, 13)
    assert "Fano" in cyclic_design(7).name


@pytest.mark.parametrize("n_dev", [5, 8, 9])
def test_searched_designs_beat_the_cyclic_cover_and_balance_on_512_antennas(n_dev):
    searched = [d for d in designs_for(n_dev) if d.name.startswith("searched")]
    assert len(searched) == 1
    assert searched[0].width_fraction < cyclic_design(n_dev).width_fraction
    a1, a2 = np.triu_indices(512, 1)
    plan = antenna_reuse_plan(a1, a2, 512, n_dev)
    assert plan.design == searched[0].name
    # Balanced within the design: no wider than its shares allow, rounded per part.
    n_parts = len(searched[0].holders)
    assert plan.width <= searched[0].width_fraction * 512 + n_parts
