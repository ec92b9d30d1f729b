"""Whitened parameters: theta = sigma * z + mu with z ~ N(0, I), so -log prior = |z|^2 / 2."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def prior(params: Any) -> jax.Array:
    """Negative log prior of whitened parameters, sum over every leaf of z^2 / 2 (constant dropped).

    Returns a scalar of the leaves' dtype (0 for a pytree with no elements).
    """
    terms = [0.5 * jnp.sum(jnp.square(leaf)) for leaf in jax.tree_util.tree_leaves(params)]
    if not terms:
        return jnp.zeros(())
    return sum(terms[1:], start=terms[0])


def draw(key: jax.Array | None, shape: tuple[int, ...], dtype: np.dtype) -> jax.Array:
    """A prior draw z ~ N(0, I) of ``shape``, or zeros (the prior mean) when ``key`` is None."""
    if key is None:
        return jnp.zeros(shape, dtype)
    # Drawn flat and reshaped: on CPU, XLA compiled the 4-d draw (2, 2, 7, 13) in 5 s against
    # 0.9 s for the same 364 numbers flat (jax 0.10.2, 2 cores).
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)
