"""Quadrature RFI-visibility operator in Gram form (DESIGN.md section 3).

For each data cell (f, t) the fine-sampled signal ``X[a, k]`` over k = (source, fine channel,
fine time) is built per antenna from the data grid, and the visibilities are entries of the
Gram matrix ``X X^H / N`` read at the baseline list's pairs. Only the Gram rows (distinct
``a1``) and columns (distinct ``a2``) the list needs are formed.
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

_FN = "quadrature_eval_with_indices"
_HIGHEST = jax.lax.Precision.HIGHEST

# Fine-grid arrays alive per cell and per (antenna, k) while a block runs forward and backward:
# amplitude, phase, phasor, signal and their cotangents. An estimate for sizing blocks.
_LIVE_FINE_ARRAYS = 6


@jax.custom_jvp
def _rotate(amp, phi):
    """``amp * exp(i phi)``; its JVP does no phase work when ``phi`` carries no tangent."""
    return amp * jax.lax.complex(jnp.cos(phi), jnp.sin(phi))


@functools.partial(_rotate.defjvp, symbolic_zeros=True)
def _rotate_jvp(primals, tangents):
    amp, phi = primals
    d_amp, d_phi = tangents
    phasor = jax.lax.complex(jnp.cos(phi), jnp.sin(phi))
    signal = amp * phasor
    d_signal = jnp.zeros_like(signal)
    if not isinstance(d_amp, SymbolicZero):
        d_signal = d_signal + d_amp * phasor
    if not isinstance(d_phi, SymbolicZero):
        # The name lets tests find this work in a jaxpr and prove it absent when unneeded.
        with jax.named_scope("phase_tangent"):
            d_signal = d_signal + 1j * signal * d_phi.astype(signal.dtype)
    return signal, d_signal


def _delay_offset(delay, dt):
    """Delay change from the cell centre, ``sum_{k>=1} delay[..., k] dt**k / k!`` (Horner).

    delay: (..., n_path) us, us/s, us/s^2...; dt: (n_int_t,) s. Returns (..., n_int_t) us.
    """
    n_path = delay.shape[-1]
    if n_path == 1:
        return jnp.zeros((*delay.shape[:-1], dt.shape[0]), delay.dtype)
    horner = delay[..., n_path - 1, None]
    for k in range(n_path - 2, 0, -1):
        horner = delay[..., k, None] + horner * (dt / (k + 1))
    return horner * dt


def _fine_signal(cell_f, cell_t, amp, phase, delay_us, tables):
    """Fine-sampled signal of each cell in a block.

    cell_f, cell_t: (C,) channel and time of each cell. amp, phase: (n_u, n_rfi, n_freq,
    n_time); delay_us: (n_u, n_rfi, n_time, n_path). Returns X: (C, n_u, n_rfi * n_int_f *
    n_int_t) complex.
    """
    w_freq, start_freq, w_time, start_time, dnu_mhz, dt, freq_mhz = tables
    n_u = amp.shape[0]
    freq_rows = start_freq[cell_f][:, None] + jnp.arange(w_freq.shape[1])
    time_rows = start_time[cell_t][:, None] + jnp.arange(w_time.shape[1])
    stencil_amp = amp[:, :, freq_rows[:, :, None], time_rows[:, None, :]]  # (n_u, n_rfi, C, k, l)
    fine_amp = jnp.einsum(
        "arckl,cku,clv->caruv", stencil_amp, w_freq[cell_f], w_time[cell_t], precision=_HIGHEST
    )
    centre_phase = phase[:, :, cell_f, cell_t].transpose(2, 0, 1)  # (C, n_u, n_rfi)
    delay = delay_us[:, :, cell_t, :].transpose(2, 0, 1, 3)  # (C, n_u, n_rfi, n_path)
    offset = _delay_offset(delay, dt)[..., None, :]  # (C, n_u, n_rfi, 1, n_int_t)
    # freq * offset + dnu * (offset + delay_0) equals (freq + dnu) * offset + dnu * delay_0
    # without rounding freq + dnu, which costs ~1e-4 MHz in float32 at 1 GHz.
    cycles = freq_mhz[cell_f][:, None, None, None, None] * offset + dnu_mhz[:, None] * (
        offset + delay[..., 0, None, None]
    )
    phi = centre_phase[..., None, None] + 2 * math.pi * cycles
    signal = _rotate(fine_amp, phi)
    return signal.reshape(cell_f.shape[0], n_u, -1)


def _bytes_per_cell(amp, indices, n_int_f, n_int_t):
    n_rfi = amp.shape[1]
    k = n_rfi * n_int_f * n_int_t
    n_u, n_r, n_c, n_bl = (x.shape[0] for x in (indices.ant, indices.row, indices.col, indices.a1))
    items = _LIVE_FINE_ARRAYS * n_u * k + (n_r + n_c) * k + 2 * n_r * n_c + 2 * n_bl
    return amp.dtype.itemsize * items


@functools.partial(jax.jit, static_argnames=("memory_budget_bytes",))
def _quadrature(indices, amp, phase, delay_us, tables, memory_budget_bytes):
    _, _, n_freq, n_time = amp.shape
    n_bl = indices.a1.shape[0]
    if n_bl == 0:
        return jnp.zeros((0, n_freq, n_time), amp.dtype)
    tables = jax.lax.stop_gradient(tables)
    n_int_f, n_int_t = tables[4].shape[0], tables[5].shape[0]
    ant = indices.ant
    amp, phase, delay_us = amp[ant], phase[ant], delay_us[ant]
    n_c = indices.col.shape[0]
    pair = indices.bl_row * n_c + indices.bl_col

    def block(coordinates):
        signal = _fine_signal(*coordinates, amp, phase, delay_us, tables)
        rows = signal.at[:, indices.row].get(mode="promise_in_bounds")
        cols = signal.at[:, indices.col].get(mode="promise_in_bounds")
        gram = jnp.einsum("cik,cjk->cij", rows, cols.conj(), precision=_HIGHEST)
        gram = gram.reshape(gram.shape[0], -1)
        vis = gram.at[:, pair].get(mode="promise_in_bounds", unique_indices=True)
        return vis.T

    per_cell = _bytes_per_cell(amp, indices, n_int_f, n_int_t)
    size, n_blocks = block_size(n_freq * n_time, per_cell, memory_budget_bytes)
    cells = padded_blocks(n_freq * n_time, size, n_blocks)
    vis = unblock_cells(map_blocks(block, cell_coordinates(cells, n_time)), n_bl, n_freq, n_time)
    return vis / (n_int_f * n_int_t)


def quadrature_eval_with_indices(
    indices,
    amp,
    phase,
    delay_us,
    w_freq,
    start_freq,
    w_time,
    start_time,
    dnu_mhz,
    dt,
    freq_mhz,
    *,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
):
    """RFI visibilities by quadrature over fine samples, for the baselines of ``indices``.

    ``vis[b, f, t] = (1 / (n_int_f n_int_t)) sum_{r, u, v} S[a1[b]] conj(S[a2[b]])`` with
    ``S[a](u, v) = A[a](u, v) exp(i phi[a](u, v))`` (DESIGN.md section 3): ``A`` interpolated
    from ``amp`` by the stencils, ``phi = phase + 2 pi ((freq_mhz + dnu_mhz) dtau(dt)
    + dnu_mhz delay_us[..., 0])`` with ``dtau`` the Taylor series of the delay about the cell
    centre. MHz times us is cycles.

    Args:
        indices: from :func:`make_indices` for ``n_ant`` antennas and ``n_bl`` baselines.
        amp: (n_ant, n_rfi, n_freq, n_time) complex64 or complex128 signal per data cell.
        phase: (n_ant, n_rfi, n_freq, n_time) real phase (rad) at each channel and cell centre.
        delay_us: (n_ant, n_rfi, n_time, n_path >= 1) real delay (us) relative to the array
            mean at each cell centre, then its time derivatives (us/s**k).
        w_freq, start_freq: (n_freq, n_sf, n_int_f) real weights, (n_freq,) integer starts.
        w_time, start_time: (n_time, n_st, n_int_t) real weights, (n_time,) integer starts.
        dnu_mhz: (n_int_f,) fine offsets from the channel centre (MHz).
        dt: (n_int_t,) fine offsets from the cell centre (s).
        freq_mhz: (n_freq,) channel centres (MHz).
        memory_budget_bytes: approximate bytes of fine-grid intermediates per block of cells.

    Returns:
        (n_bl, n_freq, n_time) visibilities in amp's dtype.

    Real arrays must be float32 with complex64 and float64 with complex128. ``amp``,
    ``phase`` and ``delay_us`` are differentiated; the tables, offsets and channel centres are
    constants (zero gradient).
    """
    real, _, _, _ = _validate.signal(
        _FN, indices, amp, phase, delay_us, w_freq, start_freq, dnu_mhz, freq_mhz
    )
    _, n_int_t = _validate.stencil(
        _FN, "w_time", w_time, "start_time", start_time, amp.shape[3], "n_time", real, "n_int_t"
    )
    _validate.array(_FN, "dt", dt, real, (n_int_t,), "(n_int_t,)")
    budget = _validate.budget(_FN, memory_budget_bytes)
    tables = (w_freq, start_freq.astype("int32"), w_time, start_time.astype("int32"))
    tables += (dnu_mhz, dt, freq_mhz)
    return _quadrature(indices, amp, phase, delay_us, tables, memory_budget_bytes=budget)
