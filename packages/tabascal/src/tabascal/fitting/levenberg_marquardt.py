"""Levenberg-Marquardt steps solved by preconditioned conjugate gradients
(``levenberg_marquardt``): ``fit.polish: levenberg-marquardt``.

The loss is a whitened nonlinear least-squares problem: (|W^1/2 (model(p) - data)|^2 + |p|^2)
/ 2N, the data's residuals over the noise and identity priors on the whitened parameters.
Its Gauss-Newton matrix H = (J' W J + I) / N (``joint.gauss_newton``) is never indefinite
and, near a good start, describes the loss well, so each step solves the damped system

    (H + lambda D) d = -g

for the step d, D the diagonal of H, by conjugate gradients preconditioned with D (Jacobi).
A solve stops once an iteration lowers the quadratic model by less than ``forcing`` of its
fall so far, over the iterations taken (an inexact Newton step: Dembo, Eisenstat & Steihaug
1982, with Nash's truncation test), or after ``cg_steps`` products. The step is taken where
the loss falls by at least ``_ACCEPT`` of what the Gauss-Newton model predicts, and the damping set
from the ratio of the two (Nielsen 1999, the update of Madsen, Nielsen & Tingleff, *Methods
for non-linear least squares problems*, 2004, section 3.2): small where the model is good
(Gauss-Newton steps), large where it is not (short steps down the preconditioned gradient).

D is estimated once, at the first step, from Hutchinson's estimator (Bekas, Kokiopoulou &
Saad 2007): the mean of z * (H z) over ``probes`` random vectors of +-1, each one Gauss-Newton
product. It changes little as the fit moves (the curvatures are set by the array, the noise
and the priors' scales), and only the preconditioner's quality, never the step's
correctness, depends on it.

The work is counted in passes (``LevenbergMarquardtState.passes``): one forward and one
backward evaluation of the model; a Gauss-Newton product (a tangent, then a cotangent)
counts as one, a loss evaluated alone as half of one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from tabascal.fitting.solvers import _axpy, _vdot

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
    shaped and placed as the parameters (all zero until the first step makes it); count:
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
    count: jax.Array
    step_size: jax.Array
    cg_iterations: jax.Array
    passes: jax.Array
    decrease: jax.Array
    gradient_norm2: jax.Array


def levenberg_marquardt(
    cg_steps: int, forcing: float = 0.01, probes: int = 4, seed: int = 0, rows_alike=None
) -> optax.GradientTransformationExtraArgs:
    """Levenberg-Marquardt steps on the Gauss-Newton products, by conjugate gradients
    preconditioned with the curvature's diagonal (the module's description).

    The update takes ``value`` (the loss at ``params``), ``grad``, ``value_fn`` and
    ``curvature_fn`` (v -> the Gauss-Newton product at ``params``), as
    ``optimiser.make_step`` passes them. ``cg_steps``: the most products a solve takes;
    ``forcing``: the fraction of its starting (preconditioned) residual a solve stops at;
    ``probes``: the random vectors the diagonal is estimated from, at the first step;
    ``seed``: their key, fixed so that a fit is the same on any number of devices;
    ``rows_alike``: the leaves whose probes are the same on every row (``estimate_diagonal``).
    """

    def init(params):
        real = jax.tree.leaves(params)[0].dtype
        scalar = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return LevenbergMarquardtState(
            damping=scalar(DAMPING_START),
            growth=scalar(2.0),
            diagonal=jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), real), params),
            count=jnp.zeros((), jnp.int32),
            step_size=scalar(1.0),
            cg_iterations=jnp.zeros((), jnp.int32),
            passes=scalar(0.0),
            decrease=scalar(0.0),
            gradient_norm2=scalar(0.0),
        )

    def update(
        updates, state, params=None, *, value=None, grad=None, value_fn=None, curvature_fn=None,
        **extra,
    ):  # fmt: skip
        del updates, extra
        if curvature_fn is None:
            raise ValueError(
                "the levenberg-marquardt solver needs the model's Gauss-Newton product: pass "
                "make_step(..., curvature_fn=...) (joint.gauss_newton, or the route's)"
            )
        real = jax.tree.leaves(grad)[0].dtype
        first = state.count == 0
        diagonal = jax.lax.cond(
            first,
            lambda: estimate_diagonal(curvature_fn, grad, probes, seed, rows_alike),
            lambda: state.diagonal,
        )
        damping = state.damping.astype(real)
        iterations, d, model = _pcg(curvature_fn, grad, diagonal, damping, forcing, cg_steps)
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
        spent = 1.0 + iterations + 0.5 * (1 + tries) + jnp.where(first, probes, 0)
        new = LevenbergMarquardtState(
            damping=damping_next,
            growth=growth_next,
            diagonal=diagonal,
            count=state.count + 1,
            step_size=size.astype(jnp.float32),
            cg_iterations=iterations,
            passes=state.passes + spent.astype(jnp.float32),
            decrease=predicted.astype(jnp.float32),
            gradient_norm2=_vdot(grad, _divide(grad, diagonal)).astype(jnp.float32),
        )
        return step, new

    return optax.GradientTransformationExtraArgs(init, update)


def estimate_diagonal(curvature_fn, like, probes: int, seed: int, rows_alike=None):
    """Hutchinson's estimate of the diagonal of the matrix whose products ``curvature_fn``
    takes: the mean over ``probes`` vectors z of +-1 entries (shaped as ``like``) of z * (H z).
    Each entry is floored at a millionth of its leaf's largest, so that the preconditioner
    divides by no zero or negative estimate (a coordinate the data hardly reach, whose
    estimate is mostly its neighbours' cross terms).

    The entries are independent, but in the leaves for which ``rows_alike(path)`` holds (a
    ``jax.tree_util.keystr`` path), whose rows are the same on every row: a leaf whose rows
    no product couples (the sky's, one row per baseline) and whose rows a sharded layout
    pads and permutes, so that the estimate, and the fit, are the same on any number of
    devices.
    """
    paths, treedef = jax.tree_util.tree_flatten_with_path(like)
    leaves = [x for _, x in paths]
    alike = [bool(rows_alike and rows_alike(jax.tree_util.keystr(path))) for path, _ in paths]

    def signs_like(key, x, same_rows):
        shape = jnp.shape(x)
        if not same_rows or not shape:
            return jax.random.rademacher(key, shape, jnp.int8).astype(x.dtype)
        row = jax.random.rademacher(key, shape[1:], jnp.int8).astype(x.dtype)
        return jnp.broadcast_to(row, shape)

    def probe(k):
        key = jax.random.fold_in(jax.random.key(seed), k)
        keys = jax.random.split(key, len(leaves))
        signs = [signs_like(*each) for each in zip(keys, leaves, alike, strict=True)]
        z = jax.tree.unflatten(treedef, signs)
        return jax.tree.map(jnp.multiply, z, curvature_fn(z))

    def add(k, total):
        return jax.tree.map(jnp.add, total, probe(k))

    zeros = jax.tree.map(jnp.zeros_like, like)
    total = jax.lax.fori_loop(0, probes, add, zeros)

    def floor(x):
        x = jnp.abs(x / probes)
        return jnp.maximum(x, 1e-6 * jnp.max(x)) if x.size else x

    return jax.tree.map(floor, total)


def _times(diagonal, v):
    return jax.tree.map(lambda a, b: (a * b).astype(b.dtype), diagonal, v)


def _divide(v, diagonal):
    return jax.tree.map(lambda a, b: (a / b).astype(a.dtype), v, diagonal)


def _pcg(curvature_fn, grad, diagonal, damping, forcing: float, cg_steps: int):
    """Conjugate gradients for (H + damping D) d = -g, preconditioned by (1 + damping) D,
    from d = 0: the products taken, d, and the damped quadratic model's change at d,
    q(d) = g.d + d.(H + damping D).d / 2.

    The solve stops once an iteration lowers q by less than ``forcing`` of q's fall so far
    over the iterations taken (Nash's truncation test: Nash & Sofer, *Linear and Nonlinear
    Programming*, 1996, section 12.4): the test reads the model's fall, which is what the
    step is for, where the residual's norm would be ruled by the coordinates the priors
    alone hold, which the preconditioner solves in one iteration.
    """
    scale = 1.0 + damping

    def product(p):
        return _axpy(damping, _times(diagonal, p), curvature_fn(p))

    def precondition(r):
        return jax.tree.map(lambda a, b: (a / (scale * b)).astype(a.dtype), r, diagonal)

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
