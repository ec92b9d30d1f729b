"""Operator classes holding the index arrays of one baseline list."""

from __future__ import annotations

from ri_kernels._analytic import analytic_eval_with_indices
from ri_kernels._blocks import DEFAULT_MEMORY_BUDGET_BYTES
from ri_kernels._indices import make_indices
from ri_kernels._quadrature import quadrature_eval_with_indices


class RFIInterpVisOp:
    """Quadrature operator for a fixed baseline list.

    ``RFIInterpVisOp(n_ant, a1, a2).eval(amp, phase, delay_us, w_freq, start_freq, w_time,
    start_time, dnu_mhz, dt, freq_mhz, *, amp_factor=None)`` equals
    :func:`quadrature_eval_with_indices` called with ``.indices``; see it for shapes, dtypes
    and units.
    """

    def __init__(self, n_ant: int, a1, a2):
        self.indices = make_indices(n_ant, a1, a2)

    @property
    def n_ant(self) -> int:
        return self.indices.n_ant

    @property
    def n_bl(self) -> int:
        return self.indices.n_bl

    def eval(
        self,
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
        amp_factor=None,
    ):
        """(n_bl, n_freq, n_time) visibilities of this operator's baselines."""
        return quadrature_eval_with_indices(
            self.indices,
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
            memory_budget_bytes=memory_budget_bytes,
            amp_factor=amp_factor,
        )


class RFIAnalyticVisOp:
    """Closed-form operator for a fixed baseline list.

    ``RFIAnalyticVisOp(n_ant, a1, a2).eval(amp, phase, delay_us, w_freq, start_freq, g_time,
    start_time, dnu_mhz, int_time, freq_mhz, *, segments=2, terms=6, cubic_terms=3,
    amp_factor=None)`` equals
    :func:`analytic_eval_with_indices` called with ``.indices``; see it for shapes, dtypes and
    units.
    """

    def __init__(self, n_ant: int, a1, a2):
        self.indices = make_indices(n_ant, a1, a2)

    @property
    def n_ant(self) -> int:
        return self.indices.n_ant

    @property
    def n_bl(self) -> int:
        return self.indices.n_bl

    def eval(
        self,
        amp,
        phase,
        delay_us,
        w_freq,
        start_freq,
        g_time,
        start_time,
        dnu_mhz,
        int_time,
        freq_mhz,
        *,
        segments: int = 2,
        terms: int = 6,
        cubic_terms: int = 3,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
        amp_factor=None,
    ):
        """(n_bl, n_freq, n_time) visibilities of this operator's baselines."""
        return analytic_eval_with_indices(
            self.indices,
            amp,
            phase,
            delay_us,
            w_freq,
            start_freq,
            g_time,
            start_time,
            dnu_mhz,
            int_time,
            freq_mhz,
            segments=segments,
            terms=terms,
            cubic_terms=cubic_terms,
            memory_budget_bytes=memory_budget_bytes,
            amp_factor=amp_factor,
        )
