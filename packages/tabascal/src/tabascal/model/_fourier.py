"""Fourier Gaussian processes on the (channel, time) grid, shared by every model component.

A stationary Gaussian process on ``n`` cells of spacing ``delta`` is represented by its modes on
a padded periodic lattice of ``N >= n`` cells (mode spacing ``1 / (N delta)`` in the conjugate
variable), keeping the modes ``j = -J..J`` (Wiener–Khinchin; e.g. Rasmussen & Williams 2006,
section 4.2.1):

    x[i] = sum_j a[j] z[j] exp(2 pi i j i / N),   z[j] ~ CN(0, 1) independent
    E[x[i] conj(x[i'])] = sum_j a[j]^2 exp(2 pi i j (i - i') / N)

so ``a[j]^2`` is the (periodic) power spectrum. Two choices keep this close to the intended,
non-periodic process:

* **Padding.** The periodic covariance at lag ``d`` also contains the lag ``N - d``. The largest
  lag inside the data is ``n - 1``, whose wrapped copy lies ``pad + 1`` cells away. The padding is
  the smallest with ``(pad + 1) delta >= L``, where ``L`` is the lag beyond which the kernel's
  envelope is below ``wrap_tolerance`` (``decorrelation_lag``). The number of kept modes grows
  with N, about 2 (n delta + L) / (pi length) + 1 for a Gaussian kernel, so the padding is
  cheap for the small per-antenna arrays; the sky, whose modes are as many as its
  visibilities, caps it (``max_pad``), see ``sky``.
* **Truncation.** Modes whose relative power ``S(nu_j) / S(0)`` is below ``cutoff`` are dropped;
  ``J`` is the largest index still above it, at most ``(N - 1) // 2`` (no aliased duplicates).

The kept modes are evaluated with two small DFT matrices, ``dft_freq (n_freq, n_kf)`` and
``dft_time (n_time, n_kt)``, as one einsum: the same numbers an inverse FFT of the zero-filled
padded lattice gives after cropping, without ever forming the padded cube (which would be
``N_f N_t / (n_f n_t)`` times, up to 4x, the size of the visibilities).

Complex parameters are stored as real arrays with a stacked (real, imaginary) axis just before
the two mode axes, scaled so that the whitened parameters are ``N(0, 1)``:
``z = (p[..., 0, :, :] + 1j p[..., 1, :, :]) / sqrt(2)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import erf

_HIGHEST = jax.lax.Precision.HIGHEST


def decorrelation_lag(length: float, tolerance: float) -> float:
    """Lag where exp(-lag^2 / (2 length^2)) falls to ``tolerance``: length sqrt(2 ln(1 / tol))."""
    return length * math.sqrt(2.0 * math.log(1.0 / tolerance))


def padded_size(n: int, delta: float, lag: float, max_pad: int | None = None) -> int:
    """Periodic lattice size N = n + pad with pad = clip(ceil(lag / delta) - 1, 0, max_pad)."""
    pad = max(math.ceil(lag / delta - 1e-9) - 1, 0)
    return n + (pad if max_pad is None else min(pad, max_pad))


def gaussian_spectrum(x: np.ndarray, length: float) -> np.ndarray:
    """Relative spectrum of the kernel exp(-d^2 / (2 length^2)): exp(-2 pi^2 length^2 x^2)."""
    return np.exp(-2.0 * np.pi**2 * length**2 * np.square(x))


def edge_spectrum(nu: np.ndarray, knee: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Flat-to-the-knee spectrum: a box of half-width ``knee`` smoothed by a Gaussian ``width``.

    S(nu) = [erf((knee - nu) / (sqrt(2) width)) + erf((knee + nu) / (sqrt(2) width))] / 2,
    normalised to S(0) = 1. It is half power at the knee and falls as a Gaussian beyond it. Its
    kernel is sinc(2 knee tau) exp(-2 pi^2 width^2 tau^2), so its envelope decorrelates like a
    Gaussian kernel of length 1 / (2 pi width).
    """
    scale = np.sqrt(2.0) * width
    s = 0.5 * (erf((knee - nu) / scale) + erf((knee + nu) / scale))
    return s / erf(knee / scale)


def mode_frequencies(n_padded: int, delta: float, half_width: int) -> np.ndarray:
    """Conjugate coordinates j / (N delta) of the kept modes j = -J..J, shape (2J + 1,)."""
    return np.arange(-half_width, half_width + 1) / (n_padded * delta)


def kept_half_width(relative_power: np.ndarray, cutoff: float, n_padded: int) -> int:
    """Largest J with relative_power[j] >= cutoff for all 0 <= j <= J, at most (N - 1) // 2.

    ``relative_power`` is S(j / (N delta)) / S(0) for j = 0, 1, ..., a non-increasing array.
    """
    above = np.flatnonzero(relative_power < cutoff)
    j = (above[0] if above.size else relative_power.size) - 1
    return int(min(j, (n_padded - 1) // 2))


def dft_matrix(n: int, n_padded: int, half_width: int) -> np.ndarray:
    """exp(2 pi i j i / N) for cells i < n and modes j = -J..J, shape (n, 2J + 1), complex128.

    The phase j i is reduced modulo N in integers first, so the matrix is exact to rounding.
    """
    j = np.arange(-half_width, half_width + 1)
    turns = np.mod(np.outer(np.arange(n), j), n_padded) / n_padded
    return np.exp(2j * np.pi * turns)


def hartley_matrix(n: int, n_padded: int, half_width: int) -> np.ndarray:
    """cas(2 pi j i / N) = cos + sin for cells i < n and modes j = -J..J, shape (n, 2J + 1).

    With a symmetric spectrum a[j] = a[-j] and real z ~ N(0, 1), sum_j a[j] z[j] cas(...) is a
    real process with covariance sum_j a[j]^2 cos(2 pi j (i - i') / N) (Bracewell's Hartley
    transform): the real counterpart of ``dft_matrix`` with the same number of parameters.
    """
    d = dft_matrix(n, n_padded, half_width)
    return d.real + d.imag


def normalised_weights(power: np.ndarray) -> np.ndarray:
    """sqrt(power / sum(power)) along the last axis: unit prior variance per cell."""
    return np.sqrt(power / np.sum(power, axis=-1, keepdims=True))


def gaussian_lattice(
    n: int,
    delta: float,
    length: float,
    cutoff: float,
    tolerance: float,
    max_pad: int | None = None,
) -> tuple[int, int]:
    """(N, J) for a Gaussian kernel of correlation ``length`` on n cells of spacing ``delta``.

    N from ``padded_size`` with the kernel's ``decorrelation_lag``; J from ``kept_half_width``
    of exp(-2 pi^2 length^2 x^2). ``length`` and ``delta`` share a unit (s, or Hz).
    """
    n_padded = padded_size(n, delta, decorrelation_lag(length, tolerance), max_pad)
    x = np.arange((n_padded + 1) // 2) / (n_padded * delta)
    return n_padded, kept_half_width(gaussian_spectrum(x, length), cutoff, n_padded)


def gaussian_weights(n_padded: int, delta: float, half_width: int, length: float) -> np.ndarray:
    """Unit-variance mode amplitudes of a Gaussian kernel, shape (2J + 1,), float64."""
    x = mode_frequencies(n_padded, delta, half_width)
    return normalised_weights(gaussian_spectrum(x, length))


def complex_from_stacked(p: jax.Array) -> jax.Array:
    """(..., 2, n_kf, n_kt) real whitened parameters to (..., n_kf, n_kt) complex z ~ CN(0, 1)."""
    return jax.lax.complex(p[..., 0, :, :], p[..., 1, :, :]) / math.sqrt(2.0)


def stacked_from_complex(z: jax.Array) -> jax.Array:
    """Inverse of ``complex_from_stacked``: (..., n_kf, n_kt) complex to (..., 2, n_kf, n_kt)."""
    return math.sqrt(2.0) * jnp.stack([z.real, z.imag], axis=-3)


def modes_to_grid(
    z: jax.Array, amp: jax.Array, dft_freq: jax.Array, dft_time: jax.Array
) -> jax.Array:
    """x[..., f, t] = sum_{k, j} dft_freq[f, k] amp[..., k, j] z[..., k, j] dft_time[t, j].

    z: (..., n_kf, n_kt) complex; amp: real, broadcastable to z; dft_freq: (n_freq, n_kf);
    dft_time: (n_time, n_kt). Returns (..., n_freq, n_time) complex. Every leading element is
    computed from its own modes only.
    """
    return jnp.einsum("fk,...kj,tj->...ft", dft_freq, amp * z, dft_time, precision=_HIGHEST)


def grid_to_modes(
    x: jax.Array, amp: jax.Array, dft_freq: jax.Array, dft_time: jax.Array
) -> jax.Array:
    """Adjoint of ``modes_to_grid``: (..., n_freq, n_time) complex to (..., n_kf, n_kt)."""
    modes = jnp.einsum(
        "fk,...ft,tj->...kj", dft_freq.conj(), x, dft_time.conj(), precision=_HIGHEST
    )
    return amp * modes


def fit_modes(
    target: jax.Array,
    weight: jax.Array,
    amp: jax.Array,
    dft_freq: jax.Array,
    dft_time: jax.Array,
    ridge: jax.Array,
    n_iter: int,
) -> jax.Array:
    """Maximum a posteriori modes for a target on the grid, each leading element on its own.

    Solves (A^H W A + ridge I) z = A^H W target with A = ``modes_to_grid`` and W the 0/1 cell
    weights by conjugate gradients (Hestenes & Stiefel 1952) preconditioned with the exact
    diagonal amp^2 sum(W) + ridge (|dft| = 1), for ``n_iter`` fixed iterations with step sizes
    per leading element, so a block of elements gets the same answer as the whole. For complex
    z ~ CN(0, 1) and a target with noise std ``s`` on each of its real and imaginary parts,
    ``ridge = 2 s^2``. Modes with zero amplitude stay exactly zero.

    target: (..., n_freq, n_time) complex, finite; weight: same shape, real 0/1;
    amp: broadcastable to (..., n_kf, n_kt); ridge: broadcastable to (..., 1, 1), > 0.
    Returns z, (..., n_kf, n_kt) complex.
    """

    def normal(z):
        x = weight * modes_to_grid(z, amp, dft_freq, dft_time)
        return grid_to_modes(x, amp, dft_freq, dft_time) + ridge * z

    def dot(u, v):
        return jnp.sum((jnp.conj(u) * v).real, axis=(-2, -1), keepdims=True)

    def safe_divide(a, b):
        return jnp.where(b > 0, a / jnp.where(b > 0, b, 1), 0)

    inv_diag = 1.0 / (jnp.square(amp) * jnp.sum(weight, axis=(-2, -1), keepdims=True) + ridge)
    r0 = grid_to_modes(weight * target, amp, dft_freq, dft_time)
    s0 = inv_diag * r0
    rs0 = dot(r0, s0)

    def step(_, state):
        z, r, p, rs = state
        ap = normal(p)
        alpha = safe_divide(rs, dot(p, ap))
        z = z + alpha * p
        r = r - alpha * ap
        s = inv_diag * r
        rs_new = dot(r, s)
        p = s + safe_divide(rs_new, rs) * p
        return z, r, p, rs_new

    z, *_ = jax.lax.fori_loop(0, n_iter, step, (jnp.zeros_like(r0), r0, s0, rs0))
    return z


def fit_estimate(estimate, flags, mean, noise, amp, dft_freq, dft_time, n_iter: int) -> jax.Array:
    """Stacked whitened modes (..., 2, n_kf, n_kt) whose grid best fits ``estimate`` (MAP).

    Minimises sum_unflagged |grid(z) + mean - estimate|^2 / (2 noise^2) + |z|^2 / 2 for every
    leading element on its own (``fit_modes``); flagged or non-finite cells are left out.
    estimate: (..., n_freq, n_time) complex; flags: the same shape, bool, or None; mean: (...)
    complex; noise: scalar or broadcastable to mean's shape (> 0); amp: (..., n_kf, n_kt) real.
    """
    estimate = jnp.asarray(estimate)
    use = jnp.isfinite(estimate)
    if flags is not None:
        use = use & ~jnp.asarray(flags)
    target = jnp.where(use, estimate, 0) - mean[..., None, None]
    noise = jnp.broadcast_to(jnp.asarray(noise, amp.dtype), mean.shape)
    z = fit_modes(
        target.astype(dft_time.dtype),
        use.astype(amp.dtype),
        amp,
        dft_freq,
        dft_time,
        (2.0 * jnp.square(noise))[..., None, None],
        n_iter,
    )
    return stacked_from_complex(z)
