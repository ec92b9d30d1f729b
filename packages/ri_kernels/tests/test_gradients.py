"""Forward and reverse derivatives of both operators, in both precisions.

References: autodiff of the dense jnp references (no Gram form, no blocks, no custom rules,
no stop_gradient) in float64, and central finite differences of the operator itself. The
operators are sesquilinear in amp, so a central difference along amp is exact up to rounding
at any step. Tangents are given to every real input; the inputs that are constants by design
must neither move the JVP nor receive a cotangent.

Each precision runs in its own mode: float64 with jax's 64-bit mode, float32 without it, as
shipped; the float64 references always with it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_args, analytic_jnp, quadrature_args, quadrature_jnp
from seam_autodiff import A1, A2, N_ANT, POSITIONS, SCENE, leaves, value_jvp_vjp

from ri_kernels import analytic_eval_with_indices, make_indices

IDX = make_indices(N_ANT, A1, A2)
N_DIFFERENTIATED = {"quadrature": 3, "analytic": 3}  # amp, phase, delay_us


def _reference(dense, args, n_differentiated):
    with jax.enable_x64(True):
        args = jax.tree.map(jnp.asarray, args)

    def run(primals, tangents, cotangent):
        def vis_of(*values):
            return dense(A1, A2, *values, *args[n_differentiated:])

        vis, jvp_of = jax.linearize(vis_of, *primals)
        return vis, jvp_of(*tangents), jax.linear_transpose(jvp_of, *primals)(cotangent)

    return jax.jit(run)


REFERENCES = {
    "quadrature": _reference(quadrature_jnp, quadrature_args(SCENE), 3),
    "analytic": _reference(analytic_jnp, analytic_args(SCENE), 3),
}


def _random_like(x, rng):
    t = rng.normal(size=np.shape(x))
    if np.iscomplexobj(x):
        t = t + 1j * rng.normal(size=np.shape(x))
    return np.asarray(t, np.asarray(x).dtype)


def _pairing(a, b):
    """Re sum(a * b): the bilinear pairing under which JAX transposes complex linear maps."""
    return sum(float(np.sum(np.asarray(x) * np.asarray(y)).real) for x, y in zip(a, b, strict=True))


def _close(mine, ref, tol, what=""):
    np.testing.assert_allclose(mine, ref, rtol=0, atol=tol * np.abs(ref).max(), err_msg=what)


def _float64(values):
    return [np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64) for x in values]


def _derivatives_match_reference(name, real, tol, seed, value_tol):
    """Checks against the reference; returns (vis_and_jvp, primals, tangents, jvp)."""
    args = leaves(name, SCENE, real)
    n = N_DIFFERENTIATED[name]
    rng = np.random.default_rng(seed)
    primals = [args[p] for p in POSITIONS]
    tangents = [_random_like(x, rng) for x in primals]
    if n == 3:  # each delay order scaled to its own size, so that all move the phase alike
        scale = np.abs(primals[2]).max(axis=(0, 1, 2)) * 1e-3
        tangents[2] = (tangents[2] * scale).astype(primals[2].dtype)
    cotangent = rng.normal(size=(A1.size, *args[0].shape[2:])) * (1 - 2j)

    def run(values, directions):
        full = list(args)
        for position, value in zip(POSITIONS, values, strict=True):
            full[position] = value
        ct = cotangent.astype(args[0].dtype)
        return value_jvp_vjp(name, IDX, tuple(full), tuple(directions), ct)

    vis, jvp, vjp = run(primals, tangents)
    with jax.enable_x64(True):
        expected = REFERENCES[name](_float64(primals[:n]), _float64(tangents[:n]), cotangent)
    _close(vis, expected[0], value_tol, "value")
    _close(jvp, expected[1], tol, "jvp")
    for position, mine, ref in zip(POSITIONS, vjp[:n], expected[2], strict=False):
        _close(mine, ref, tol, f"vjp of argument {position}")
    for x, cot in zip(primals[n:], vjp[n:], strict=True):
        assert np.shape(cot) == np.shape(x) and not np.any(cot)
    # Reverse mode is the transpose of forward mode: Re sum(ct J t) = Re sum(J^T(ct) t).
    lhs, rhs = _pairing([cotangent], [jvp]), _pairing(vjp, tangents)
    assert abs(lhs - rhs) <= tol * abs(lhs)
    return (lambda v, d: [np.asarray(x) for x in run(v, d)[:2]]), primals, tangents, jvp


@pytest.mark.parametrize(
    ("real", "tol", "step", "fd_tol"),
    [(np.float64, 1e-10, 1e-5, 1e-7), (np.float32, 2e-4, 1e-2, 2e-3)],
)
def test_quadrature_differentiates_amp_phase_and_delay_only(real, tol, step, fd_tol):
    with jax.enable_x64(real == np.float64):
        run, primals, tangents, jvp = _derivatives_match_reference("quadrature", real, tol, 0, tol)
        # Along amp alone the central difference is exact; along all three, second order.
        amp_only = [tangents[0], *(np.zeros_like(t) for t in tangents[1:])]
        shifted = [[p + s * t for p, t in zip(primals, amp_only, strict=True)] for s in (1, -1)]
        fd_amp = (run(shifted[0], tangents)[0] - run(shifted[1], tangents)[0]) / 2
        _close(run(primals, amp_only)[1], fd_amp, fd_tol, "amp")
        live = [t if i < 3 else np.zeros_like(t) for i, t in enumerate(tangents)]
        moved = [[p + s * step * t for p, t in zip(primals, live, strict=True)] for s in (1, -1)]
        fd = (run(moved[0], tangents)[0] - run(moved[1], tangents)[0]) / (2 * step)
    _close(jvp, fd, fd_tol)


@pytest.mark.parametrize(
    ("real", "tol", "value_tol"), [(np.float64, 1e-9, 1e-9), (np.float32, 1e-4, 3e-5)]
)
def test_analytic_differentiates_amp_phase_and_delay_only_and_float32_values_are_within_3e5(
    real, tol, value_tol
):
    # The reference is float64 (512-node Gauss-Legendre, exact here: windings ~125 rad), so the
    # float32 value check is the "float32 within 3e-5 of float64" on this scene.
    with jax.enable_x64(real == np.float64):
        run, primals, tangents, _ = _derivatives_match_reference(
            "analytic", real, tol, 4, value_tol
        )
        # Along amp alone the central difference is exact (test_analytic_delay_gradients
        # checks phase and delay against finite differences).
        amp_only = [tangents[0], *(np.zeros_like(t) for t in tangents[1:])]
        shifted = [[primals[0] + s * tangents[0], *primals[1:]] for s in (1, -1)]
        fd = (run(shifted[0], tangents)[0] - run(shifted[1], tangents)[0]) / 2
        jvp_amp = run(primals, amp_only)[1]
    _close(jvp_amp, fd, tol)


def _coefficient_path(budget):
    """Whether the analytic operator interpolates each antenna's coefficients once per block
    (True) or each pair end's (False) at ``budget``, from its block plan."""
    from ri_kernels._analytic import _block_plan, _bytes_per_pair_cell

    amp = analytic_args(SCENE)[0]
    n_int_f, n_coef = SCENE.dnu_mhz.size, SCENE.g_time.shape[2]
    per_pair_cell = _bytes_per_pair_cell(amp, n_int_f, 2 * n_coef - 1, 2, 6, 3)
    grid = _block_plan(A1.size, *amp.shape[2:], per_pair_cell, budget)[1]
    return N_ANT <= 2 * grid.rows_per_block


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("kept", [False, True], ids=["moments-formed", "moments-kept"])
@pytest.mark.parametrize("budget", [1 << 28, 1 << 13], ids=["per-antenna", "per-pair-end"])
def test_analytic_amp_derivatives_by_either_coefficient_path(budget, kept):
    """Value, JVP and VJP along amp against autodiff of the dense reference, with the
    coefficients interpolated per antenna (the whole scene in one block) and per pair end
    (blocks of a few baselines), with the phase moments formed in the pass and kept."""
    from ri_kernels import analytic_moments_with_indices

    assert _coefficient_path(budget) == (budget == 1 << 28)
    args = jax.tree.map(jnp.asarray, analytic_args(SCENE))
    moments = analytic_moments_with_indices(IDX, *args[1:]) if kept else None
    rng = np.random.default_rng(8)
    tangent = _random_like(args[0], rng)
    cotangent = rng.normal(size=(A1.size, *args[0].shape[2:])) * (1 + 0.5j)

    def vis_of(amp):
        return analytic_eval_with_indices(
            IDX, amp, *args[1:], memory_budget_bytes=budget, moments=moments
        )

    def reference_of(amp):
        return analytic_jnp(A1, A2, amp, *args[1:])

    for fn, what in ((vis_of, "operator"), (reference_of, "reference")):
        vis, jvp_of = jax.linearize(fn, args[0])
        out = vis, jvp_of(tangent), jax.linear_transpose(jvp_of, args[0])(cotangent)[0]
        if what == "operator":
            mine = out
    for got, want, name in zip(mine, out, ("value", "jvp", "vjp"), strict=True):
        # Measured 8e-15 (value) to 1.6e-14 (JVP) of the largest, alike on all four (the
        # reference's 512-node average is exact here to rounding).
        _close(got, want, 1e-12, name)
