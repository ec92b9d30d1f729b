"""The analytic operator's series across a channel (``channel_terms``): the phase moments
formed once at each channel's centre, and each fine channel's made from them, against dense
float64 quadrature at every fine channel (ri_reference.analytic_reference, which keeps each
fine channel's own frequency in every term of the phase).

The scene's channels are 1 MHz wide at 1 GHz with seven fine channels, its delay rates up to
about 0.1 us/s over 4 s integrations: cross terms epsilon = 2 pi dnu d1 T/2 up to 0.375 rad,
far past navigation satellites' (about 3e-4 rad at 10 kHz), so that every term of the series
shows. What the series cannot hold is the curvature's own change across the channel, which
it takes at the centre: dnu / nu (|b| + |c|), 3.9e-5 here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ri_reference import analytic_args, analytic_reference, make_scene

from ri_kernels import (
    MAX_CHANNEL_TERMS,
    analytic_eval_with_indices,
    analytic_moments_with_indices,
    channel_series_error,
    fewest_channel_terms,
    make_indices,
)

N_ANT = 4
A1, A2 = np.triu_indices(N_ANT, 1)
INDICES = make_indices(N_ANT, A1, A2)


def _scene():
    return make_scene(
        5,
        n_ant=N_ANT,
        n_freq=3,
        n_time=4,
        n_int_f=7,
        n_path=4,
        chan_width_mhz=1.0,
        int_time=4.0,
        rate_us_s=0.02,
        omega_per_s=1e-4,
    )


def _bounds(scene):
    """The scene's largest cross term epsilon (rad) and the centre curvature's error."""
    spread = np.ptp(scene.delay_us, axis=0).max(axis=(0, 1))  # per delay order
    half, dnu = scene.int_time / 2, np.abs(scene.dnu_mhz).max()
    epsilon = 2 * np.pi * dnu * spread[1] * half
    b = np.pi * scene.freq_mhz.max() * spread[2] * half**2
    c = np.pi / 3 * scene.freq_mhz.max() * spread[3] * half**3
    return epsilon, dnu / scene.freq_mhz.min() * (b + c)


# Measured error over the largest reference value at each J (float64): the series' terms
# until the curvature's change across the channel (1.03e-5) is all that is left.
MEASURED = {0: 9.2e-15, 1: 4.39e-3, 2: 3.55e-4, 3: 3.16e-5, 4: 1.03e-5, 6: 1.03e-5}


@pytest.mark.usefixtures("x64")
def test_series_across_a_channel_against_dense_quadrature_at_every_fine_channel_float64():
    scene = _scene()
    args = analytic_args(scene)
    ref = analytic_reference(A1, A2, *args)
    epsilon, centred = _bounds(scene)
    assert 0.3 < epsilon < 0.4 and centred < 5e-5  # 0.375 rad and 3.9e-5
    errors = {}
    for terms, measured in MEASURED.items():
        vis = np.asarray(analytic_eval_with_indices(INDICES, *args, channel_terms=terms))
        errors[terms] = np.max(np.abs(vis - ref)) / np.max(np.abs(ref))
        bound = channel_series_error(epsilon, terms) + (centred if terms else 1e-12)
        assert errors[terms] <= bound, (terms, errors[terms], bound)
        assert errors[terms] <= 10 * measured, (terms, errors[terms])
    print({k: f"{v:.2e}" for k, v in errors.items()})
    # each term more gains about a factor of ten until the centre's curvature is left
    assert errors[1] > 10 * errors[2] > 100 * errors[3]


@pytest.mark.usefixtures("x64")
def test_series_gradients_match_the_per_fine_channel_operators_float64():
    """Derivatives in amp, phase and delay: through the same custom JVP, whose moment
    derivatives i W_{m+k} are made across the channel like the moments."""
    scene = _scene()
    args = analytic_args(scene)
    weight = np.random.default_rng(7).normal(size=(A1.size, 3, 4))

    def loss(amp, phase, delay, terms):
        vis = analytic_eval_with_indices(INDICES, amp, phase, delay, *args[3:], channel_terms=terms)
        return jnp.sum(weight * vis.real) + jnp.sum(jnp.abs(vis) ** 2)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)
    exact, series = grad(*args[:3], 0), grad(*args[:3], 4)
    errors = [
        float(np.max(np.abs(np.asarray(s) - np.asarray(e))) / np.max(np.abs(np.asarray(e))))
        for e, s in zip(exact, series, strict=True)
    ]
    print(f"amp, phase, delay: {errors}")
    # measured 1.1e-5, 1.5e-5, 9.8e-6: the values' 1.0e-5, through the loss
    assert max(errors) < 1e-3


@pytest.mark.usefixtures("x64")
def test_kept_moments_at_the_channels_centres_equal_the_formed_ones_float64():
    scene = _scene()
    args = analytic_args(scene)
    rest = args[1:]
    moments = analytic_moments_with_indices(INDICES, *rest, channel_terms=3)
    per_channel = analytic_moments_with_indices(INDICES, *rest)
    # 2 n_coef - 1 + 2 moments at one point per channel, against 2 n_coef - 1 at seven
    assert moments.shape == (7, A1.size, 3, 4, 2, 1) and per_channel.shape[-1] == 7
    formed = analytic_eval_with_indices(INDICES, *args, channel_terms=3)
    kept = analytic_eval_with_indices(INDICES, *args, channel_terms=3, moments=moments)
    apart = np.max(np.abs(np.asarray(kept) - np.asarray(formed))) / np.max(np.abs(formed))
    assert apart < 1e-13  # measured 1.8e-16

    def kept_loss(amp):
        vis = analytic_eval_with_indices(INDICES, amp, *rest, channel_terms=3, moments=moments)
        return jnp.sum(jnp.abs(vis) ** 2)

    def formed_loss(amp):
        vis = analytic_eval_with_indices(INDICES, amp, *rest, channel_terms=3)
        return jnp.sum(jnp.abs(vis) ** 2)

    g_kept, g_formed = (np.asarray(jax.grad(f)(args[0])) for f in (kept_loss, formed_loss))
    assert np.max(np.abs(g_kept - g_formed)) <= 1e-12 * np.max(np.abs(g_formed))
    # moments formed at every fine channel are not the centre's
    with pytest.raises(ValueError, match="channel_terms=3"):
        analytic_eval_with_indices(INDICES, *args, channel_terms=3, moments=per_channel)


def test_fewest_channel_terms_and_the_series_bound():
    # |epsilon|^J / J! e^|epsilon|
    assert channel_series_error(0.1, 2) == pytest.approx(0.01 / 2 * np.exp(0.1), rel=1e-15)
    assert channel_series_error(0.1, 0) == 0.0  # at every fine channel: exact
    assert fewest_channel_terms(0.0, 1e-6) == 1  # no cross term: the phasor alone
    # 0.1 rad within 1e-3: 0.11, 5.5e-3, then 1.8e-4 at three terms
    assert fewest_channel_terms(0.1, 1e-3) == 3
    assert fewest_channel_terms(5.0, 1e-9, channel_terms=4) == 0  # none does
    # nothing asked: float32's epsilon, 1.2e-7, which five terms reach (9.2e-8)
    assert fewest_channel_terms(0.1, 0.0, channel_terms=MAX_CHANNEL_TERMS) == 5


def test_channel_terms_out_of_range_is_refused():
    scene = _scene()
    args = analytic_args(scene, np.float32)
    with pytest.raises(ValueError, match="channel_terms"):
        analytic_eval_with_indices(INDICES, *args, channel_terms=MAX_CHANNEL_TERMS + 1)
