"""Host-side argument checks, run before anything is traced: one set that every entry point
takes, as the arguments are described once (``_docstrings``).

Shapes and dtypes are static, so they are checked even when a seam is called under ``jit`` or
inside ``shard_map``. Values (stencil starts, ``int_time``) are checked when they are concrete
(numpy arrays, Python numbers or committed jax arrays); traced values cannot be inspected and
are trusted, as their builders validated them.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import jax
import numpy as np

from ri_kernels._indices import BaselineIndices, index_shapes
from ri_kernels._phase_moments import MAX_CHANNEL_TERMS, MAX_CUBIC_TERMS, MAX_SEGMENTS, MAX_TERMS
from ri_kernels._tables import MAX_COEFFICIENTS, AnalyticTables, QuadratureTables

PRECISION_PAIRS = {np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}


def concrete(x) -> np.ndarray | None:
    """``x`` as a numpy array when its value is known on the host, else None."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


def _dtype(x):
    return getattr(x, "dtype", None)


def precision(fn: str, amp) -> np.dtype:
    """The real dtype paired with ``amp``'s complex dtype (float32 or float64)."""
    dtype = np.dtype(_dtype(amp)) if _dtype(amp) is not None else None
    if dtype not in PRECISION_PAIRS:
        raise TypeError(
            f"{fn}: amp must be an array of dtype complex64 or complex128; got {dtype}. "
            f"Use complex64 with float32 tables, or complex128 with float64 tables"
        )
    if dtype == np.complex128 and not jax.config.read("jax_enable_x64"):
        raise TypeError(
            f"{fn}: amp is complex128 but jax_enable_x64 is off, so JAX would silently compute "
            f"in 32 bits; call jax.config.update('jax_enable_x64', True) or pass complex64"
        )
    return np.dtype(PRECISION_PAIRS[dtype])


def array(fn: str, name: str, x, dtype: np.dtype, shape: tuple, meaning: str) -> None:
    """Refuse ``x`` unless it has exactly ``dtype`` and ``shape``."""
    if _dtype(x) is None or not hasattr(x, "shape"):
        raise TypeError(f"{fn}: {name} must be an array; got {type(x).__name__}")
    if np.dtype(x.dtype) != dtype:
        raise TypeError(
            f"{fn}: {name} has dtype {np.dtype(x.dtype)}; expected {dtype} to match amp "
            f"(complex64 goes with float32, complex128 with float64)"
        )
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name} has shape {tuple(x.shape)}; expected {meaning} = {shape}")


def indices(fn: str, index_set, n_ant: int) -> int:
    """Check an index set against the antenna count of ``amp``; return n_bl."""
    if not isinstance(index_set, BaselineIndices):
        raise TypeError(
            f"{fn}: indices must come from make_indices; got {type(index_set).__name__}"
        )
    if index_set.a1.ndim != 1:
        raise ValueError(
            f"{fn}: index arrays must be 1-D; a1 has shape {index_set.a1.shape}. Inside "
            f"shard_map take the device's own set with jax.tree.map(lambda x: x[0], indices)"
        )
    if index_set.n_ant != n_ant:
        raise ValueError(
            f"{fn}: indices were built for n_ant = {index_set.n_ant} but the signal has "
            f"{n_ant} antennas on axis 0 (of amp, or of amp_factor when given)"
        )
    for name, bound in index_shapes(index_set.n_bl, n_ant).items():
        leaf = getattr(index_set, name)
        # a1, a2, bl_row and bl_col have one entry per baseline; ant, row and col as many as
        # the set was sized for (make_index_sets: fewer than make_indices, never more).
        exact = name not in ("ant", "row", "col")
        size = leaf.shape[0] if leaf.ndim == 1 else -1
        fits = size == bound[0] if exact else min(1, bound[0]) <= size <= bound[0]
        if not fits or np.dtype(leaf.dtype).kind not in "iu":
            expected = f"shape {bound}" if exact else f"1-D, at most {bound[0]} long"
            raise ValueError(
                f"{fn}: indices.{name} has shape {tuple(leaf.shape)} and dtype {leaf.dtype}; "
                f"expected integers, {expected}. Build indices with make_indices or "
                f"make_index_sets"
            )
    return index_set.n_bl


_STARTS = {"n_freq": "tables.start_freq", "n_time": "tables.start_time"}


def stencil(fn, w_name, w, start, n_cells, axis, dtype, n_int_name) -> int:
    """Check a (n_cells, n_stencil, n_int) table on the ``axis`` ("n_freq" or "n_time") of
    ``n_cells`` cells, and its starts; return n_int."""
    s_name = _STARTS[axis]
    if _dtype(w) is None or getattr(w, "ndim", 0) != 3 or w.shape[0] != n_cells:
        shape = tuple(getattr(w, "shape", ()))
        raise ValueError(
            f"{fn}: {w_name} has shape {shape}; expected ({axis}, n_stencil, {n_int_name}) "
            f"with {axis} = {n_cells}"
        )
    n_stencil, n_int = w.shape[1:]
    array(fn, w_name, w, dtype, (n_cells, n_stencil, n_int), f"({axis}, n_stencil, {n_int_name})")
    if not 1 <= n_stencil <= n_cells:
        raise ValueError(
            f"{fn}: {w_name} has {n_stencil}-point stencils; need 1 <= n_stencil <= {axis} "
            f"= {n_cells}"
        )
    if _dtype(start) is None or np.dtype(start.dtype).kind not in "iu":
        raise TypeError(f"{fn}: {s_name} must be an integer array; got {_dtype(start)}")
    if tuple(start.shape) != (n_cells,):
        raise ValueError(f"{fn}: {s_name} has shape {tuple(start.shape)}; expected ({n_cells},)")
    values = concrete(start)
    if values is not None:
        cells = np.arange(n_cells)
        end = values + n_stencil
        bad = np.flatnonzero((values < 0) | (values > cells) | (end <= cells) | (end > n_cells))
        if bad.size:
            c = int(bad[0])
            raise ValueError(
                f"{fn}: {s_name}[{c}] = {values[c]} gives a {n_stencil}-point stencil over "
                f"cells {values[c]}..{values[c] + n_stencil - 1}, which must contain cell {c} "
                f"and lie inside [0, {n_cells}) ({bad.size} bad cells); stencils need "
                f"0 <= start[c] <= c < start[c] + n_stencil <= {axis}"
            )
    return n_int


def _int_time(fn: str, value, dtype: np.dtype) -> None:
    """A positive scalar: a Python number or a 0-d array of the working real dtype."""
    name = "tables.int_time"
    if _dtype(value) is not None:
        array(fn, name, value, dtype, (), "a scalar")
    elif not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be a number of seconds; got {value!r}")
    known = concrete(value)
    if known is not None and not (np.isfinite(known) and known > 0):
        raise ValueError(f"{fn}: {name} must be positive and finite (s); got {float(known)}")


def option(fn: str, name: str, value, low: int, high: int) -> int:
    """A static integer option within [low, high]."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be a Python integer; got {value!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{fn}: {name} must lie in {low}..{high}; got {value}")
    return value


def flag(fn: str, name: str, value) -> bool:
    """A static boolean option."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: {name} must be True or False; got {value!r}")
    return bool(value)


def _tables_type(fn: str, tables, kind: type) -> None:
    if not isinstance(tables, kind):
        raise TypeError(
            f"{fn}: tables must be a ri_kernels.{kind.__name__}; got {type(tables).__name__}. "
            f"Pass {kind.__name__}({', '.join(kind._fields)})"
        )


def _frequency_tables(fn: str, tables, n_freq: int, dtype: np.dtype) -> None:
    """The tables across a channel, which both operators' tables hold."""
    n_int_f = stencil(
        fn, "tables.w_freq", tables.w_freq, tables.start_freq, n_freq, "n_freq", dtype, "n_int_f"
    )
    array(fn, "tables.dnu_mhz", tables.dnu_mhz, dtype, (n_int_f,), "(n_int_f,)")


def quadrature_tables(fn: str, tables, shape: tuple, dtype: np.dtype) -> None:
    """A :class:`QuadratureTables` for a signal of ``shape`` (n_ant, n_rfi, n_freq, n_time)."""
    _tables_type(fn, tables, QuadratureTables)
    _, n_rfi, n_freq, n_time = shape
    _frequency_tables(fn, tables, n_freq, dtype)
    w_time, name = tables.w_time, "tables.w_time"
    per_source = getattr(w_time, "ndim", 0) == 4  # in_view_stencils
    if per_source:
        array(fn, name, w_time, dtype, (n_rfi, *w_time.shape[1:]), "(n_rfi, n_time, n_st, n_int_t)")
        w_time, name = w_time[0], "tables.w_time[0]"
    n_int_t = stencil(fn, name, w_time, tables.start_time, n_time, "n_time", dtype, "n_int_t")
    if per_source:
        dt_shape, meaning = (n_rfi, n_time, n_int_t), "(n_rfi, n_time, n_int_t) per source"
    else:
        dt_shape, meaning = (n_int_t,), "(n_int_t,)"
    array(fn, "tables.dt", tables.dt, dtype, dt_shape, meaning)


def analytic_tables(fn: str, tables, shape: tuple, dtype: np.dtype) -> None:
    """An :class:`AnalyticTables` for a signal of ``shape`` (n_ant, n_rfi, n_freq, n_time)."""
    _tables_type(fn, tables, AnalyticTables)
    _frequency_tables(fn, tables, shape[2], dtype)
    n_coef = stencil(
        fn, "tables.g_time", tables.g_time, tables.start_time, shape[3], "n_time", dtype, "n_coef"
    )
    if not 1 <= n_coef <= MAX_COEFFICIENTS:
        raise ValueError(
            f"{fn}: tables.g_time has {n_coef} monomial coefficients; the analytic operator "
            f"takes 1..{MAX_COEFFICIENTS}"
        )
    _int_time(fn, tables.int_time, dtype)


class AnalyticOptions(NamedTuple):
    """The analytic operator's static options (``analytic_eval_with_indices``, which
    describes them), with their defaults: hashable, so that a compiled operator is kept per
    set of options."""

    segments: int = 2
    terms: int = 6
    cubic_terms: int = 3
    channel_terms: int = 0
    channel_bend: bool = True


def analytic_options(fn: str, options: dict) -> AnalyticOptions:
    """The keyword options given to an analytic entry point, checked, the rest defaulted."""
    unknown = sorted(set(options) - set(AnalyticOptions._fields))
    if unknown:
        raise TypeError(
            f"{fn}: unknown option {unknown[0]!r}; the analytic operator's options are "
            f"{', '.join(AnalyticOptions._fields)} and memory_budget_bytes"
        )
    given = AnalyticOptions(**options)
    return AnalyticOptions(
        segments=option(fn, "segments", given.segments, 1, MAX_SEGMENTS),
        terms=option(fn, "terms", given.terms, 1, MAX_TERMS),
        cubic_terms=option(fn, "cubic_terms", given.cubic_terms, 0, MAX_CUBIC_TERMS),
        channel_terms=option(fn, "channel_terms", given.channel_terms, 0, MAX_CHANNEL_TERMS),
        channel_bend=flag(fn, "channel_bend", given.channel_bend),
    )


def view(fn: str, value, n_rfi: int, n_time: int, dtype: np.dtype) -> None:
    """The in-view part [lo, hi] of each source's integrations, within [-1, 1]."""
    array(fn, "view", value, dtype, (n_rfi, n_time, 2), "(n_rfi, n_time, 2)")
    known = concrete(value)
    if known is not None:
        lo, hi = known[..., 0], known[..., 1]
        bad = np.argwhere(~((-1 <= lo) & (lo <= hi) & (hi <= 1)))
        if bad.size:
            r, t = (int(i) for i in bad[0])
            raise ValueError(
                f"{fn}: view[{r}, {t}] = {known[r, t].tolist()}; each source's in-view part "
                f"of an integration must be [lo, hi] with -1 <= lo <= hi <= 1 (in x = 2 tau / "
                f"int_time; lo = hi where it is out of view throughout) ({len(bad)} bad cells)"
            )


def budget(fn: str, memory_budget_bytes) -> int:
    return option(fn, "memory_budget_bytes", memory_budget_bytes, 1, 1 << 50)


def signal(fn: str, index_set, amp, phase, delay_us, freq_mhz, amp_factor=None) -> np.dtype:
    """Checks of the arguments both operators take besides their tables (``amp`` may be a
    ``jax.ShapeDtypeStruct``). Returns the real dtype that goes with ``amp``'s."""
    real = precision(fn, amp)
    if amp.ndim != 4:
        raise ValueError(
            f"{fn}: amp has shape {tuple(amp.shape)}; expected 4 axes "
            f"(n_ant, n_rfi, n_freq, n_time)"
        )
    shape = tuple(amp.shape)
    if amp_factor is not None:
        if amp.shape[0] != 1:
            raise ValueError(
                f"{fn}: with amp_factor, amp is the part of the signal every antenna shares, "
                f"(1, n_rfi, n_freq, n_time); got shape {shape}. Pass amp_factor=None for a "
                f"signal per antenna"
            )
        if getattr(amp_factor, "ndim", 0) != 4:
            raise ValueError(
                f"{fn}: amp_factor has shape {tuple(getattr(amp_factor, 'shape', ()))}; "
                f"expected (n_ant, n_rfi, n_freq, n_time)"
            )
        shape = (amp_factor.shape[0], *shape[1:])
        array(fn, "amp_factor", amp_factor, real, shape, "(n_ant, n_rfi, n_freq, n_time)")
    n_ant, n_rfi, n_freq, n_time = shape
    indices(fn, index_set, n_ant)
    array(fn, "phase", phase, real, shape, "(n_ant, n_rfi, n_freq, n_time), the signal's shape")
    if getattr(delay_us, "ndim", 0) != 4 or delay_us.shape[3] < 1:
        raise ValueError(
            f"{fn}: delay_us has shape {tuple(getattr(delay_us, 'shape', ()))}; expected "
            f"(n_ant, n_rfi, n_time, n_path) with n_path >= 1"
        )
    n_path = delay_us.shape[3]
    array(
        fn,
        "delay_us",
        delay_us,
        real,
        (n_ant, n_rfi, n_time, n_path),
        "(n_ant, n_rfi, n_time, n_path)",
    )
    array(fn, "freq_mhz", freq_mhz, real, (n_freq,), "(n_freq,)")
    return real
