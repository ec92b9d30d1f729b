"""Gaussian likelihood of the visibilities, masked by flags, and the loss built from it.

The real and imaginary parts of every unflagged cell are independent Gaussians of std
noise[b, f] (one value for all cells, one per baseline, or one per baseline and channel: shape
(), (n_bl,) or (n_bl, n_freq), the same in every integration):

    -log L = sum_{b, f, t unflagged} |model - vis|^2 / (2 noise[b, f]^2)   (+ N log(2 pi noise^2))

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


def resolve_noise(noise, n_bl: int, n_freq: int | None = None) -> np.ndarray:
    """Noise std per baseline, (n_bl,) float64, from a scalar or (n_bl,) input, or per baseline
    and channel, (n_bl, n_freq) float64, from an (n_bl, n_freq) input (host). n_freq: the
    data's channels, which a per-channel noise must match (None: not checked).

    Raises DataError naming the first baseline (and channel) whose noise is not finite and > 0.
    """
    arr = np.asarray(noise, dtype=np.float64)
    per_channel = arr.ndim == 2 and arr.shape[0] == n_bl
    if per_channel and n_freq is not None and arr.shape[1] != n_freq:
        raise DataError(
            f"noise has shape {arr.shape}; a noise per baseline and channel must be "
            f"({n_bl}, {n_freq}), one value per channel of the data"
        )
    if arr.ndim > 2 or (arr.ndim >= 1 and not per_channel and arr.shape != (n_bl,)):
        raise DataError(
            f"noise has shape {arr.shape}; expected a scalar or ({n_bl},) (per baseline) or "
            f"({n_bl}, n_freq) (per baseline and channel)"
        )
    arr = arr if per_channel else np.broadcast_to(arr, (n_bl,))
    bad = np.argwhere(~(np.isfinite(arr) & (arr > 0)))
    if bad.size:
        first = tuple(int(i) for i in bad[0])
        where = f"baseline {first[0]}" + (f", channel {first[1]}," if per_channel else "")
        cells = "cells" if per_channel else "baselines"
        raise DataError(
            f"noise of {where} is {float(arr[first])!r} ({len(bad)} {cells} in all); "
            "the noise std must be finite and > 0"
        )
    return np.array(arr)


def noise_cells(noise):
    """``noise`` (numpy or jax) broadcastable to the cells (n_bl, n_freq, n_time): () as it
    is, (n_bl,) as (n_bl, 1, 1), (n_bl, n_freq) as (n_bl, n_freq, 1)."""
    return noise.reshape(noise.shape + (1,) * (3 - noise.ndim)) if noise.ndim else noise


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


def _inverse_variance(noise, shape: tuple[int, ...], dtype) -> jax.Array:
    """noise^-2 broadcastable to the cells ``shape`` = (n_bl, n_freq, n_time): shape (),
    (n_bl, 1, 1) or (n_bl, n_freq, 1)."""
    noise = jnp.asarray(noise, dtype)
    if noise.ndim > 2 or (noise.ndim and noise.shape != shape[: noise.ndim]):
        raise ValueError(
            f"noise has shape {noise.shape}; expected (), ({shape[0]},) or {shape[:2]}"
        )
    return noise_cells(1.0 / jnp.square(noise))


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
    """sum_{f, t unflagged} |model - vis|^2 / noise[b, f]^2 for every baseline, (n_bl,) real.

    noise: scalar, (n_bl,) or (n_bl, n_freq) std of the real and imaginary parts, in the units
    of vis.
    """
    r = residual(model, vis, flags)
    inv_var = _inverse_variance(noise, r.shape, r.real.dtype)
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


def residual_and_chi2(model, vis, flags, noise, n_points) -> tuple[jax.Array, jax.Array]:
    """``residual`` and ``reduced_chi2`` of some rows, as the export forms them; N: the whole
    data's points, so that the chi-squared of blocks of rows add up to the data's."""
    return residual(model, vis, flags), reduced_chi2(model, vis, flags, noise, n_points)


def loss(nll: jax.Array, priors: Iterable[jax.Array], n_points) -> jax.Array:
    """Loss = (-log L + sum of priors) / N: the negative log posterior per complex data point.

    nll: ``neg_log_likelihood``; priors: the components' ``prior`` values (scalars);
    n_points: N, the number of unflagged complex points.
    """
    total = nll + sum(priors, start=jnp.zeros((), nll.dtype))
    return total / jnp.asarray(n_points, total.dtype)
