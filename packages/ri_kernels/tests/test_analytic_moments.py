"""Phase moments formed once (analytic_moments_with_indices) and passed to the analytic
operator: the same visibilities and amp-gradients as forming them in the call.

The scene is test_analytic's (3 antennas, 5 baselines with both orientations, 2 sources,
2 x 6 cells, 2 fine channels, twelve winding regimes up to |a| = 1e4 rad), so the moments
cover every branch of the closed form; the dense-quadrature reference checks the result is
right, not only equal to itself.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_args, make_scene
from test_analytic import IDX, SHAPE, _per_cell_error, _regime_case, _relative_error

from ri_kernels import analytic_eval_with_indices, analytic_moments_with_indices, make_indices


def _loss(amp, args, moments=None, **options):
    vis = analytic_eval_with_indices(IDX, amp, *args[1:], moments=moments, **options)
    weights = jnp.arange(1.0, vis.size + 1).reshape(vis.shape)  # every cell counts differently
    return jnp.sum(weights * jnp.abs(vis) ** 2)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize(("segments", "terms", "cubic_terms"), [(2, 6, 3), (1, 6, 0)])
def test_given_moments_equal_moments_formed_in_the_call(segments, terms, cubic_terms):
    args, ref = _regime_case(segments, cubic_terms > 0)
    options = {"segments": segments, "terms": terms, "cubic_terms": cubic_terms}
    moments = analytic_moments_with_indices(IDX, *args[1:], **options)
    n_coef = args[3].g_time.shape[2]
    n_rfi, n_freq, n_time = args[0].shape[1:]
    assert moments.shape == (2 * n_coef - 1, IDX.n_bl, n_freq, n_time, n_rfi, 2)
    assert moments.dtype == np.complex128
    formed = analytic_eval_with_indices(IDX, *args, **options)
    given = analytic_eval_with_indices(IDX, *args, moments=moments)
    error = np.max(np.abs(np.asarray(given) - np.asarray(formed))) / np.max(np.abs(formed))
    print(f"given against formed moments: {error:.1e} of the largest visibility")
    # Measured 0: the same moments, summed the same way.
    assert error < 1e-14
    assert _relative_error(given, ref) < 1e-12  # and right (test_analytic: measured 6.9e-15)
    assert _per_cell_error(given, ref) < 3e-11

    value, grad = jax.value_and_grad(_loss)(args[0], args, **options)
    value_c, grad_c = jax.value_and_grad(_loss)(args[0], args, moments)
    grad_error = np.max(np.abs(np.asarray(grad_c) - np.asarray(grad))) / np.max(np.abs(grad))
    print(f"value {abs(value_c / value - 1):.1e} apart, gradient {grad_error:.1e} of its largest")
    # Measured 0 and 0 (float64); the criterion is 1e-12.
    assert float(value_c) == pytest.approx(float(value), rel=1e-12)
    assert grad_error < 1e-12


@pytest.mark.usefixtures("x64")
def test_moments_formed_in_small_blocks_equal_one_block():
    """Budgets that split the pairs and cells (down to one cell per block) form the same
    moments, and the operator given them blocks its own sum in the same way."""
    args, _ = _regime_case(2, True)
    whole = np.asarray(analytic_moments_with_indices(IDX, *args[1:]))
    reference = np.asarray(analytic_eval_with_indices(IDX, *args))
    for budget in (1 << 12, 1):
        blocked = np.asarray(
            analytic_moments_with_indices(IDX, *args[1:], memory_budget_bytes=budget)
        )
        # Measured bit for bit with jax 0.10.2, and 1.1e-16 apart (2.7e-15 relative) at the
        # jax 0.8.0 floor, whose XLA fuses the blocks' arithmetic differently.
        np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-14 * np.max(np.abs(whole)))
        vis = analytic_eval_with_indices(IDX, *args, moments=blocked, memory_budget_bytes=budget)
        error = np.max(np.abs(np.asarray(vis) - reference)) / np.max(np.abs(reference))
        print(f"budget {budget} B: {error:.1e}")
        assert error < 1e-14  # measured 0


def test_float32_moments_equal_those_formed_in_the_call():
    """jax's 64-bit mode off, as shipped: the two-float phase arithmetic is the same either
    way, so the given moments reproduce the call's own result."""
    scene = make_scene(5, n_path=4, rate_us_s=0.3, **SHAPE)
    args = analytic_args(scene, np.float32)
    moments = analytic_moments_with_indices(IDX, *args[1:])
    assert moments.dtype == np.complex64
    formed = np.asarray(analytic_eval_with_indices(IDX, *args))
    given = np.asarray(analytic_eval_with_indices(IDX, *args, moments=moments))
    error = np.max(np.abs(given - formed)) / np.max(np.abs(formed))
    print(f"float32, given against formed: {error:.1e} of the largest")
    # Measured 0; the bound is about 16 float32 roundings of the largest value.
    assert error < 1e-6


def test_forming_the_moments_takes_a_block_beside_them_not_copies_of_them():
    """Forming the moments of 276 pairs (7.6 MiB) in blocks of about 1 MiB: the compiled
    program's temporaries are a block's working set and the per-antenna inputs, a fraction of
    the moments themselves. Stacking the blocks and reordering them into the result took 1.19
    times the moments (a peak of 2.2 times their bytes, as in the 48-station case that ran a
    16 GB chip out of memory); formed in place, 0.22 times."""
    n_ant = 24
    scene = make_scene(0, n_ant=n_ant, n_rfi=3, n_freq=4, n_time=30, n_int_f=2)
    args = analytic_args(scene, np.float32)
    indices = make_indices(n_ant, *np.triu_indices(n_ant, 1))

    def form(phase, delay_us, tables, freq_mhz):
        return analytic_moments_with_indices(
            indices, phase, delay_us, tables, freq_mhz, memory_budget_bytes=1 << 20
        )

    stats = jax.jit(form).lower(*args[1:]).compile().memory_analysis()
    ratio = stats.temp_size_in_bytes / stats.output_size_in_bytes
    print(f"moments {stats.output_size_in_bytes / 2**20:.1f} MiB, temporaries {ratio:.2f} of it")
    assert stats.output_size_in_bytes > 3 * (1 << 20)  # several blocks
    assert ratio < 0.5  # measured 0.22; 1.19 stacked and reordered


def test_moments_of_other_arguments_are_refused_with_their_expected_shape():
    scene = make_scene(5, n_path=4, rate_us_s=0.3, **SHAPE)
    args = analytic_args(scene, np.float32)
    moments = analytic_moments_with_indices(IDX, *args[1:])
    with pytest.raises(ValueError, match=r"moments .*\(2 n_coef - 1, n_bl, n_freq, n_time"):
        analytic_eval_with_indices(IDX, *args, moments=moments[:, :3])
    with pytest.raises(TypeError, match="phase must be a float32 or float64 array"):
        analytic_moments_with_indices(IDX, args[0], *args[2:])  # amp where phase belongs
