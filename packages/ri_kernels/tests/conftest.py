"""Shared test setup: float64 must be available for the complex128 operators and references."""

import jax

jax.config.update("jax_enable_x64", True)
