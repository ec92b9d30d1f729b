"""Masked Gaussian likelihood against direct numpy sums, with NaN in flagged cells."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal.model import likelihood

# float64 by design: complex128 data against direct numpy sums to 1e-12; the single-precision
# test turns the mode off around the float32 sums, as shipped.
pytestmark = pytest.mark.usefixtures("x64")

N_BL, N_FREQ, N_TIME = 6, 3, 10


def _data(seed=0, flag_fraction=0.3):
    """Model, data with NaN in every flagged cell, flags and per-baseline noise."""
    rng = np.random.default_rng(seed)
    shape = (N_BL, N_FREQ, N_TIME)
    model = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    noise = rng.uniform(0.5, 2.0, N_BL)
    vis = model + noise[:, None, None] * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    flags = rng.random(shape) < flag_fraction
    flags[0] = True  # one fully flagged baseline
    vis[flags] = np.nan + 1j * np.nan
    return model, vis, flags, noise


# jitted, so a boolean compaction (data-dependent shape) could not even be traced
_nll = jax.jit(likelihood.neg_log_likelihood)
_chi2 = jax.jit(likelihood.reduced_chi2)
_chi2_bl = jax.jit(likelihood.chi2_per_baseline)


@pytest.mark.parametrize("per_baseline", [False, True])
def test_neg_log_likelihood_and_chi2_equal_direct_numpy_sums(per_baseline):
    model, vis, flags, noise = _data()
    noise = noise if per_baseline else 1.3
    sigma = np.broadcast_to(noise, (N_BL,))
    nll = 0.0
    n_points = 0
    for b in range(N_BL):
        for f in range(N_FREQ):
            for t in range(N_TIME):
                if not flags[b, f, t]:
                    r = model[b, f, t] - vis[b, f, t]
                    nll += (r.real**2 + r.imag**2) / (2 * sigma[b] ** 2)
                    n_points += 1
    np.testing.assert_allclose(float(_nll(model, vis, flags, noise)), nll, rtol=1e-12)
    assert int(likelihood.count_unflagged(flags)) == n_points
    np.testing.assert_allclose(float(_chi2(model, vis, flags, noise)), nll / n_points, rtol=1e-12)
    np.testing.assert_allclose(
        float(_chi2(model, vis, flags, noise, n_points)), nll / n_points, rtol=1e-12
    )


def test_reduced_chi2_is_one_for_the_true_model():
    rng = np.random.default_rng(1)
    shape = (50, 8, 100)
    truth = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    noise = rng.uniform(0.1, 1.0, 50)
    vis = truth + noise[:, None, None] * (rng.normal(size=shape) + 1j * rng.normal(size=shape))
    flags = rng.random(shape) < 0.1
    vis[flags] = np.nan
    n_points = np.count_nonzero(~flags)
    chi2 = float(_chi2(truth, vis, flags, noise))
    assert abs(chi2 - 1) < 4 / np.sqrt(n_points)


def test_gradient_is_finite_with_nan_in_flagged_cells():
    model, vis, flags, noise = _data(2)
    grad = jax.jit(jax.grad(lambda m: likelihood.neg_log_likelihood(m, vis, flags, noise)))
    g = np.asarray(grad(jnp.asarray(model)))
    assert np.all(np.isfinite(g))
    np.testing.assert_array_equal(g[flags], 0)
    # d/dm of |m - v|^2 / (2 s^2) is (m - v) / s^2, conjugated by JAX's convention for complex
    expected = np.conj(model - vis) / noise[:, None, None] ** 2
    np.testing.assert_allclose(g[~flags], expected[~flags], rtol=1e-12)


def test_blocks_of_baselines_reduce_to_the_whole():
    model, vis, flags, noise = _data(3)
    whole = np.asarray(_chi2_bl(model, vis, flags, noise))
    blocks = [slice(0, 2), slice(2, 5), slice(5, 6)]
    for rows in blocks:
        part = np.asarray(_chi2_bl(model[rows], vis[rows], flags[rows], noise[rows]))
        np.testing.assert_array_equal(part, whole[rows])
    total = sum(float(_nll(model[r], vis[r], flags[r], noise[r])) for r in blocks)
    np.testing.assert_allclose(total, float(_nll(model, vis, flags, noise)), rtol=1e-13)
    assert whole[0] == 0.0, "a fully flagged baseline contributes nothing"


def test_residual_is_zero_in_flagged_cells_and_data_minus_model_elsewhere():
    model, vis, flags, _ = _data(4)
    r = np.asarray(jax.jit(likelihood.residual)(model, vis, flags))
    np.testing.assert_array_equal(r[flags], 0)
    np.testing.assert_array_equal(r[~flags], (vis - model)[~flags])


def test_loss_is_negative_log_posterior_per_point():
    nll, priors, n_points = jnp.asarray(120.0), [jnp.asarray(3.0), jnp.asarray(7.5)], 40
    np.testing.assert_allclose(float(likelihood.loss(nll, priors, n_points)), 130.5 / 40)


def test_single_precision_inputs_give_single_precision_sums():
    model, vis, flags, noise = _data(5)
    args = (model.astype(np.complex64), vis.astype(np.complex64), flags, noise.astype(np.float32))
    with jax.enable_x64(False):
        nll32 = _nll(*args)
    assert nll32.dtype == jnp.float32
    np.testing.assert_allclose(float(nll32), float(_nll(model, vis, flags, noise)), rtol=1e-5)


def test_resolve_noise_broadcasts_a_scalar_and_refuses_bad_values():
    np.testing.assert_array_equal(likelihood.resolve_noise(0.5, 3), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="baseline 1"):
        likelihood.resolve_noise([1.0, 0.0, 2.0], 3)
    with pytest.raises(ValueError, match="baseline 0"):
        likelihood.resolve_noise(-1.0, 3)
    with pytest.raises(ValueError, match=r"expected a scalar or \(3,\)"):
        likelihood.resolve_noise([1.0, 2.0], 3)


def test_validate_vis_allows_nan_only_where_flagged():
    _, vis, flags, _ = _data(6)
    likelihood.validate_vis(vis, flags)
    vis[1, 2, 3] = np.inf
    flags[1, 2, 3] = False
    with pytest.raises(ValueError, match=r"\(1, 2, 3\)"):
        likelihood.validate_vis(vis, flags)
