"""``amp_factor``: a signal ``amp_factor[a] * amp[0]`` shared by every antenna through a known
real factor gives what its product passed as ``amp`` gives, in value, JVP and VJP, and the
product agrees with the brute-force references.

The operators with the product passed whole are themselves checked against the references
and finite differences elsewhere (test_quadrature, test_analytic, test_gradients); here the
factored path, which forms the product only at each block's cells, is compared with them on
blocks small enough to run under ``lax.map`` and on lists that touch a subset of antennas, and
on one block (where the quadrature operator forms the product up front).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import (
    analytic_args,
    analytic_reference,
    make_scene,
    quadrature_args,
    quadrature_reference,
)

from ri_kernels import analytic_eval_with_indices, make_indices, quadrature_eval_with_indices

N_ANT = 6
SCENE = make_scene(7, n_ant=N_ANT, n_freq=3, n_time=4, n_int_t=3, rate_us_s=0.02)
SEAMS = {"quadrature": quadrature_eval_with_indices, "analytic": analytic_eval_with_indices}
ARGS = {"quadrature": quadrature_args, "analytic": analytic_args}
REFERENCES = {"quadrature": quadrature_reference, "analytic": analytic_reference}
# Baseline lists: every pair with autocorrelations; a short list touching three of the six
# antennas (the quadrature gathers them); budgets: the default (one block) and a tiny one (a
# block per cell or per pair under lax.map, where reverse mode accumulates the inputs'
# cotangents across blocks).
LISTS = {
    "all": np.triu_indices(N_ANT),
    "three antennas": (np.array([0, 0, 4]), np.array([2, 4, 4])),
}
BUDGETS = {"one block": None, "many blocks": 2**10}


def _factored(seed=3):
    """A shared signal (1, n_rfi, n_freq, n_time) and a positive real factor per antenna."""
    rng = np.random.default_rng(seed)
    shape = SCENE.amp.shape
    shared = rng.normal(size=(1, *shape[1:])) + 1j * rng.normal(size=(1, *shape[1:]))
    factor = rng.uniform(0.2, 1.5, shape)
    return shared, factor


def _seam(name, indices, budget, real=np.float64):
    options = {} if budget is None else {"memory_budget_bytes": budget}
    rest = ARGS[name](SCENE, real)[3:]

    def run(amp, phase, delay_us, amp_factor=None):
        return SEAMS[name](indices, amp, phase, delay_us, *rest, amp_factor=amp_factor, **options)

    return run


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("pairs", LISTS)
@pytest.mark.parametrize("name", SEAMS)
def test_a_factored_signal_equals_its_product_in_value_jvp_and_vjp(name, pairs, budget):
    a1, a2 = LISTS[pairs]
    run = _seam(name, make_indices(N_ANT, a1, a2), BUDGETS[budget])
    shared, factor = _factored()
    phase, delay_us = SCENE.phase, SCENE.delay_us

    def factored(u, f, p, d):
        return run(u, p, d, amp_factor=f)

    def whole(u, f, p, d):
        return run(f * u, p, d)

    rng = np.random.default_rng(11)
    primals = (shared, factor, phase, delay_us)
    tangents = (
        rng.normal(size=shared.shape) + 1j * rng.normal(size=shared.shape),
        rng.normal(size=factor.shape),
        1e-4 * rng.normal(size=phase.shape),  # well inside a turn
        1e-4 * rng.normal(size=delay_us.shape),
    )
    vis, jvp = jax.jvp(factored, primals, tangents)
    vis_whole, jvp_whole = jax.jvp(whole, primals, tangents)
    cotangent = rng.normal(size=vis.shape) + 1j * rng.normal(size=vis.shape)
    vjp = jax.vjp(factored, *primals)[1](cotangent)
    vjp_whole = jax.vjp(whole, *primals)[1](cotangent)
    # Measured: at most 1.2e-15 of each array's largest entry, in every case (float64).
    for mine, expected in zip((vis, jvp, *vjp), (vis_whole, jvp_whole, *vjp_whole), strict=True):
        scale = np.abs(expected).max()
        assert scale > 0
        np.testing.assert_allclose(mine, expected, rtol=0, atol=1e-13 * scale)
    # And the brute-force reference of the product; measured: at most 2.3e-14 (quadrature)
    # and 8.2e-16 (analytic) of the largest visibility.
    reference = REFERENCES[name](a1, a2, factor * shared, phase, delay_us, *ARGS[name](SCENE)[3:])
    np.testing.assert_allclose(vis, reference, rtol=0, atol=3e-12 * np.abs(reference).max())


@pytest.mark.parametrize("name", SEAMS)
def test_a_factored_float32_signal_matches_the_float64_product(name):
    # The shipped precision: float32 with jax's 64-bit mode off, against the product in
    # float64 numpy (the brute-force reference). Measured: 5.4e-6 (quadrature) and 1.5e-7
    # (analytic) of the largest visibility.
    a1, a2 = LISTS["all"]
    run = _seam(name, make_indices(N_ANT, a1, a2), BUDGETS["many blocks"], np.float32)
    shared, factor = _factored()
    args32 = ARGS[name](SCENE, np.float32)
    vis = run(
        jnp.asarray(shared, jnp.complex64),
        args32[1],
        args32[2],
        amp_factor=jnp.asarray(factor, jnp.float32),
    )
    assert vis.dtype == jnp.complex64
    reference = REFERENCES[name](a1, a2, factor * shared, *ARGS[name](SCENE)[1:])
    tol = {"quadrature": 5e-4, "analytic": 2e-5}[name]
    np.testing.assert_allclose(vis, reference, rtol=0, atol=tol * np.abs(reference).max())


@pytest.mark.parametrize("name", SEAMS)
def test_a_factor_with_a_signal_per_antenna_or_the_wrong_dtype_is_refused(name):
    a1, a2 = LISTS["all"]
    run = _seam(name, make_indices(N_ANT, a1, a2), None, np.float32)
    args32 = ARGS[name](SCENE, np.float32)
    amp, phase, delay_us = args32[:3]
    factor = np.ones(amp.shape, np.float32)
    with pytest.raises(ValueError, match=r"with amp_factor, amp is the part .* \(1, n_rfi"):
        run(amp, phase, delay_us, amp_factor=factor)
    with pytest.raises(TypeError, match="amp_factor has dtype float64; expected float32"):
        run(amp[:1], phase, delay_us, amp_factor=factor.astype(np.float64))
    with pytest.raises(ValueError, match=r"amp_factor has shape \(6, 1, 3, 4\); expected"):
        run(amp[:1], phase, delay_us, amp_factor=factor[:, :1])
