"""Table builders: offsets, Lagrange stencils and monomial tables."""

import numpy as np
import pytest

from ri_kernels import fine_offsets, lagrange_stencils, monomial_stencils, stencil_starts


def test_fine_offsets_are_midpoints_of_equal_subcells():
    offsets = fine_offsets(0.2, 4)
    np.testing.assert_allclose(offsets, [-0.075, -0.025, 0.025, 0.075], rtol=0, atol=1e-15)
    assert fine_offsets(2.0, 1).tolist() == [0.0]


@pytest.mark.parametrize("n_cells, n_stencil", [(1, 1), (7, 1), (7, 2), (7, 3), (7, 4), (5, 5)])
def test_stencils_contain_their_cell_and_lie_inside_the_axis(n_cells, n_stencil):
    start = stencil_starts(n_cells, n_stencil)
    cells = np.arange(n_cells)
    assert np.all((start >= 0) & (start <= cells) & (cells < start + n_stencil))
    assert np.all(start + n_stencil <= n_cells)


@pytest.mark.parametrize("n_stencil", [1, 2, 3, 4, 5])
def test_lagrange_weights_reproduce_polynomials_up_to_their_degree(n_stencil):
    n_cells = 8
    offsets = fine_offsets(1.0, 6)
    weights, start = lagrange_stencils(n_cells, offsets, n_stencil)
    rng = np.random.default_rng(n_stencil)
    poly = rng.normal(size=n_stencil)  # degree n_stencil - 1 in the cell coordinate
    values = np.polynomial.polynomial.polyval(np.arange(n_cells), poly)
    for c in range(n_cells):
        interpolated = weights[c].T @ values[start[c] : start[c] + n_stencil]
        exact = np.polynomial.polynomial.polyval(c + offsets, poly)
        np.testing.assert_allclose(interpolated, exact, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_coef", [1, 2, 3, 5])
def test_monomial_tables_are_the_lagrange_interpolant_in_x(n_coef):
    n_cells = 6
    x = np.linspace(-1, 1, 9)
    g, start_g = monomial_stencils(n_cells, n_coef)
    weights, start_w = lagrange_stencils(n_cells, x / 2, n_coef)
    np.testing.assert_array_equal(start_g, start_w)
    from_monomials = np.einsum("clm,mx->clx", g, x[None, :] ** np.arange(n_coef)[:, None])
    np.testing.assert_allclose(from_monomials, weights, rtol=1e-12, atol=1e-12)


def test_builders_refuse_impossible_sizes():
    with pytest.raises(ValueError, match="n_stencil must be >= 1, <= 3; got 4"):
        lagrange_stencils(3, [0.0], 4)
    with pytest.raises(ValueError, match="n_coef must be >= 1, <= 9; got 10"):
        monomial_stencils(20, 10)
    with pytest.raises(ValueError, match="width must be positive"):
        fine_offsets(0.0, 4)
