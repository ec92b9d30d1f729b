"""The analytic operator's series across a channel (``channel_terms``): the phase moments
formed once at each channel's centre, and each fine channel's made from them, against dense
float64 quadrature at every fine channel (ri_reference.analytic_reference, which keeps each
fine channel's own frequency in every term of the phase).

The scene's channels are 1 MHz wide at 1 GHz with seven fine channels, its delay rates up to
about 0.1 us/s over 4 s integrations: cross terms epsilon = 2 pi dnu d1 T/2 up to 0.375 rad,
far past navigation satellites' (about 3e-4 rad at 10 kHz), so that every term of the series
shows. The curvature's change across the channel (its bend, dnu / nu (|b| + |c|): 3.9e-5 rad
here, 3.9e-4 in the second scene, whose |b| reaches 0.9 rad), taken to first order, leaves
its square.
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


def _scene(omega=1e-4):
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
        omega_per_s=omega,
    )


def _bounds(scene):
    """The scene's largest cross term epsilon and bend (rad)."""
    spread = np.ptp(scene.delay_us, axis=0).max(axis=(0, 1))  # per delay order
    half, dnu = scene.int_time / 2, np.abs(scene.dnu_mhz).max()
    epsilon = 2 * np.pi * dnu * spread[1] * half
    b = np.pi * scene.freq_mhz.max() * spread[2] * half**2
    c = np.pi / 3 * scene.freq_mhz.max() * spread[3] * half**3
    return epsilon, dnu / scene.freq_mhz.min() * (b + c)


# Measured error over the largest reference value at each J (float64), per scene (the
# delays' angular rate omega): each term gains a factor of ten to twenty, the bend's square
# (1.5e-9 and 1.5e-7 rad^2 / 2) below every one.
MEASURED = {
    1e-4: {0: 9.2e-15, 1: 4.39e-3, 2: 3.55e-4, 3: 3.16e-5, 4: 2.27e-6, 6: 6.53e-9},
    1e-3: {0: 1.1e-14, 1: 4.04e-3, 2: 3.26e-4, 3: 2.92e-5, 4: 2.09e-6, 6: 7.39e-9},
}


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("omega, bend_limit", [(1e-4, 5e-5), (1e-3, 5e-4)])
def test_series_across_a_channel_against_dense_quadrature_at_every_fine_channel_float64(
    omega, bend_limit
):
    scene = _scene(omega)
    args = analytic_args(scene)
    ref = analytic_reference(A1, A2, *args)
    epsilon, bend = _bounds(scene)
    assert 0.3 < epsilon < 0.4 and bend_limit / 2 < bend < bend_limit  # 0.375; 3.9e-5, 3.9e-4
    errors = {}
    for terms, measured in MEASURED[omega].items():
        vis = np.asarray(analytic_eval_with_indices(INDICES, *args, channel_terms=terms))
        errors[terms] = np.max(np.abs(vis - ref)) / np.max(np.abs(ref))
        bound = channel_series_error(epsilon, terms, bend) if terms else 1e-12
        assert errors[terms] <= bound, (terms, errors[terms], bound)
        assert errors[terms] <= 10 * measured, (terms, errors[terms])
    print({k: f"{v:.2e}" for k, v in errors.items()})
    assert errors[1] > 10 * errors[2] > 100 * errors[3] > 1000 * errors[4]
    # the bend dropped: what is left at six terms is the bend itself (measured 1.0e-5 and
    # 9.8e-5, about a quarter of it), within e^|epsilon| bend
    vis = analytic_eval_with_indices(INDICES, *args, channel_terms=6, channel_bend=False)
    dropped = np.max(np.abs(np.asarray(vis) - ref)) / np.max(np.abs(ref))
    print(f"bend dropped: {dropped:.2e}")
    assert bend / 10 < dropped <= channel_series_error(epsilon, 6, bend, channel_bend=False)


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
    # measured 7.5e-7, 4.9e-6, 1.5e-6: the values' 2.3e-6, through the loss
    assert max(errors) < 5e-4


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
def test_kept_moments_at_the_channels_centres_equal_the_formed_ones_float64():
    scene = _scene()
    args = analytic_args(scene)
    rest = args[1:]
    moments = analytic_moments_with_indices(INDICES, *rest, channel_terms=3)
    per_channel = analytic_moments_with_indices(INDICES, *rest)
    # 2 n_coef - 1 + J + 2 moments (for the series and the bend) at one point per channel,
    # against 2 n_coef - 1 at seven
    assert moments.shape == (10, A1.size, 3, 4, 2, 1) and per_channel.shape[-1] == 7
    for bend in (True, False):  # kept moments serve either
        formed = analytic_eval_with_indices(INDICES, *args, channel_terms=3, channel_bend=bend)
        kept = analytic_eval_with_indices(
            INDICES, *args, channel_terms=3, channel_bend=bend, moments=moments
        )
        apart = np.max(np.abs(np.asarray(kept) - np.asarray(formed))) / np.max(np.abs(formed))
        assert apart < 1e-13  # measured 4.5e-17 (with the bend), 2.4e-16 (without)

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
    # |epsilon|^J / J! e^|epsilon|, and e^|epsilon| bend^2 / 2
    assert channel_series_error(0.1, 2) == pytest.approx(0.01 / 2 * np.exp(0.1), rel=1e-15)
    bent = channel_series_error(0.1, 2, bend=1e-3)
    assert bent == pytest.approx((0.01 / 2 + 1e-6 / 2) * np.exp(0.1), rel=1e-15)
    assert fewest_channel_terms(0.0, 1e-7, bend=1e-3) == 0  # the bend alone passes 1e-7
    # a bend of 1e-3 rad within 1e-4: to first order (5e-7), not dropped (1e-3)
    assert fewest_channel_terms(0.0, 1e-4, bend=1e-3) == 1
    assert fewest_channel_terms(0.0, 1e-4, bend=1e-3, channel_bend=False) == 0
    assert channel_series_error(0.0, 1, 1e-3, channel_bend=False) == pytest.approx(1e-3)
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
