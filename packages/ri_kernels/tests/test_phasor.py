"""Polynomial unit phasors against numpy's float64 cosine and sine of the same angles."""

import jax
import numpy as np
import pytest

from ri_kernels._phasor import unit_phasor


@pytest.mark.parametrize(("real", "tol"), [(np.float32, 2.5e-7), (np.float64, 2e-15)])
def test_unit_phasor_matches_numpy_to_working_precision(real, tol):
    rng = np.random.default_rng(0)
    turns = np.concatenate(
        [
            rng.uniform(-1e4, 1e4, 20000),
            rng.uniform(-1, 1, 20000),
            np.arange(-8, 9) / 8,  # the quarter- and eighth-turn seams of the reduction
        ]
    ).astype(real)
    with jax.enable_x64(real == np.float64):
        phasor = np.asarray(jax.jit(unit_phasor)(turns))
    exact = np.exp(2j * np.pi * (turns.astype(np.float64) % 1))
    assert phasor.dtype == (np.complex64 if real == np.float32 else np.complex128)
    assert np.max(np.abs(phasor - exact)) < tol
