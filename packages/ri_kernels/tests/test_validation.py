"""Bad arguments are refused on the host, with messages that say what to fix.

Every case here raises before anything is traced or compiled, including under ``jax.jit``.
"""

import jax
import numpy as np
import pytest
from ri_reference import analytic_args, make_scene, quadrature_args

from ri_kernels import (
    analytic_eval_with_indices,
    analytic_moments_with_indices,
    make_indices,
    quadrature_eval_with_indices,
    stack_indices,
)

# The scene's arguments are float64, so that each check below is reached rather than the
# refusal of complex128 without jax's 64-bit mode (tested on its own below).
pytestmark = pytest.mark.usefixtures("x64")

SCENE = make_scene(61, n_freq=3, n_time=5)
IDX = make_indices(4, [0, 1], [1, 2])
SIGNAL_NAMES = ("amp", "phase", "delay_us", "tables", "freq_mhz")
QUAD = dict(zip(SIGNAL_NAMES, quadrature_args(SCENE), strict=True))
ANA = dict(zip(SIGNAL_NAMES, analytic_args(SCENE), strict=True))


def _with(arguments, changes):
    """The seam's arguments with ``changes``, by name: an argument's or a table's."""
    tables = {k: v for k, v in changes.items() if k in arguments["tables"]._fields}
    rest = {k: v for k, v in changes.items() if k not in tables}
    return {**arguments, "tables": arguments["tables"]._replace(**tables), **rest}


def _quadrature(indices=IDX, **changes):
    return quadrature_eval_with_indices(indices, **_with(QUAD, changes))


def _analytic(indices=IDX, options=None, **changes):
    return analytic_eval_with_indices(indices, **_with(ANA, changes), **(options or {}))


BAD_ARGUMENTS = [
    (
        dict(phase=QUAD["phase"].astype(np.float32)),
        TypeError,
        "phase has dtype float32; expected float64",
    ),
    (
        dict(amp=QUAD["amp"].real),
        TypeError,
        "amp must be an array of dtype complex64 or complex128",
    ),
    (dict(amp=QUAD["amp"][0]), ValueError, r"amp has shape \(2, 3, 5\); expected 4 axes"),
    (dict(phase=QUAD["phase"][..., :4]), ValueError, r"phase has shape \(4, 2, 3, 4\); expected"),
    (dict(delay_us=QUAD["delay_us"][..., :0]), ValueError, "n_path >= 1"),
    (
        dict(w_freq=QUAD["tables"].w_freq[:2]),
        ValueError,
        r"w_freq has shape \(2, 3, 2\).*n_freq = 3",
    ),
    (
        dict(dnu_mhz=QUAD["tables"].dnu_mhz[:1]),
        ValueError,
        r"dnu_mhz has shape \(1,\); expected \(n_int_f,\) = \(2,\)",
    ),
    (
        dict(dt=QUAD["tables"].dt[:3]),
        ValueError,
        r"dt has shape \(3,\); expected \(n_int_t,\) = \(4,\)",
    ),
    (dict(freq_mhz=QUAD["freq_mhz"][:2]), ValueError, r"freq_mhz has shape \(2,\)"),
    (
        dict(start_time=np.array([0, 0, 0, 0, 2])),
        ValueError,
        r"start_time\[3\] = 0 gives a 3-point stencil over cells 0..2, which must contain",
    ),
    (dict(start_freq=np.array([0, 1, 1]) - 1), ValueError, r"start_freq\[0\] = -1"),
    (
        dict(start_time=QUAD["tables"].start_time.astype(float)),
        TypeError,
        "start_time must be an integer array",
    ),
    (
        dict(w_time=np.ones((5, 6, 4))),
        ValueError,
        r"6-point stencils; need 1 <= n_stencil <= n_time = 5",
    ),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD_ARGUMENTS)
def test_quadrature_refuses_bad_arguments(change, error, message):
    with pytest.raises(error, match=message):
        _quadrature(**change)


BAD_ANALYTIC = [
    (dict(int_time=0.0), {}, ValueError, "int_time must be positive and finite"),
    (dict(int_time=np.float64(-1.0)), {}, ValueError, "int_time must be positive"),
    (dict(int_time=np.float32(2.0)), {}, TypeError, "int_time has dtype float32; expected float64"),
    (dict(int_time="2"), {}, TypeError, "int_time must be a number of seconds"),
    (
        dict(g_time=np.zeros((5, 3, 10))),
        {},
        ValueError,
        "10 monomial coefficients; the analytic operator takes 1..9",
    ),
    ({}, dict(segments=0), ValueError, r"segments must lie in 1..1024; got 0"),
    ({}, dict(segments=1025), ValueError, r"segments must lie in 1..1024"),
    ({}, dict(terms=33), ValueError, r"terms must lie in 1..32; got 33"),
    ({}, dict(terms=0), ValueError, r"terms must lie in 1..32"),
    ({}, dict(cubic_terms=9), ValueError, r"cubic_terms must lie in 0..8; got 9"),
    ({}, dict(cubic_terms=2.0), TypeError, "cubic_terms must be a Python integer"),
    ({}, dict(memory_budget_bytes=0), ValueError, "memory_budget_bytes must lie in"),
]


@pytest.mark.parametrize(("change", "options", "error", "message"), BAD_ANALYTIC)
def test_analytic_refuses_bad_arguments(change, options, error, message):
    with pytest.raises(error, match=message):
        _analytic(options=options, **change)


def test_mixed_precision_is_refused_in_both_directions():
    with pytest.raises(TypeError, match="phase has dtype float64; expected float32"):
        _quadrature(amp=QUAD["amp"].astype(np.complex64))
    with pytest.raises(TypeError, match="freq_mhz has dtype float32; expected float64"):
        _analytic(freq_mhz=ANA["freq_mhz"].astype(np.float32))


def test_complex128_without_x64_is_refused():
    with jax.enable_x64(False), pytest.raises(TypeError, match="jax_enable_x64 is off"):
        _quadrature()


def test_index_sets_must_match_the_signal_and_be_one_device_set():
    with pytest.raises(ValueError, match="indices were built for n_ant = 5 but the signal has 4"):
        _quadrature(make_indices(5, [0], [1]))
    with pytest.raises(TypeError, match="indices must come from make_indices; got tuple"):
        _analytic((np.array([0]), np.array([1])))
    stacked = stack_indices([IDX, make_indices(4, [2, 3], [3, 3])])
    with pytest.raises(ValueError, match=r"jax.tree.map\(lambda x: x\[0\], indices\)"):
        _quadrature(stacked)


def test_checks_run_when_the_seam_is_traced_under_jit():
    # Shapes are static and closed-over tables are concrete, so both are checked at trace time.
    bad_time = np.array([0, 0, 0, 0, 2])

    @jax.jit
    def traced(amp, phase):
        return _quadrature(amp=amp, phase=phase, start_time=bad_time)

    with pytest.raises(ValueError, match=r"start_time\[3\] = 0"):
        traced(QUAD["amp"], QUAD["phase"])
    with pytest.raises(ValueError, match=r"phase has shape"):
        jax.jit(lambda amp: _quadrature(amp=amp, phase=QUAD["phase"][:3]))(QUAD["amp"])


def test_tables_of_the_other_operator_or_loose_arrays_are_refused():
    expected = r"tables must be a ri_kernels.QuadratureTables; got AnalyticTables. Pass Quadr"
    with pytest.raises(TypeError, match=expected):
        _quadrature(tables=ANA["tables"])
    with pytest.raises(TypeError, match=r"tables must be a ri_kernels.AnalyticTables; got tuple"):
        _analytic(tables=tuple(ANA["tables"]))
    signal = analytic_args(SCENE)[1:3]
    with pytest.raises(TypeError, match=r"tables must be a ri_kernels.AnalyticTables"):
        analytic_moments_with_indices(IDX, *signal, QUAD["tables"], ANA["freq_mhz"])


def test_unknown_analytic_options_are_refused_naming_the_known_ones():
    with pytest.raises(TypeError, match=r"unknown option 'segment'; .* segments, terms"):
        _analytic(options=dict(segment=4))
    with pytest.raises(TypeError, match="analytic_moments_with_indices: unknown option 'bend'"):
        analytic_moments_with_indices(IDX, *analytic_args(SCENE)[1:], bend=False)
