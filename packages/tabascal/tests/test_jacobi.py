"""The Jacobi eigendecomposition that the Levenberg-Marquardt solver's preconditioner uses on
the CPU, against numpy's LAPACK in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tabascal.fitting import jacobi

SHAPES = [(1, 1), (3, 2), (40, 5), (6, 7), (4, 50), (2, 111)]


def _symmetric(rows, n, seed=0):
    a = np.random.default_rng(seed).normal(size=(rows, n, n))
    return a + np.swapaxes(a, 1, 2)


def _check(a, values, vectors, tolerance):
    """Eigenvalues against numpy's, and the vectors orthonormal and reproducing ``a``, each
    relative to the largest entry."""
    scale = np.max(np.abs(a))
    want = np.linalg.eigvalsh(a.astype(np.float64))
    values, vectors = np.asarray(values, np.float64), np.asarray(vectors, np.float64)
    apart = {
        "values": np.max(np.abs(np.sort(values, axis=1) - want)) / scale,
        "rebuilt": np.max(np.abs(np.einsum("rij,rj,rkj->rik", vectors, values, vectors) - a))
        / scale,
        "orthonormal": np.max(
            np.abs(np.einsum("rji,rjk->rik", vectors, vectors) - np.eye(a.shape[1]))
        ),
    }
    print({k: f"{v:.1e}" for k, v in apart.items()})
    assert max(apart.values()) <= tolerance, apart


@pytest.mark.parametrize("rows,n", SHAPES)
def test_jacobi_matches_lapack_in_double_precision(x64, rows, n):
    a = _symmetric(rows, n)
    values, vectors, sweeps = jax.jit(jacobi.jacobi_sweeps)(a)
    # measured at most 5.8e-14 (n = 111, the eigenvalues), 1.9e-15 for n <= 7
    _check(a, values, vectors, 5e-12)
    assert int(sweeps) < jacobi.SWEEPS_MAX  # converged, not stopped (measured <= 10)


@pytest.mark.parametrize("rows,n", SHAPES)
def test_jacobi_matches_lapack_in_single_precision(rows, n):
    a = _symmetric(rows, n).astype(np.float32)
    values, vectors, sweeps = jax.jit(jacobi.jacobi_sweeps)(a)
    assert values.dtype == vectors.dtype == jnp.float32
    # measured at most 6.9e-5 (n = 111, the eigenvalues), 1.7e-6 for n <= 7
    _check(a, values, vectors, 5e-3)
    assert int(sweeps) < jacobi.SWEEPS_MAX


def test_jacobi_keeps_repeated_eigenvalues_and_diagonal_input(x64):
    """A matrix with a repeated eigenvalue (an orthogonal similarity of diag(1, 1, 1, 5, -2)),
    one already diagonal (no sweep), and one of zeros, as the padded rows of a sharded leaf."""
    q, _ = np.linalg.qr(np.random.default_rng(3).normal(size=(5, 5)))
    repeated = q @ np.diag([1.0, 1.0, 1.0, 5.0, -2.0]) @ q.T
    diagonal = np.diag([3.0, -1.0, 2.0, 0.5, 4.0])
    values, vectors, _ = jax.jit(jacobi.jacobi_sweeps)(np.stack([repeated, diagonal]))
    _check(np.stack([repeated, diagonal]), values, vectors, 5e-14)  # measured 4.4e-16
    values, vectors, sweeps = jax.jit(jacobi.jacobi_sweeps)(np.zeros((2, 4, 4)))
    assert int(sweeps) == 0
    np.testing.assert_array_equal(values, 0.0)
    np.testing.assert_array_equal(vectors, np.broadcast_to(np.eye(4), (2, 4, 4)))


def test_on_the_cpu_the_decomposition_calls_no_lapack_kernel():
    """jaxlib's CPU LAPACK kernels deadlock when as many run at once as XLA has threads
    (the module's note): the CPU program of ``eigh`` holds none, where jnp.linalg.eigh's
    does (so that the check can fail)."""
    a = jnp.zeros((3, 6, 6), jnp.float32)
    ours = jax.jit(jacobi.eigh).lower(a).as_text()
    lapack = jax.jit(jnp.linalg.eigh).lower(a).as_text()
    assert "lapack" in lapack
    assert "lapack" not in ours and "custom_call" not in ours
