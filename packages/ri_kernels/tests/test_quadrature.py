"""Quadrature operator: values against the brute-force reference, memory layout, pruning.

The float64 tests scope jax's 64-bit mode to themselves (the x64 fixture); the float32 test
runs without it, as shipped.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core
from ri_reference import make_scene, quadrature_args, quadrature_reference

from ri_kernels import make_indices, quadrature_eval_with_indices

# A partial list with reversed pairs and autocorrelations, in no particular order.
A1 = np.array([3, 0, 1, 2, 2, 0, 3, 1])
A2 = np.array([1, 2, 0, 2, 0, 0, 0, 3])


def _relative_error(vis, ref):
    return np.max(np.abs(np.asarray(vis) - ref)) / np.max(np.abs(ref))


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize(
    "shape",
    [
        dict(n_path=3, n_sf=3, n_st=3),
        dict(n_path=1, n_sf=1, n_st=2, n_int_f=1),
        dict(n_path=7, n_sf=2, n_st=4, n_int_t=3, rate_us_s=0.05),
    ],
    ids=["quadratic-stencils", "no-delay-derivatives", "sixth-order-delay"],
)
def test_float64_matches_brute_force_reference_to_1e12(shape):
    args = quadrature_args(make_scene(1, **shape))
    vis = quadrature_eval_with_indices(make_indices(4, A1, A2), *args)
    assert vis.shape == (A1.size, 3, 5) and vis.dtype == jnp.complex128
    assert _relative_error(vis, quadrature_reference(A1, A2, *args)) < 1e-12


def test_float32_is_within_3e5_of_max_vis_of_the_float64_reference():
    args = quadrature_args(make_scene(2), np.float32)
    vis = quadrature_eval_with_indices(make_indices(4, A1, A2), *args)
    assert vis.dtype == jnp.complex64
    # The reference computes in float64 from the same float32 inputs.
    assert _relative_error(vis, quadrature_reference(A1, A2, *args)) < 3e-5


@pytest.mark.usefixtures("x64")
def test_blocking_by_a_small_budget_does_not_change_the_result():
    args = quadrature_args(make_scene(3, n_time=7))
    idx = make_indices(4, A1, A2)
    whole = quadrature_eval_with_indices(idx, *args)
    # About 8 kB of fine-grid work per cell here: 64 kB gives three blocks of seven of the 21
    # cells, one byte gives one cell per block.
    blocked = quadrature_eval_with_indices(idx, *args, memory_budget_bytes=1 << 16)
    tiny = quadrature_eval_with_indices(idx, *args, memory_budget_bytes=1)
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-13 * np.abs(whole).max())
    np.testing.assert_allclose(tiny, whole, rtol=0, atol=1e-13 * np.abs(whole).max())


@pytest.mark.usefixtures("x64")
def test_a_short_list_gives_the_same_value_and_gradient_gathered_up_front_or_per_block():
    # 3 baselines touching 4 of 8 antennas: 6 slots for the touched antennas, fewer than 8, so
    # the signal is gathered: once up front when the copy fits the budget, per block when not.
    args = quadrature_args(make_scene(6, n_ant=8, n_time=6))
    idx = make_indices(8, [1, 5, 2], [6, 2, 1])
    assert idx.ant.shape == (6,)

    def loss(amp, phase, delay, budget):
        vis = quadrature_eval_with_indices(
            idx, amp, phase, delay, *args[3:], memory_budget_bytes=budget
        )
        return jnp.sum(jnp.abs(vis) ** 2), vis

    grad = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)
    (up_front, vis_up_front), (per_block, vis_per_block) = (
        grad(*args[:3], budget) for budget in (1 << 28, 1)
    )
    scale = np.abs(vis_up_front).max()
    np.testing.assert_allclose(vis_per_block, vis_up_front, rtol=0, atol=1e-13 * scale)
    for mine, want in zip(per_block, up_front, strict=True):
        np.testing.assert_allclose(mine, want, rtol=0, atol=1e-12 * np.abs(want).max())
    reference = quadrature_reference(np.array([1, 5, 2]), np.array([6, 2, 1]), *args)
    assert _relative_error(vis_per_block, reference) < 1e-12


def _avals(jaxpr):
    """Every variable's abstract value in a jaxpr and all its sub-jaxprs."""
    for eqn in jaxpr.eqns:
        for var in (*eqn.invars, *eqn.outvars):
            if hasattr(var, "aval"):
                yield var.aval
        for param in eqn.params.values():
            for sub in param if isinstance(param, list | tuple) else [param]:
                if isinstance(sub, jex_core.ClosedJaxpr):
                    yield from _avals(sub.jaxpr)
                elif isinstance(sub, jex_core.Jaxpr):
                    yield from _avals(sub)


def _name_stacks(jaxpr):
    for eqn in jaxpr.eqns:
        yield str(eqn.source_info.name_stack)
        for param in eqn.params.values():
            for sub in param if isinstance(param, list | tuple) else [param]:
                if isinstance(sub, jex_core.ClosedJaxpr):
                    yield from _name_stacks(sub.jaxpr)
                elif isinstance(sub, jex_core.Jaxpr):
                    yield from _name_stacks(sub)


@pytest.mark.usefixtures("x64")
def test_no_array_has_both_a_baseline_axis_and_a_fine_sample_axis():
    # Distinct prime sizes: 13 baselines, 7 fine times, 3 fine channels, 2 sources.
    n_ant, n_bl = 6, 13
    a1, a2 = np.triu_indices(n_ant)
    a1, a2 = a1[:n_bl], a2[:n_bl]
    args = quadrature_args(make_scene(4, n_ant=n_ant, n_int_f=3, n_int_t=7, n_freq=2))
    idx = make_indices(n_ant, a1, a2)

    def loss(amp, phase, delay, budget):
        vis = quadrature_eval_with_indices(
            idx, amp, phase, delay, *args[3:], memory_budget_bytes=budget
        )
        return jnp.sum(jnp.abs(vis) ** 2)

    fine_sizes = {7, 3 * 7, 2 * 3 * 7}
    for budget in (1 << 28, 1 << 15):  # one block of all 10 cells, and blocks of one cell
        jaxpr = jax.make_jaxpr(jax.value_and_grad(loss, argnums=(0, 1, 2)), static_argnums=3)(
            *args[:3], budget
        )
        shapes = [tuple(a.shape) for a in _avals(jaxpr.jaxpr) if hasattr(a, "shape")]
        offending = [s for s in shapes if n_bl in s and fine_sizes & set(s)]
        assert not offending, offending
        assert any(n_bl in s for s in shapes)  # the check sees the baseline axis at all


@pytest.mark.usefixtures("x64")
def test_no_phase_derivative_work_runs_when_phase_and_delay_carry_no_tangent():
    args = quadrature_args(make_scene(5))
    idx = make_indices(4, A1, A2)
    amp, phase, delay = args[:3]

    def vis_of(amp, phase, delay):
        return quadrature_eval_with_indices(idx, amp, phase, delay, *args[3:])

    def loss_of_amp(amp):
        return jnp.sum(jnp.abs(vis_of(amp, phase, delay)) ** 2)

    def phase_work(fn, *inputs):
        stacks = set(_name_stacks(jax.make_jaxpr(fn)(*inputs).jaxpr))
        return any("phase_tangent" in s for s in stacks)

    assert not phase_work(lambda t: jax.jvp(lambda a: vis_of(a, phase, delay), (amp,), (t,)), amp)
    assert not phase_work(jax.grad(loss_of_amp), amp)
    # The marker is found when the phase or the delay is differentiated.
    assert phase_work(lambda t: jax.jvp(lambda p: vis_of(amp, p, delay), (phase,), (t,)), phase)
    assert phase_work(jax.grad(lambda d: jnp.sum(jnp.abs(vis_of(amp, phase, d)) ** 2)), delay)
