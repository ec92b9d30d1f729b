"""Two-float arithmetic in float32 (64-bit mode off, as the analytic operator uses it) against
numpy float64, compiled by XLA: a backend that reassociated sums or rounded a partial product
would fail here before it skewed the operator's phases."""

import math

import jax
import numpy as np

from ri_kernels import _two_float as tf

RNG = np.random.default_rng(11)
X = (RNG.normal(size=4096) * 10.0 ** RNG.uniform(-3, 4, 4096)).astype(np.float32)
Y = (RNG.normal(size=4096) * 10.0 ** RNG.uniform(-3, 4, 4096)).astype(np.float32)


def _wide(pair):
    return np.asarray(pair[0], np.float64) + np.asarray(pair[1], np.float64)


def test_two_sum_is_exact():
    s = jax.jit(tf.two_sum)(X, Y)
    np.testing.assert_array_equal(_wide(s), X.astype(np.float64) + Y)


def test_two_prod_is_within_2_pow_46_of_the_product():
    exact = X.astype(np.float64) * Y
    p = jax.jit(tf.two_prod)(X, Y)
    # Measured 7.4e-15 (2^-46.9) on a similar draw; one float32 product errs by 2^-24.
    assert np.max(np.abs(_wide(p) - exact) / np.abs(exact)) < 2.0**-46


def test_fraction_of_a_winding_keeps_its_fraction_of_a_turn():
    # 1600 turns (1e4 rad) in turns from rad, as the moments form them from float32 angles.
    angle = np.float32(1e4) + np.float32(0.123)
    turns = jax.jit(lambda a: tf.times((a, 0.0 * a), tf.INV_TWO_PI))(angle)
    reduced = float(jax.jit(tf.fraction)(turns))
    expected = float(angle) / (2 * math.pi)
    # Within the float32 rounding of a fraction below 1/2 (2^-25 = 3e-8): measured 7.3e-9.
    assert abs(reduced - (expected - round(expected))) < 3e-8
    # One float32 turn count of 1591.57 is off by 4.5e-5 turn.
    single = float(np.float32(angle) * np.float32(1 / (2 * math.pi)))
    assert abs(single - expected) > 1e-5
