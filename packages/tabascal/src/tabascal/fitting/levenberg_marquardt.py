"""Levenberg-Marquardt steps solved by preconditioned conjugate gradients
(``levenberg_marquardt``): ``fit.polish: levenberg-marquardt``.

The loss is a whitened nonlinear least-squares problem: (|W^1/2 (model(p) - data)|^2 + |p|^2)
/ 2N, the data's residuals over the noise and identity priors on the whitened parameters.
Its Gauss-Newton matrix H = (J' W J + I) / N (``joint.gauss_newton``) is never indefinite
and, near a good start, describes the loss well, so each step solves the damped system

    (H + lambda D) d = -g

for the step d, D the diagonal of H, by conjugate gradients preconditioned with H's blocks
over each parameter leaf's mode axes (block-Jacobi: a gain's time modes per antenna and
channel, a satellite's signal modes, a baseline's sky modes; the caller says which axes,
``block_axes``). A solve stops once an iteration lowers the quadratic model by less than
``forcing`` of its fall so far, over the iterations taken (an inexact Newton step: Dembo,
Eisenstat & Steihaug 1982, with Nash's truncation test), or after ``cg_steps`` products.
The step is taken where the loss falls by at least ``_ACCEPT`` of what the Gauss-Newton
model predicts, and the damping set from the ratio of the two (Nielsen 1999, the update of
Madsen, Nielsen & Tingleff, *Methods for non-linear least squares problems*, 2004, section
3.2): small where the model is good (Gauss-Newton steps), large where it is not (short steps
down the preconditioned gradient).

The blocks are estimated once, at the first step, from products with probe vectors
(``estimate_blocks``: one product per entry of a leaf's block, every row at once), and their
eigenvalues floored at the priors' curvature, the least H can have. They change little as
the fit moves (the curvatures are set by the array, the noise and the priors' scales), and
only the preconditioner's quality, never the step's correctness, depends on them. The
diagonal alone is a far poorer preconditioner: within a gain's or a satellite's modes the
curvature is far from diagonal (docs/science.md, "Gauss-Newton steps and their solves").

The work is counted in passes (``LevenbergMarquardtState.passes``): one forward and one
backward evaluation of the model; a Gauss-Newton product (a tangent, then a cotangent)
counts as one, a loss evaluated alone as half of one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tabascal.fitting import jacobi
from tabascal.fitting.solvers import _axpy, _vdot

#: The blocks' products in full precision: on a TPU (bfloat16 passes) or a GPU (TF32) the
#: default keeps about three digits, too few for a preconditioner whose blocks' eigenvalues
#: span several decades.
HIGHEST = jax.lax.Precision.HIGHEST

#: The least fraction of the Gauss-Newton model's predicted fall that the loss must fall by
#: for a step to be taken.
_ACCEPT = 1e-4
#: The damping of the first step, relative to the curvature's diagonal: a step close to the
#: Gauss-Newton one, from a start already near the optimum.
DAMPING_START = 1e-3


class LevenbergMarquardtState(NamedTuple):
    """State of ``levenberg_marquardt``.

    damping: lambda, relative to the diagonal (float32 scalar); growth: Nielsen's factor by
    which a refused step multiplies it (float32); diagonal: the estimate of H's diagonal,
    shaped and placed as the parameters (all zero until the first step makes it); blocks:
    the inverses of H's blocks, one (rows, b, b) array per parameter leaf
    (``estimate_blocks``; zero until the first step); count:
    steps taken (int32); step_size: 1 where the last step was taken, 0 where refused;
    cg_iterations: its solve's products (int32); passes: the passes of every step so far
    (float32, the value and gradient each step starts from included); decrease: the fall of
    the loss the Gauss-Newton model predicted for the last solve's step; gradient_norm2:
    g' D^-1 g at the last step's start (float32), twice the fall the model with H's diagonal
    alone predicts.
    """

    damping: jax.Array
    growth: jax.Array
    diagonal: Any
    blocks: tuple
    count: jax.Array
    step_size: jax.Array
    cg_iterations: jax.Array
    passes: jax.Array
    decrease: jax.Array
    gradient_norm2: jax.Array


def levenberg_marquardt(
    cg_steps: int, forcing: float = 0.01, seed: int = 0, block_axes=None, rows_alike=None
) -> optax.GradientTransformationExtraArgs:
    """Levenberg-Marquardt steps on the Gauss-Newton products, by conjugate gradients
    preconditioned with the curvature's blocks (the module's description).

    The update takes ``value`` (the loss at ``params``), ``grad``, ``value_fn`` and
    ``curvature_fn`` (v -> the Gauss-Newton product at ``params``), as
    ``optimiser.make_step`` passes them. ``cg_steps``: the most products a solve takes;
    ``forcing``: a solve stops once an iteration lowers its model by less than this fraction
    of the model's fall so far, over the iterations taken (``_pcg``);
    ``seed``: the key of the probes that estimate the preconditioner's blocks at the first
    step, fixed so that a fit is the same on any number of devices; ``block_axes(path)``:
    the trailing axes of a leaf that its blocks span (None: each leaf whole); ``rows_alike``:
    the leaves whose probes are the same on every row (``estimate_blocks``). The update
    takes ``curvature_floor`` where known: the least eigenvalue H can have (the priors' 1 /
    N), at which the blocks' eigenvalues are floored.
    """

    def init(params):
        real = jax.tree.leaves(params)[0].dtype
        scalar = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return LevenbergMarquardtState(
            damping=scalar(DAMPING_START),
            growth=scalar(2.0),
            diagonal=jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), real), params),
            blocks=tuple(
                jnp.zeros((rows, b, b), real) for rows, b in _block_shapes(params, block_axes)
            ),
            count=jnp.zeros((), jnp.int32),
            step_size=scalar(1.0),
            cg_iterations=jnp.zeros((), jnp.int32),
            passes=scalar(0.0),
            decrease=scalar(0.0),
            gradient_norm2=scalar(0.0),
        )

    def update(
        updates, state, params=None, *, value=None, grad=None, value_fn=None, curvature_fn=None,
        curvature_floor=None, **extra,
    ):  # fmt: skip
        del updates, extra
        if curvature_fn is None:
            raise ValueError(
                "the levenberg-marquardt solver needs the model's Gauss-Newton product: pass "
                "make_step(..., curvature_fn=...) (joint.gauss_newton, or the route's)"
            )
        real = jax.tree.leaves(grad)[0].dtype
        first = state.count == 0
        floor = curvature_floor

        def estimate():
            blocks = estimate_blocks(curvature_fn, grad, block_axes, rows_alike, seed)
            return _block_diagonal(grad, blocks, block_axes), _inverse_blocks(blocks, floor)

        diagonal, inverses = jax.lax.cond(first, estimate, lambda: (state.diagonal, state.blocks))
        damping = state.damping.astype(real)

        def precondition(r):
            return _apply_blocks(inverses, r, block_axes, 1.0 + damping)

        iterations, d, model = _pcg(
            curvature_fn, grad, diagonal, damping, precondition, forcing, cg_steps
        )
        # The fall the undamped Gauss-Newton model predicts at d: the damped model's, less
        # the damping's own term.
        predicted = -model + 0.5 * damping * _vdot(d, _times(diagonal, d))
        loss = value_fn(_axpy(1.0, d, params))
        ratio = (value - loss) / jnp.where(predicted > 0, predicted, 1.0)
        # Where the prediction is below the loss's rounding the ratio is rounding too: a step
        # that does not raise the loss is taken (the damping must not grow without end at
        # the optimum), one that does is not.
        resolved = predicted > 64 * jnp.finfo(real).eps * jnp.abs(value)
        ratio = jnp.where(resolved, ratio, jnp.where(loss <= value, 1.0, 0.0))
        taken = (ratio >= _ACCEPT) & jnp.isfinite(loss)
        damping_next, growth_next = _next_damping(state.damping, state.growth, taken, ratio)
        # A refused step is not thrown away: the loss along it is tried at halves of it
        # (half a pass each, where a new solve would cost tens), and the first that lowers
        # the loss by _ACCEPT of the slope's prediction is taken. The damping grows as for
        # a refusal, so that the next solve trusts the model less.
        size, tries = jax.lax.cond(
            taken,
            lambda: (jnp.ones((), real), jnp.zeros((), jnp.int32)),
            lambda: _backtrack(value_fn, params, value, _vdot(grad, d), d),
        )
        step = jax.tree.map(lambda x: (size * x).astype(x.dtype), d)
        probes = sum(b for _, b in _block_shapes(grad, block_axes))
        spent = 1.0 + iterations + 0.5 * (1 + tries) + jnp.where(first, probes, 0)
        new = LevenbergMarquardtState(
            damping=damping_next,
            growth=growth_next,
            diagonal=diagonal,
            blocks=inverses,
            count=state.count + 1,
            step_size=size.astype(jnp.float32),
            cg_iterations=iterations,
            passes=state.passes + spent.astype(jnp.float32),
            decrease=predicted.astype(jnp.float32),
            gradient_norm2=_vdot(grad, _divide(grad, diagonal)).astype(jnp.float32),
        )
        return step, new

    return optax.GradientTransformationExtraArgs(init, update)


def _leaf_blocks(shape, axes: int | None) -> tuple[int, int]:
    """(rows, b): a leaf of ``shape`` as rows of blocks over its last ``axes`` axes (None:
    the whole leaf, one row)."""
    size = int(np.prod(shape, dtype=np.int64))
    k = len(shape) if axes is None else min(axes, len(shape))
    b = int(np.prod(shape[len(shape) - k :], dtype=np.int64))
    return (size // b if b else 0), b


def _block_shapes(tree, block_axes) -> list[tuple[int, int]]:
    """(rows, b) of each leaf of ``tree`` (``_leaf_blocks``), ``block_axes(path)`` giving
    each leaf's axes."""
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [
        _leaf_blocks(jnp.shape(x), None if block_axes is None else
                     block_axes(jax.tree_util.keystr(path)))
        for path, x in paths
    ]  # fmt: skip


def estimate_blocks(curvature_fn, like, block_axes=None, rows_alike=None, seed: int = 0):
    """The blocks of the matrix whose products ``curvature_fn`` takes, one (rows, b, b) array
    per leaf of ``like``: each leaf's rows of b entries over its last ``block_axes(path)``
    axes (None: each leaf whole).

    Column j of every row's block of a leaf comes from one product: the vector with each
    row's entry j set to a random sign (all +1 in the leaves ``rows_alike(path)`` names, whose
    rows no product couples and which a sharded layout pads and permutes, so that the
    estimate is the same on any number of devices), zero elsewhere, its product's rows
    multiplied by their signs. Other rows' coupling enters each block as noise that the
    signs leave unbiased; where the blocks are nearly singular it is the floor on their
    eigenvalues (``_inverse_blocks``) that keeps the estimate a good preconditioner
    (docs/science.md, "Gauss-Newton steps and their solves"). A leaf costs b products, taken
    in one loop over every leaf.
    """
    paths, treedef = jax.tree_util.tree_flatten_with_path(like)
    leaves = [x for _, x in paths]
    shapes = _block_shapes(like, block_axes)
    signs, offsets, total = [], [], 0
    for i, ((path, x), (rows, b)) in enumerate(zip(paths, shapes, strict=True)):
        alike = bool(rows_alike and rows_alike(jax.tree_util.keystr(path)))
        key = jax.random.fold_in(jax.random.key(seed), i)
        signs.append(
            jnp.ones((rows,), x.dtype)
            if alike
            else jax.random.rademacher(key, (rows,), jnp.int8).astype(x.dtype)
        )
        offsets.append(total)
        total += b if rows else 0  # no entries (the gains' modes of unitary gains): no probes

    # One loop over every leaf's columns in turn, so that the step's program holds one
    # product, not one per leaf: product k probes column k - offset of the leaf it falls in.
    def column(k, blocks):
        probes, picks = [], []
        for x, (rows, b), sign, offset in zip(leaves, shapes, signs, offsets, strict=True):
            active = (k >= offset) & (k < offset + b) & (rows > 0)
            j = jnp.clip(k - offset, 0, max(b - 1, 0))
            entry = ((jnp.arange(b) == j) & active).astype(x.dtype)
            probes.append((sign[:, None] * entry[None, :]).reshape(jnp.shape(x)))
            picks.append((active, j))
        out = jax.tree.leaves(curvature_fn(jax.tree.unflatten(treedef, probes)))
        updated = []
        for block, y, (rows, b), sign, (active, j) in zip(
            blocks, out, shapes, signs, picks, strict=True
        ):
            if not rows * b:
                updated.append(block)
                continue
            kept = jax.lax.dynamic_index_in_dim(block, j, axis=2, keepdims=False)
            new = jnp.where(active, sign[:, None] * y.reshape(rows, b), kept)
            updated.append(jax.lax.dynamic_update_index_in_dim(block, new, j, axis=2))
        return tuple(updated)

    start = [jnp.zeros((rows, b, b), x.dtype) for x, (rows, b) in zip(leaves, shapes, strict=True)]
    return jax.lax.fori_loop(0, total, column, tuple(start))


def _block_diagonal(like, blocks, block_axes):
    """The blocks' diagonals, shaped as the leaves of ``like``."""
    leaves, treedef = jax.tree.flatten(like)
    diagonals = [
        jnp.abs(jnp.diagonal(block, axis1=1, axis2=2)).reshape(jnp.shape(x))
        for x, block in zip(leaves, blocks, strict=True)
    ]
    return jax.tree.unflatten(treedef, diagonals)


def _inverse_blocks(blocks, floor):
    """Each (rows, b, b) block's inverse, its symmetric part's eigenvalues floored at
    ``floor`` (the least H can have: the priors' curvature) or, where not known, at a
    rounding's share of the block's largest."""
    inverses = []
    for block in blocks:
        if not block.size:  # a leaf with no entries (the gains' modes of unitary gains)
            inverses.append(block)
            continue
        lam, vectors = jacobi.eigh(0.5 * (block + jnp.swapaxes(block, 1, 2)))
        least = jnp.finfo(block.dtype).eps * jnp.max(jnp.abs(lam), axis=-1, keepdims=True)
        if floor is not None:
            least = jnp.maximum(least, jnp.asarray(floor, block.dtype))
        lam = jnp.maximum(lam, least)
        inverses.append(jnp.einsum("rij,rj,rkj->rik", vectors, 1 / lam, vectors, precision=HIGHEST))
    return tuple(inverses)


def _apply_blocks(inverses, tree, block_axes, scale):
    """``tree`` with each leaf's rows multiplied by their inverse blocks, over ``scale``."""
    leaves, treedef = jax.tree.flatten(tree)
    shapes = _block_shapes(tree, block_axes)
    out = [
        (jnp.einsum("rij,rj->ri", inverse, x.reshape(rows, b), precision=HIGHEST) / scale)
        .reshape(jnp.shape(x)).astype(x.dtype)
        for x, inverse, (rows, b) in zip(leaves, inverses, shapes, strict=True)
    ]  # fmt: skip
    return jax.tree.unflatten(treedef, out)


def _times(diagonal, v):
    return jax.tree.map(lambda a, b: (a * b).astype(b.dtype), diagonal, v)


def _divide(v, diagonal):
    return jax.tree.map(lambda a, b: (a / b).astype(a.dtype), v, diagonal)


def _pcg(curvature_fn, grad, diagonal, damping, precondition, forcing: float, cg_steps: int):
    """Conjugate gradients for (H + damping D) d = -g, preconditioned by ``precondition``
    (r -> M^-1 r), from d = 0: the products taken, d, and the damped quadratic model's change at d,
    q(d) = g.d + d.(H + damping D).d / 2.

    The solve stops once an iteration lowers q by less than ``forcing`` of q's fall so far
    over the iterations taken (Nash's truncation test: Nash & Sofer, *Linear and Nonlinear
    Programming*, 1996, section 12.4): the test reads the model's fall, which is what the
    step is for, where the residual's norm would be ruled by the coordinates the priors
    alone hold, which the preconditioner solves in one iteration.
    """

    def product(p):
        return _axpy(damping, _times(diagonal, p), curvature_fn(p))

    def going(carry):
        k, _, _, _, rz, model, last, bent = carry
        slow = (k > 0) & (k * last <= forcing * -model)
        return (k < cg_steps) & (rz > 0) & ~slow & ~bent

    def iteration(carry):
        k, d, r, p, rz, model, _, _ = carry
        ap = product(p)
        curvature = _vdot(p, ap)
        # H is positive definite; a direction of no curvature is rounding's, and the solve
        # ends with the step it has.
        bent = curvature <= 0
        alpha = jnp.where(bent, 0.0, rz / jnp.where(bent, 1.0, curvature))
        d = _axpy(alpha, p, d)
        r = _axpy(-alpha, ap, r)
        z = precondition(r)
        rz_next = _vdot(r, z)
        beta = rz_next / jnp.where(rz > 0, rz, 1.0)
        p = _axpy(beta, p, z)
        fall = 0.5 * alpha * rz  # q falls by alpha (r.z) / 2 at each iteration
        return k + 1, d, r, p, rz_next, model - fall, fall, bent

    r0 = jax.tree.map(jnp.negative, grad)
    z0 = precondition(r0)
    rz0 = _vdot(r0, z0)
    zeros = jax.tree.map(jnp.zeros_like, grad)
    nothing = jnp.zeros((), rz0.dtype)
    start = (jnp.zeros((), jnp.int32), zeros, r0, z0, rz0, nothing, nothing, rz0 <= 0)
    iterations, d, r, _, _, _, _, _ = jax.lax.while_loop(going, iteration, start)
    # q(d) = g.d + d.A.d / 2 with A d = -g - r: (g.d - r.d) / 2, from the vectors rather than
    # the iterations' sum, which rounding lets drift.
    model = 0.5 * (_vdot(grad, d) - _vdot(r, d))
    return iterations, d, model


#: Halvings of a refused step tried before none is taken.
_HALVINGS = 6


def _backtrack(value_fn, params, value, slope, d):
    """The step size along ``d`` from ``params`` (loss ``value``, slope ``slope`` = g.d):
    the first of 1/2, 1/4, ... (at most ``_HALVINGS`` halvings) where the loss falls by
    ``_ACCEPT`` of what the slope predicts, or 0; and the halvings tried."""

    def worse(carry):
        size, k, loss = carry
        return ~(loss <= value + _ACCEPT * size * slope) & (k < _HALVINGS)

    def halve(carry):
        size, k, _ = carry
        return size / 2, k + 1, value_fn(_axpy(size / 2, d, params))

    real = jnp.result_type(value)
    start = (jnp.ones((), real), jnp.zeros((), jnp.int32), jnp.full((), jnp.inf, real))
    size, tries, loss = jax.lax.while_loop(worse, halve, start)
    return jnp.where(loss <= value + _ACCEPT * size * slope, size, 0.0).astype(real), tries


def _next_damping(damping, growth, taken, ratio):
    """Nielsen's update: a taken step scales the damping by max(1/3, 1 - (2 ratio - 1)^3) and
    resets the growth to 2; a refused one multiplies it by the growth, which doubles."""
    ratio = ratio.astype(jnp.float32)
    shrink = jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
    damping_next = jnp.where(taken, damping * shrink, damping * growth)
    growth_next = jnp.where(taken, 2.0, 2.0 * growth)
    # Held within limits that keep it a number: a damping of 0 could never grow again.
    return jnp.clip(damping_next, 1e-9, 1e9).astype(jnp.float32), growth_next.astype(jnp.float32)
