"""The operators' tables (:class:`QuadratureTables`, :class:`AnalyticTables`) and their
builders: fine-sample offsets (midpoint and Gauss-Legendre), Lagrange stencils and monomial
coefficient tables.

The operators treat these tables as data: any linear interpolant with stencils that lie inside
their axis and contain their own cell may be passed instead.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import jax
import numpy as np
from numpy.polynomial import polynomial

from ri_kernels._docstrings import described

MAX_COEFFICIENTS = 9


@described
class QuadratureTables(NamedTuple):
    """How the quadrature operator (:func:`quadrature_eval_with_indices`) samples each cell:
    the interpolation weights from the data grid to its fine samples, and where they lie.

    Across a channel:

    $frequency_tables

    Across an integration:

    w_time: (n_time, n_st, n_int_t) real weights of data time ``start_time[t] + l`` at fine
        time v of integration t (:func:`lagrange_stencils`); or per source, (n_rfi, n_time,
        n_st, n_int_t), each source's fine samples where it is in view
        (:func:`in_view_stencils`: a satellite rising or setting within an integration).
    start_time: (n_time,) integer first data time of each integration's stencil.
    dt: (n_int_t,) real fine-time offsets from the cell centre (s); with per-source weights,
        (n_rfi, n_time, n_int_t), per source and integration.

    $table_rules
    """

    w_freq: jax.Array
    start_freq: jax.Array
    w_time: jax.Array
    start_time: jax.Array
    dnu_mhz: jax.Array
    dt: jax.Array


@described
class AnalyticTables(NamedTuple):
    """How the closed-form operator (:func:`analytic_eval_with_indices`) interpolates each
    cell: weights across a channel to its fine channels, and each integration's amplitude as a
    polynomial in ``x = 2 tau / int_time`` in [-1, 1].

    Across a channel:

    $frequency_tables

    Across an integration:

    g_time: (n_time, n_st, n_coef) real coefficient of ``x**m`` of data time
        ``start_time[t] + l`` in integration t (:func:`monomial_stencils`), n_coef in
        1..``MAX_COEFFICIENTS``.
    start_time: (n_time,) integer first data time of each integration's stencil.
    int_time: the integration time (s): a positive number, or a 0-d real array.

    $table_rules
    """

    w_freq: jax.Array
    start_freq: jax.Array
    g_time: jax.Array
    start_time: jax.Array
    dnu_mhz: jax.Array
    int_time: float | jax.Array


def _count(name: str, value, low: int, high: int | None = None) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer; got {value!r}") from None
    if value < low or (high is not None and value > high):
        upper = f", <= {high}" if high is not None else ""
        raise ValueError(f"{name} must be >= {low}{upper}; got {value}")
    return value


def fine_offsets(width: float, n_int: int, dtype=np.float64) -> np.ndarray:
    """Midpoint-rule fine-sample offsets from a cell centre.

    Args:
        width: cell width: channel width in MHz (giving ``dnu_mhz``) or integration time in s
            (giving ``dt``).
        n_int: number of fine samples per cell, >= 1.

    Returns:
        (n_int,) offsets ``width * ((i + 1/2) / n_int - 1/2)``, in the units of ``width``.
    """
    n_int = _count("fine_offsets: n_int", n_int, 1)
    if not np.isfinite(width) or width <= 0:
        raise ValueError(f"fine_offsets: width must be positive and finite; got {width!r}")
    return (width * ((np.arange(n_int) + 0.5) / n_int - 0.5)).astype(dtype)


def gauss_legendre_offsets(width: float, n_int: int, dtype=np.float64):
    """Gauss-Legendre fine-sample offsets from a cell centre, with the scale of each sample.

    The operators average their fine samples with equal weights,
    ``(1 / n_int) sum_u S_p(u) conj(S_q(u))``. Multiplying the interpolation weights of sample
    ``u`` (the last axis of ``lagrange_stencils``' table) by ``scale[u] = sqrt(n_int w_u)``,
    with ``w_u`` the Gauss-Legendre weights summing to 1, makes that mean the ``n_int``-point
    Gauss-Legendre rule, since the product is bilinear in the signal and every ``w_u > 0``.
    The rule is exact for polynomials of degree ``2 n_int - 1``; averaging a fringe
    ``exp(i w y)`` over ``y`` in [-1, 1] its error is at most
    ``2^(2n) (n!)^4 / ((2n + 1) ((2n)!)^3) w^(2n)`` (Abramowitz & Stegun 25.4.30), which falls
    faster than any power of n once ``n > w / 2``: a channel a LEO satellite's fringe crosses
    once needs five samples where the midpoint rule needs hundreds (see ``fine_offsets``).

    Args:
        width: cell width: channel width in MHz (giving ``dnu_mhz``) or integration time in s
            (giving ``dt``).
        n_int: number of fine samples per cell, >= 1 (n_int = 1 is the midpoint).

    Returns:
        ``(offsets, scale)``: (n_int,) offsets in ``(-width / 2, width / 2)`` in the units of
        ``width``, increasing, and (n_int,) positive scales of each sample's weights.
    """
    n_int = _count("gauss_legendre_offsets: n_int", n_int, 1)
    if not np.isfinite(width) or width <= 0:
        raise ValueError(
            f"gauss_legendre_offsets: width must be positive and finite; got {width!r}"
        )
    nodes, weights = np.polynomial.legendre.leggauss(n_int)  # on [-1, 1], weights sum to 2
    return (width * nodes / 2).astype(dtype), np.sqrt(n_int * weights / 2).astype(dtype)


def stencil_starts(n_cells: int, n_stencil: int) -> np.ndarray:
    """(n_cells,) int32 first cell of each stencil: centred, shifted inwards at the edges.

    ``start[c] = clip(c - (n_stencil - 1) // 2, 0, n_cells - n_stencil)``, so that
    ``0 <= start[c] <= c < start[c] + n_stencil <= n_cells``. Odd ``n_stencil`` centres the
    stencil on its cell away from the edges.
    """
    n_cells = _count("stencil_starts: n_cells", n_cells, 1)
    n_stencil = _count("stencil_starts: n_stencil", n_stencil, 1, n_cells)
    cells = np.arange(n_cells)
    return np.clip(cells - (n_stencil - 1) // 2, 0, n_cells - n_stencil).astype(np.int32)


def _basis_roots(n_cells: int, n_stencil: int) -> tuple[np.ndarray, np.ndarray]:
    """Stencil starts and node positions relative to each cell, in cell widths."""
    start = stencil_starts(n_cells, n_stencil)
    nodes = start[:, None] + np.arange(n_stencil)[None, :] - np.arange(n_cells)[:, None]
    return start, nodes.astype(np.float64)


def lagrange_stencils(
    n_cells: int, offsets, n_stencil: int, dtype=np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """Lagrange interpolation weights from cell centres to fine samples (quadrature operator).

    Args:
        n_cells: cells on the axis (``n_freq`` or ``n_time``).
        offsets: (n_int,) fine-sample positions relative to the cell centre in cell widths,
            normally in [-1/2, 1/2] (``dnu_mhz / chan_width_mhz`` or ``dt / int_time``).
        n_stencil: points per stencil, 1 <= n_stencil <= n_cells (polynomial degree
            n_stencil - 1; odd values centre the stencil).

    Returns:
        ``(weights, start)``: (n_cells, n_stencil, n_int) weights of the value at cell
        ``start[c] + l`` for fine sample ``v`` of cell ``c``, and the (n_cells,) int32 starts.
    """
    offsets = np.asarray(offsets, np.float64)
    if offsets.ndim != 1 or offsets.size == 0 or not np.all(np.isfinite(offsets)):
        raise ValueError(
            f"lagrange_stencils: offsets must be a non-empty finite 1-D array; "
            f"got shape {offsets.shape}"
        )
    start, nodes = _basis_roots(n_cells, n_stencil)
    weights = np.ones((n_cells, n_stencil, offsets.size))
    for l in range(n_stencil):
        for m in range(n_stencil):
            if m != l:
                numerator = offsets[None, :] - nodes[:, m, None]
                weights[:, l, :] *= numerator / (nodes[:, l] - nodes[:, m])[:, None]
    return weights.astype(dtype), start


def in_view_stencils(
    n_cells: int, offsets, scale, n_stencil: int, view, dtype=np.float64
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-source quadrature tables for sources in view during only part of some cells (a
    satellite rising or setting within an integration).

    Each source's fine samples in each cell are those of ``offsets`` moved into the part of the
    cell where it is in view, ``[lo, hi]``: ``m + (hi - lo) offsets`` with ``m = (lo + hi)
    / 2``; its Lagrange weights are taken there, times ``scale sqrt(hi - lo)``, so that the
    operators' equal-weight mean, bilinear in the signal, becomes the rule of ``offsets`` and
    ``scale`` (``gauss_legendre_offsets``, or ones for the midpoint rule) over the in-view part
    alone, relative to the whole cell. A source out of view for a whole cell (hi = lo) gets
    zero weights there, and one in view throughout (-1/2, 1/2) the tables of
    ``lagrange_stencils``.

    Args:
        n_cells: cells on the axis (``n_time``).
        offsets: (n_int,) fine-sample positions relative to the cell centre in cell widths,
            in [-1/2, 1/2].
        scale: (n_int,) scale of each sample's weights (``gauss_legendre_offsets``).
        n_stencil: points per stencil, 1 <= n_stencil <= n_cells.
        view: (n_src, n_cells, 2) the in-view part of each cell, ``lo <= hi`` in cell widths
            relative to its centre, within [-1/2, 1/2].

    Returns:
        ``(weights, offsets, start)``: (n_src, n_cells, n_stencil, n_int) weights, (n_src,
        n_cells, n_int) fine-sample positions in cell widths (times the cell width: the
        quadrature operator's per-source ``dt``) and the (n_cells,) int32 starts, the same for
        every source.
    """
    offsets = np.asarray(offsets, np.float64)
    scale = np.asarray(scale, np.float64)
    view = np.asarray(view, np.float64)
    if offsets.ndim != 1 or offsets.size == 0 or scale.shape != offsets.shape:
        raise ValueError(
            f"in_view_stencils: offsets and scale must be non-empty 1-D arrays of one length; "
            f"got shapes {offsets.shape} and {scale.shape}"
        )
    if view.ndim != 3 or view.shape[1:] != (n_cells, 2):
        raise ValueError(
            f"in_view_stencils: view has shape {view.shape}; expected (n_src, {n_cells}, 2)"
        )
    lo, hi = view[..., 0], view[..., 1]
    if not np.all((-0.5 <= lo) & (lo <= hi) & (hi <= 0.5)):
        raise ValueError(
            "in_view_stencils: view must hold -1/2 <= lo <= hi <= 1/2 in every cell (the "
            "in-view part of the cell, in cell widths from its centre)"
        )
    start, nodes = _basis_roots(n_cells, n_stencil)
    positions = ((lo + hi) / 2)[..., None] + (hi - lo)[..., None] * offsets  # (s, c, v)
    weights = np.ones((*view.shape[:2], n_stencil, offsets.size))
    for l in range(n_stencil):
        for m in range(n_stencil):
            if m != l:
                numerator = positions - nodes[None, :, m, None]
                weights[:, :, l, :] *= numerator / (nodes[:, l] - nodes[:, m])[None, :, None]
    weights *= scale * np.sqrt(hi - lo)[..., None, None]
    return weights.astype(dtype), positions.astype(dtype), start


def monomial_stencils(n_cells: int, n_coef: int, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Lagrange stencils as monomial coefficients in x = 2 tau / int_time (analytic operator).

    The amplitude of cell ``t`` at ``x`` in [-1, 1] is
    ``sum_l sum_m g[t, l, m] x**m amp[start[t] + l]``: the same interpolant as
    ``lagrange_stencils(n_cells, x / 2, n_coef)``.

    Args:
        n_cells: time cells, ``n_time``.
        n_coef: points per stencil and polynomial coefficients, 1..9 and <= n_cells.

    Returns:
        ``(g_time, start)``: (n_cells, n_coef, n_coef) coefficients and (n_cells,) int32 starts.
    """
    n_coef = _count("monomial_stencils: n_coef", n_coef, 1, MAX_COEFFICIENTS)
    start, nodes = _basis_roots(n_cells, n_coef)
    g = np.zeros((nodes.shape[0], n_coef, n_coef))
    half_powers = 0.5 ** np.arange(n_coef)  # cell position s = x / 2
    for c in range(nodes.shape[0]):
        for l in range(n_coef):
            others = np.delete(nodes[c], l)
            basis = polynomial.polyfromroots(others) / np.prod(nodes[c, l] - others)
            g[c, l, :] = basis * half_powers
    return g.astype(dtype), start
