"""Eigendecompositions of batches of small symmetric matrices (``eigh``), by the cyclic Jacobi
method on the CPU and by jax's ``jnp.linalg.eigh`` elsewhere.

jaxlib 0.10's CPU LAPACK kernels (``syevd``, ``potrf``, ``getrf`` ...) split a batch over
XLA's intra-op thread pool and block a pool thread until the pieces are done. When as many of
them run at once as the pool has threads (two independent decompositions in one program on a
2-core machine, or one on each of four virtual devices), every thread waits on work that no
thread is free to run, and the program never finishes. The Jacobi method here is plain XLA
arithmetic, so it cannot deadlock, and it is as accurate as LAPACK's (Demmel & Veselic 1992:
more so in the small eigenvalues).

The method (Golub & Van Loan, *Matrix Computations*, 4th ed., section 8.5): each rotation
J(p, q) zeroes the entry (p, q) of J' A J; a sweep rotates every pair once, in n - 1 rounds
of n / 2 disjoint pairs (a round-robin tournament), every round applied to the whole batch at
once. Sweeps go on until every matrix's off-diagonal part is below rounding of its norm
(quadratic convergence: 6 to 10 sweeps for n up to a few hundred).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: Sweeps at most; the convergence test ends the loop well before (tests/test_jacobi.py).
SWEEPS_MAX = 30


def _rotations(a, m):
    """(c, s), each (rows, m): the rotations J = [[c, s], [-s, c]] of the pairs (k, m + k)
    that zero the entries (k, m + k) of J' a J (Golub & Van Loan, algorithm 8.5.1)."""
    app = jnp.diagonal(a[:, :m, :m], axis1=1, axis2=2)
    aqq = jnp.diagonal(a[:, m:, m:], axis1=1, axis2=2)
    apq = jnp.diagonal(a[:, :m, m:], axis1=1, axis2=2)
    zero = apq == 0
    tau = (aqq - app) / (2 * jnp.where(zero, 1, apq))
    t = jnp.where(tau >= 0, 1, -1).astype(a.dtype) / (jnp.abs(tau) + jnp.sqrt(1 + tau * tau))
    t = jnp.where(zero, 0, t)
    c = 1 / jnp.sqrt(1 + t * t)
    return c, t * c


def _rotate(x, c, s, m, axis):
    """``x`` with each pair (k, m + k) of indices along ``axis`` (1 or 2) rotated,
    x_k' = c x_k - s x_(m+k) and x_(m+k)' = s x_k + c x_(m+k), then the indices moved round
    the round-robin tournament (Brent & Luk 1985): the first stays, the others move one place
    round the circle top 0 .. m - 1, bottom m .. 2m - 1. Over 2m - 1 rounds every pair of
    indices meets once; that the matrix itself is permuted (A -> P' A P, V -> V P) keeps
    ``a = v diag v'`` true whatever the order."""
    c, s = (jnp.expand_dims(v, 3 - axis) for v in (c, s))
    lo, hi = jnp.split(x, 2, axis=axis)
    top, bottom = c * lo - s * hi, s * lo + c * hi
    if m == 1:
        return jnp.concatenate([top, bottom], axis=axis)

    def part(y, start, stop):
        return jax.lax.slice_in_dim(y, start, stop, axis=axis)

    return jnp.concatenate(
        [part(top, 0, 1), part(bottom, 0, 1), part(top, 1, m - 1),
         part(bottom, 1, m), part(top, m - 1, m)], axis=axis,
    )  # fmt: skip


def _off_diagonal(a):
    """Each matrix's squared off-diagonal Frobenius norm and its whole squared norm."""
    off = jnp.where(jnp.eye(a.shape[1], dtype=bool), 0, a)
    return jnp.sum(off * off, axis=(1, 2)), jnp.sum(a * a, axis=(1, 2))


def jacobi_eigh(a):
    """Eigenvalues (rows, n) and eigenvectors (rows, n, n) of each symmetric matrix of
    ``a`` (rows, n, n), ``a[r] = v[r] @ diag(w[r]) @ v[r].T``, by the cyclic Jacobi method;
    the eigenvalues are not sorted."""
    values, vectors, _ = jacobi_sweeps(a)
    return values, vectors


def jacobi_sweeps(a):
    """``jacobi_eigh``'s eigenvalues and eigenvectors, and the sweeps taken."""
    n = a.shape[1]
    even = n + n % 2
    if even != n:  # a zero row and column, which no rotation touches, make the count even
        a = jnp.pad(a, ((0, 0), (0, 1), (0, 1)))
    m = even // 2
    vectors = jnp.broadcast_to(jnp.eye(even, dtype=a.dtype), a.shape)
    tolerance = (2 * even * jnp.finfo(a.dtype).eps) ** 2

    def round_(_, carry):
        a, v = carry
        c, s = _rotations(a, m)
        a = _rotate(_rotate(a, c, s, m, axis=2), c, s, m, axis=1)
        return a, _rotate(v, c, s, m, axis=2)

    def unfinished(carry):
        a, _, sweeps = carry
        off, whole = _off_diagonal(a)
        return jnp.any(off > tolerance * whole) & (sweeps < SWEEPS_MAX)

    def sweep(carry):
        a, v, sweeps = carry
        a, v = jax.lax.fori_loop(0, even - 1, round_, (a, v))
        return a, v, sweeps + 1

    a, vectors, sweeps = jax.lax.while_loop(unfinished, sweep, (a, vectors, 0))
    values = jnp.diagonal(a, axis1=1, axis2=2)
    return values[:, :n], vectors[:, :n, :n], sweeps


def eigh(a):
    """Eigenvalues and eigenvectors of each symmetric matrix of ``a`` (rows, n, n), as
    ``jnp.linalg.eigh`` gives them but unsorted: by ``jacobi_eigh`` on the CPU (see the
    module's note), by ``jnp.linalg.eigh`` on other platforms."""
    return jax.lax.platform_dependent(a, cpu=jacobi_eigh, default=_lapack_eigh)


def _lapack_eigh(a):
    """``jnp.linalg.eigh`` as a plain tuple: ``platform_dependent``'s branches must give
    outputs of one structure."""
    values, vectors = jnp.linalg.eigh(a)
    return values, vectors
