"""Gaussian likelihood of the visibilities, masked by flags, and the loss built from it.

The real and imaginary parts of every unflagged cell are independent Gaussians of std
noise[b] (one value for all baselines, or one per baseline):

    -log L = sum_{b, f, t unflagged} |model - vis|^2 / (2 noise[b]^2)      (+ N log(2 pi noise^2))

The constant in brackets does not depend on the parameters and is left out. Reduced
chi-squared is sum_unflagged |model - vis|^2 / noise^2 / (2 N) with N the number of unflagged
complex points (1 when the model fits to the noise), and the loss is
(-log L + sum of the components' priors) / N.

Conventions that the sharded model relies on:

* Flagged cells may hold NaN (or anything): they are replaced by 0 with ``where`` before any
  arithmetic, so neither values nor gradients see them.
* Masked reductions only, never boolean compaction (``x[mask]``), whose index vectors cost more
  memory than the data.
* Arrays stay complex: |r|^2 is formed as re^2 + im^2 inside one fused elementwise pass, so no
  stacked (real, imaginary) copy of the cube is ever made and the only layout to keep is the
  baseline-leading one of the complex arrays. Rows are independent until the final sum, which
  is a sum of per-baseline terms (``chi2_per_baseline``).
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

from tabascal import TabascalError


class DataError(TabascalError, ValueError):
    """Data the model cannot fit (NaN or infinite unflagged cells, bad noise, nothing
    unflagged); the message names the cell or baseline."""


def resolve_noise(noise, n_bl: int) -> np.ndarray:
    """Noise std per baseline, (n_bl,) float64, from a scalar or (n_bl,) input (host).

    Raises ValueError naming the first baseline whose noise is not finite and > 0.
    """
    arr = np.asarray(noise, dtype=np.float64)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != n_bl):
        raise DataError(f"noise has shape {arr.shape}; expected a scalar or ({n_bl},)")
    arr = np.broadcast_to(arr, (n_bl,))
    bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
    if bad.size:
        raise DataError(
            f"noise of baseline {bad[0]} is {arr[bad[0]]!r} ({bad.size} baselines in all); "
            "the noise std must be finite and > 0"
        )
    return np.array(arr)


def validate_vis(vis, flags) -> None:
    """Raise ValueError if any unflagged cell of ``vis`` is NaN or infinite (host, numpy).

    vis: (n_bl, n_freq, n_time) complex; flags: same shape, bool.
    """
    vis = np.asarray(vis)
    flags = np.asarray(flags, dtype=bool)
    if vis.shape != flags.shape:
        raise DataError(f"vis has shape {vis.shape} but flags {flags.shape}; they must match")
    bad = ~np.isfinite(vis) & ~flags
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"{int(bad.sum())} unflagged visibilities are NaN or infinite, the first at "
            f"(baseline, channel, time) = {first}; flag them or repair the data"
        )


def _inverse_variance(noise, n_bl: int, dtype) -> jax.Array:
    """noise^-2 broadcastable to (n_bl, n_freq, n_time): shape () or (n_bl, 1, 1)."""
    noise = jnp.asarray(noise, dtype)
    if noise.ndim == 0:
        return 1.0 / jnp.square(noise)
    if noise.shape != (n_bl,):
        raise ValueError(f"noise has shape {noise.shape}; expected () or ({n_bl},)")
    return (1.0 / jnp.square(noise))[:, None, None]


def residual(model: jax.Array, vis: jax.Array, flags: jax.Array) -> jax.Array:
    """The residual data - model in unflagged cells, exactly 0 in flagged ones (NaN there never
    read): the one sign of the project, as results.zarr's ``residual`` holds it.

    model, vis: (n_bl, n_freq, n_time) complex; flags: same shape, bool (True = flagged).
    """
    vis = jnp.where(flags, 0, vis)
    return jnp.where(flags, 0, vis - model)


def chi2_per_baseline(
    model: jax.Array, vis: jax.Array, flags: jax.Array, noise: jax.Array
) -> jax.Array:
    """sum_{f, t unflagged} |model - vis|^2 / noise[b]^2 for every baseline, (n_bl,) real.

    noise: scalar or (n_bl,) std of the real and imaginary parts, in the units of vis.
    """
    r = residual(model, vis, flags)
    inv_var = _inverse_variance(noise, r.shape[0], r.real.dtype)
    return jnp.sum((jnp.square(r.real) + jnp.square(r.imag)) * inv_var, axis=(1, 2))


def neg_log_likelihood(
    model: jax.Array, vis: jax.Array, flags: jax.Array, noise: jax.Array
) -> jax.Array:
    """-log L without its constant: sum_unflagged |model - vis|^2 / (2 noise^2), scalar real."""
    return 0.5 * jnp.sum(chi2_per_baseline(model, vis, flags, noise))


def count_unflagged(flags: jax.Array) -> jax.Array:
    """Number N of unflagged complex points, scalar integer (int32 unless x64 is enabled)."""
    return jnp.sum(jnp.logical_not(flags))


def reduced_chi2(
    model: jax.Array,
    vis: jax.Array,
    flags: jax.Array,
    noise: jax.Array,
    n_points=None,
) -> jax.Array:
    """sum_unflagged |model - vis|^2 / noise^2 / (2 N), scalar real.

    n_points: N, when known already (e.g. counted once on the host); counted from flags if None.
    """
    if n_points is None:
        n_points = count_unflagged(flags)
    total = jnp.sum(chi2_per_baseline(model, vis, flags, noise))
    return total / (2 * jnp.asarray(n_points, total.dtype))


def loss(nll: jax.Array, priors: Iterable[jax.Array], n_points) -> jax.Array:
    """Loss = (-log L + sum of priors) / N: the negative log posterior per complex data point.

    nll: ``neg_log_likelihood``; priors: the components' ``prior`` values (scalars);
    n_points: N, the number of unflagged complex points.
    """
    total = nll + sum(priors, start=jnp.zeros((), nll.dtype))
    return total / jnp.asarray(n_points, total.dtype)
