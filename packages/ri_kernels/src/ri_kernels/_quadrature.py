"""Quadrature RFI-visibility operator in Gram form (docs/kernels.md, "The quadrature operator").

For each data cell (f, t) the fine-sampled signal ``X[k, a]`` over k = (source, fine channel,
fine time) is built per antenna from the data grid, and the visibilities are entries of the
Gram matrix ``X^T conj(X) / N`` read at the baseline list's pairs: a matmul per cell instead
of a product per baseline and fine sample, with reversed pairs and autocorrelations for free.
Short lists form only the Gram rows (distinct ``a1``) and columns (distinct ``a2``) they need.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from ri_kernels import _validate
from ri_kernels._blocks import (
    DEFAULT_MEMORY_BUDGET_BYTES,
    block_size,
    cell_coordinates,
    map_blocks,
    padded_blocks,
    unblock_cells,
)
from ri_kernels._docstrings import described
from ri_kernels._phasor import unit_phasor
from ri_kernels._tables import QuadratureTables

_FN = "quadrature_eval_with_indices"
_HIGHEST = jax.lax.Precision.HIGHEST

# Fine-grid arrays alive per cell and per (antenna, k) while a block runs forward and backward:
# amplitude, phase, phasor, signal and their cotangents. An estimate for sizing blocks.
_LIVE_FINE_ARRAYS = 6


@jax.custom_jvp
def _rotate(amp, turns):
    """``amp * exp(2 pi i turns)``; its JVP does no phase work when ``turns`` has no tangent."""
    return amp * unit_phasor(turns)


@functools.partial(_rotate.defjvp, symbolic_zeros=True)
def _rotate_jvp(primals, tangents):
    amp, turns = primals
    d_amp, d_turns = tangents
    phasor = unit_phasor(turns)
    signal = amp * phasor
    d_signal = jnp.zeros_like(signal)
    if not isinstance(d_amp, SymbolicZero):
        d_signal = d_signal + d_amp * phasor
    if not isinstance(d_turns, SymbolicZero):
        # The name lets tests find this work in a jaxpr and prove it absent when unneeded.
        with jax.named_scope("phase_tangent"):
            d_signal = d_signal + (2j * math.pi) * signal * d_turns.astype(signal.dtype)
    return signal, d_signal


def _delay_offset(delay, dt):
    """Delay change from the cell centre, ``sum_{k>=1} delay[..., k, :] dt**k / k!`` (Horner).

    delay: (..., n_path, n_u) us, us/s, us/s^2...; dt: (..., n_int_t) s, its leading axes
    broadcasting against delay's. Returns (..., n_int_t, n_u) us.
    """
    n_path = delay.shape[-2]
    dt = dt[..., None]
    if n_path == 1:
        shape = jnp.broadcast_shapes(delay.shape[:-2], dt.shape[:-2])
        return jnp.zeros((*shape, dt.shape[-2], delay.shape[-1]), delay.dtype)
    horner = delay[..., n_path - 1, None, :]
    for k in range(n_path - 2, 0, -1):
        horner = delay[..., k, None, :] + horner * (dt / (k + 1))
    return horner * dt


def _fine_signal(cell_f, cell_t, amp, amp_factor, phase, delay_us, tables, freq_mhz, ant):
    """Fine-sampled signal of each cell in a block, antenna axis last.

    cell_f, cell_t: (C,) channel and time of each cell. amp, phase: (n_freq, n_time, n_rfi,
    n_a); amp_factor: None, or the real per-antenna factor of amp, which then has an antenna
    axis of 1 (the signal is their product); delay_us: (n_time, n_rfi, n_path, n_a); tables:
    the operator's :class:`QuadratureTables` with time tables per source (:func:`_per_source`);
    freq_mhz: (n_freq,) channel centres; ant: (n_u,) the antennas to take of the n_a, or None
    for all of them (n_u = n_a). Returns X: (C, n_rfi * n_int_f * n_int_t, n_u) complex.

    The antenna axis is last because XLA fuses this elementwise work into the Gram matmul's
    operands: with antennas innermost every operand is contiguous there and the loop
    vectorises, while with the flattened fine-sample axis innermost the same fusion ran 3x
    slower than materialising X (measured at the CPU benchmark size).
    """
    n_sf, n_st = tables.w_freq.shape[1], tables.w_time.shape[2]
    freq_rows = tables.start_freq[cell_f][:, None] + jnp.arange(n_sf)
    time_rows = tables.start_time[cell_t][:, None] + jnp.arange(n_st)

    def touched(x):  # the touched antennas of the block's cells
        return x if ant is None else x[..., ant]

    stencil = amp[freq_rows[:, :, None], time_rows[:, None, :]]  # (C, k, l, n_rfi, n_u | 1)
    if amp_factor is None:
        stencil = touched(stencil)
    else:  # the product at the stencil's cells, before the interpolation: the signal's own
        stencil = stencil * touched(amp_factor[freq_rows[:, :, None], time_rows[:, None, :]])
    w_freq = tables.w_freq[cell_f]  # (C, n_sf, n_int_f)
    w_time = tables.w_time[:, cell_t].transpose(1, 2, 0, 3)  # (C, n_st, n_src_t, n_int_t)
    weights = w_freq[:, :, None, None, :, None] * w_time[:, None, :, :, None, :]
    # A sum of a few broadcast products, which XLA fuses with the phase below; as an einsum
    # it was a complex matmul with a contraction of 3, twice slower.
    fine_amp = sum(
        stencil[:, k, l, :, None, None, :] * weights[:, k, l, :, :, :, None]
        for k in range(n_sf)
        for l in range(n_st)
    )  # (C, n_rfi, n_int_f, n_int_t, n_u)
    centre_phase = touched(phase[cell_f, cell_t])[:, :, None, None, :]  # (C, n_rfi, 1, 1, n_u)
    delay = touched(delay_us[cell_t])  # (C, n_rfi, n_path, n_u)
    dt = jnp.moveaxis(tables.dt[:, cell_t], 0, 1)  # (C, n_src_t, n_int_t)
    offset = _delay_offset(delay, dt)[:, :, None]  # (C, n_rfi, 1, n_int_t, n_u)
    # freq * offset + dnu * (offset + delay_0) equals (freq + dnu) * offset + dnu * delay_0
    # without rounding freq + dnu, which costs ~1e-4 MHz in float32 at 1 GHz.
    centre_mhz = freq_mhz[cell_f][:, None, None, None, None]
    dnu_mhz = tables.dnu_mhz[:, None, None]
    cycles = centre_mhz * offset + dnu_mhz * (offset + delay[:, :, None, None, 0, :])
    # In turns: the phasor's range reduction is then exact (see _phasor).
    turns = centre_phase / (2 * math.pi) + cycles
    signal = _rotate(fine_amp, turns)
    return signal.reshape(signal.shape[0], -1, signal.shape[-1])


def _products(x, y):
    """``x^T conj(y)`` per cell: (C, K, n), (C, K, m) -> (C, n, m), full float32 precision."""
    return jnp.einsum("cki,ckj->cij", x, y.conj(), precision=_HIGHEST)


@jax.custom_jvp
def _gram(x):
    """The Gram matrix ``x^T conj(x)`` of each cell: (C, K, n) -> (C, n, n)."""
    return _products(x, x)


@_gram.defjvp
def _gram_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    # d(x x^H) = h + h^H with h = dx x^H: one matmul, and so is the transposed rule, where
    # differentiating the einsum in both operands would take two.
    h = _products(dx, x)
    return _gram(x), h + h.conj().transpose(0, 2, 1)


def _bytes_per_cell(amp, indices, n_int_f, n_int_t):
    n_rfi = amp.shape[1]
    k = n_rfi * n_int_f * n_int_t
    n_u, n_r, n_c, n_bl = (x.shape[0] for x in (indices.ant, indices.row, indices.col, indices.a1))
    items = _LIVE_FINE_ARRAYS * n_u * k + (n_r + n_c) * k + 2 * n_r * n_c + 2 * n_bl
    return amp.dtype.itemsize * items


def _gram_reader(indices):
    """The block's visibilities from its fine signal X: (C, K, n_u) -> (C, n_bl).

    When the list needs as many Gram rows and columns as it touches antennas (n_bl >= n_ant,
    where the static sizes coincide), the Gram matrix of X itself is formed, whose reverse
    mode needs one matmul; otherwise only the distinct a1 rows against the distinct a2
    columns.
    """
    n_u, n_r, n_c = (x.shape[0] for x in (indices.ant, indices.row, indices.col))
    if n_u == n_r == n_c:
        pair = indices.row[indices.bl_row] * n_u + indices.col[indices.bl_col]

        def gram(signal):
            return _gram(signal)

    else:
        pair = indices.bl_row * n_c + indices.bl_col

        def gram(signal):
            rows = signal.at[:, :, indices.row].get(mode="promise_in_bounds")
            cols = signal.at[:, :, indices.col].get(mode="promise_in_bounds")
            return _products(rows, cols)

    def read(signal):
        products = gram(signal)
        products = products.reshape(products.shape[0], -1)
        return products.at[:, pair].get(mode="promise_in_bounds", unique_indices=True)

    return read


@functools.partial(jax.jit, static_argnames=("memory_budget_bytes",))
def _quadrature(indices, amp, amp_factor, phase, delay_us, tables, freq_mhz, memory_budget_bytes):
    n_ant, _, n_freq, n_time = phase.shape
    n_bl = indices.a1.shape[0]
    if n_bl == 0:
        return jnp.zeros((0, n_freq, n_time), amp.dtype)
    tables, freq_mhz = jax.lax.stop_gradient((tables, freq_mhz))
    n_int_f, n_int_t = tables.dnu_mhz.shape[0], tables.dt.shape[-1]
    per_cell = _bytes_per_cell(amp, indices, n_int_f, n_int_t)
    # The signal with its cell axes first, so that blocks gather whole rows. A set with room
    # for every antenna lists them all in order (make_indices): nothing to gather. Otherwise
    # the touched antennas are gathered once, up front, which is fastest; but where that copy
    # would exceed the memory budget (many antennas and cells, as on a device's share of a
    # large array), each block gathers the touched antennas of its own cells instead: the
    # transposes are then the same for every call on the same signal (several baseline
    # groups), and XLA keeps one copy of them for all.
    # With amp_factor and several blocks the per-antenna signal is never formed whole: each
    # block multiplies the shared amp by the factor at its own cells, so the block loop's
    # reverse mode accumulates the cotangent of the shared part (no antenna axis) rather than
    # of a signal-sized array per call. With one block there is no loop, and the signal is
    # smaller than the block's own fine-grid intermediates: the product is formed up front,
    # which was faster (a 64-station, 4-channel step 0.065 s against 0.073 s per block).
    size, n_blocks = block_size(n_freq * n_time, per_cell, memory_budget_bytes)
    if amp_factor is not None and n_blocks == 1:
        amp, amp_factor = amp_factor * amp, None
    ant = None if indices.ant.shape[0] == n_ant else indices.ant
    n_u = indices.ant.shape[0]
    per_antenna = [
        x for x in (amp, amp_factor, phase, delay_us) if x is not None and x.shape[0] > 1
    ]
    copy_bytes = sum(x.size * x.dtype.itemsize for x in per_antenna)
    if ant is not None and copy_bytes * n_u <= memory_budget_bytes * n_ant:
        if amp_factor is None:
            amp = amp[ant]
        else:
            amp_factor = amp_factor[ant]
        phase, delay_us = phase[ant], delay_us[ant]
        ant = None
    amp, phase = (x.transpose(2, 3, 1, 0) for x in (amp, phase))  # (F, T, n_rfi, n_ant | n_u)
    if amp_factor is not None:
        amp_factor = amp_factor.transpose(2, 3, 1, 0)
    delay_us = delay_us.transpose(2, 1, 3, 0)  # (T, n_rfi, n_path, n_ant | n_u)
    read = _gram_reader(indices)

    def block(coordinates):
        signal = _fine_signal(*coordinates, amp, amp_factor, phase, delay_us, tables, freq_mhz, ant)
        return read(signal).T

    cells = padded_blocks(n_freq * n_time, size, n_blocks)
    vis = unblock_cells(map_blocks(block, cell_coordinates(cells, n_time)), n_bl, n_freq, n_time)
    return vis / (n_int_f * n_int_t)


@described
def quadrature_eval_with_indices(
    indices,
    amp,
    phase,
    delay_us,
    tables: QuadratureTables,
    freq_mhz,
    *,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    amp_factor=None,
):
    """RFI visibilities by quadrature over fine samples, for the baselines of ``indices``.

    ``vis[b, f, t] = (1 / (n_int_f n_int_t)) sum_{r, u, v} S[a1[b]] conj(S[a2[b]])`` with
    ``S[a](u, v) = A[a](u, v) exp(i phi[a](u, v))`` (docs/kernels.md, "The quadrature
    operator"): ``A`` interpolated from ``amp`` by the stencils, ``phi = phase + 2 pi
    ((freq_mhz + dnu_mhz) dtau(dt) + dnu_mhz delay_us[..., 0])`` with ``dtau`` the Taylor
    series of the delay about the cell centre. MHz times us is cycles.

    Args:
        $signal
        tables: the operator's :class:`QuadratureTables`, per source where a source is in
            view for only part of some integrations (:func:`in_view_stencils`).
        freq_mhz: (n_freq,) real channel centres (MHz).
        memory_budget_bytes: approximate bytes of fine-grid intermediates per block of cells.
        $amp_factor

    Returns:
        (n_bl, n_freq, n_time) visibilities in amp's dtype.

    Real arrays must be float32 with complex64 and float64 with complex128. ``amp``,
    ``amp_factor``, ``phase`` and ``delay_us`` are differentiated; the tables and channel
    centres are constants (zero gradient).
    """
    real = _validate.signal(_FN, indices, amp, phase, delay_us, freq_mhz, amp_factor)
    _validate.quadrature_tables(_FN, tables, amp.shape, real)
    budget = _validate.budget(_FN, memory_budget_bytes)
    tables = _per_source(tables)
    return _quadrature(
        indices, amp, amp_factor, phase, delay_us, tables, freq_mhz, memory_budget_bytes=budget
    )


def _per_source(tables: QuadratureTables) -> QuadratureTables:
    """The tables as the operator works on them: int32 starts, and time tables per source,
    (n_src_t, n_time, n_st, n_int_t) weights and (n_src_t, n_time, n_int_t) offsets, with
    n_src_t = 1 where they are the same for every source and integration."""
    w_time, dt = tables.w_time, tables.dt
    if w_time.ndim == 3:
        n_time, _, n_int_t = w_time.shape
        w_time, dt = w_time[None], jnp.broadcast_to(dt, (1, n_time, n_int_t))
    return tables._replace(
        start_freq=tables.start_freq.astype("int32"),
        w_time=w_time,
        start_time=tables.start_time.astype("int32"),
        dt=dt,
    )
