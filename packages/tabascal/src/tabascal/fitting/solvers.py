"""The Newton polishes: Newton's method by truncated conjugate gradients, with a line search
(``newton_cg``) or in a trust region (``newton_trust_region``), on the loss's Hessian-vector
products or its Gauss-Newton products.

Each is an ``optax.GradientTransformationExtraArgs`` whose update takes ``value`` (the loss at
``params``), ``grad``, ``value_fn`` (the loss as a function of the parameters) and
``curvature_fn`` (v -> the Gauss-Newton product at ``params``, or None), as
``optimiser.make_step`` passes them. Each step solves H d = -g by up to ``cg_steps``
conjugate-gradient iterations; neither holds a history of past steps, so their state is a few
scalars and their working vectors (parameter-shaped) live only within the step. Both come from
Nocedal & Wright, *Numerical Optimization* (2nd ed., 2006): algorithms 7.1 (line-search
Newton-CG), 7.2 (Steihaug's conjugate gradients) and 4.1 (the trust radius).

Nothing here knows the fit's phases or its configuration (``optimiser.make_optimizer`` builds
these from ``FitConfig``), so the polish can be replaced whole.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class NewtonState(NamedTuple):
    """State of ``newton_cg``: the last step's length along its direction (1: the full
    Newton step; 0: none was taken), whether its conjugate gradients met negative
    curvature, and how many conjugate-gradient iterations it ran."""

    step_size: jax.Array  # float32 scalar
    negative_curvature: jax.Array  # bool scalar
    cg_iterations: jax.Array  # int32 scalar


#: Halvings of the Newton step the line search tries before taking no step.
_BACKTRACKS = 12
#: The line search's sufficient decrease (Armijo): the loss must fall by this fraction of
#: what the gradient predicts.
_ARMIJO = 1e-4


def _vdot(a, b) -> jax.Array:
    """sum(a * b) over every leaf (real trees of the same structure; elementwise, so that
    each leaf keeps its sharding)."""
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return sum(jnp.sum(x * y) for x, y in pairs)


def _axpy(alpha, x, y):
    """alpha x + y, leaf by leaf."""
    return jax.tree.map(lambda u, v: (alpha * u + v).astype(v.dtype), x, y)


def _curvature_product(gauss_newton: bool, value_fn, params, curvature_fn):
    """v -> the curvature's product with v at ``params``: the Hessian's (forward over reverse
    on ``value_fn``), or with ``gauss_newton`` ``curvature_fn``'s."""
    if gauss_newton:
        if curvature_fn is None:
            raise ValueError(
                "polish_curvature 'gauss-newton' needs the model's Gauss-Newton product: pass "
                "make_step(..., curvature_fn=...) (joint.gauss_newton, or the route's)"
            )
        return curvature_fn
    gradient_of = jax.grad(value_fn)
    return lambda v: jax.jvp(gradient_of, (params,), (v,))[1]


def newton_cg(cg_steps: int, gauss_newton: bool = False) -> optax.GradientTransformationExtraArgs:
    """Newton's method by truncated conjugate gradients (Nocedal & Wright 2006, algorithm 7.1).

    Each update solves H d = -g for the loss's Hessian H at ``params`` (Hessian-vector
    products: forward over reverse differentiation of ``value_fn``) by ``cg_steps``
    conjugate-gradient iterations from d = 0, stopping where the Hessian shows negative
    curvature along a search direction (the direction so far is kept; at the first iteration,
    the steepest descent -g), and spends no Hessian-vector product after that stop. Then it
    halves the step along d, up to ``_BACKTRACKS`` times, until the loss falls by at least
    ``_ARMIJO`` of the decrease the gradient predicts, and takes no step if none does. The
    update needs ``value`` (the loss at ``params``), ``grad`` and ``value_fn``, as
    ``make_step`` passes them; it holds no history of past steps, and its working vectors
    (four parameter-shaped) live only within the step. With ``gauss_newton`` the products are
    ``curvature_fn``'s (the Gauss-Newton part of the Hessian), which ``make_step`` passes too.
    """

    def init(params):
        del params
        return NewtonState(jnp.ones((), jnp.float32), jnp.zeros((), bool), jnp.zeros((), jnp.int32))

    def update(
        updates, state, params=None, *, value=None, grad=None, value_fn=None, curvature_fn=None,
        **extra,
    ):  # fmt: skip
        del updates, state, extra
        gradient_of = jax.grad(value_fn)
        hvp = _curvature_product(gauss_newton, value_fn, params, curvature_fn)

        def going(carry):
            k, *_, stop = carry
            return (k < cg_steps) & ~stop

        def iteration(carry):
            k, d, r, p, rs, _ = carry
            hp = hvp(p)
            curvature = _vdot(p, hp)
            bend = curvature <= 0
            # At a bend d, r and p stay as they are: a step of 0 along p, and p kept whole
            # (arithmetic, not a select between old and new vectors, so that each can be
            # updated in place).
            alpha = jnp.where(bend, 0.0, rs / jnp.where(bend, 1.0, curvature))
            d_next = _axpy(alpha, p, d)
            r_next = _axpy(-alpha, hp, r)
            rs_next = _vdot(r_next, r_next)
            beta = jnp.where(bend, 1.0, rs_next / jnp.where(rs > 0, rs, 1.0))
            keep = jnp.where(bend, 0.0, 1.0)
            p_next = _axpy(beta, p, jax.tree.map(lambda x: (keep * x).astype(x.dtype), r_next))
            return (k + 1, d_next, r_next, p_next, jnp.where(bend, rs, rs_next), bend)

        minus_g = jax.tree.map(jnp.negative, grad)
        zeros = jax.tree.map(jnp.zeros_like, grad)
        rs0 = _vdot(minus_g, minus_g)
        start = (jnp.zeros((), jnp.int32), zeros, minus_g, minus_g, rs0, rs0 <= 0)
        iterations, d, _, _, _, bent = jax.lax.while_loop(going, iteration, start)
        # The gradient again, not ``grad`` kept through the loop: one parameter-shaped array
        # less beside its vectors, for one gradient against the solve's up to cg_steps
        # Hessian-vector products. Negative curvature at the first iteration leaves d = 0:
        # go down the gradient.
        g = gradient_of(params)
        found = _vdot(d, d) > 0
        d = jax.tree.map(lambda a, b: jnp.where(found, a, -b), d, g)
        size = _backtrack(value_fn, params, value, _vdot(g, d), d)
        step = jax.tree.map(lambda x: (size * x).astype(x.dtype), d)
        return step, NewtonState(size.astype(jnp.float32), bent, iterations)

    return optax.GradientTransformationExtraArgs(init, update)


def _backtrack(value_fn, params, value, slope, d, first_loss=None):
    """The step size along ``d`` from ``params`` (loss ``value``, slope ``slope`` = g.d): 1,
    halved up to ``_BACKTRACKS`` times until the loss falls by ``_ARMIJO`` of what the slope
    predicts, or 0 where even the last does not lower the loss. ``first_loss``: the loss at
    the full step, where already known."""

    def trial(size):
        return value_fn(_axpy(size, d, params))

    def worse(carry):
        size, k, loss = carry
        return (~(loss <= value + _ARMIJO * size * slope)) & (k < _BACKTRACKS)

    def halve(carry):
        size, k, _ = carry
        return size / 2, k + 1, trial(size / 2)

    full = jnp.ones((), slope.dtype)
    loss = trial(full) if first_loss is None else first_loss
    size, _, loss = jax.lax.while_loop(worse, halve, (full, jnp.zeros((), int), loss))
    # After the last halving, a step that does not lower the loss at all is not taken.
    return jnp.where(loss <= value, size, 0.0)


class TrustRegionState(NamedTuple):
    """State of ``newton_trust_region``: ``NewtonState``'s figures of the last step, and the
    trust radius the next step's solve stays within (inf: none yet)."""

    step_size: jax.Array  # float32 scalar
    negative_curvature: jax.Array  # bool scalar
    cg_iterations: jax.Array  # int32 scalar
    radius: jax.Array  # float32 scalar


#: The trust radius shrinks to a quarter of the step where the loss fell by less than this
#: fraction of the quadratic model's prediction, and doubles where it fell by more than
#: ``_RATIO_GOOD`` of it on a step to the boundary (Nocedal & Wright 2006, algorithm 4.1).
_RATIO_POOR, _RATIO_GOOD = 0.25, 0.75


def _to_boundary(pp, dp, dd, radius):
    """tau >= 0 with ||d + tau p|| = radius (||d|| <= radius), from pp = p.p, dp = d.p and
    dd = d.d: the positive root of pp tau^2 + 2 dp tau + dd - radius^2."""
    disc = jnp.maximum(dp * dp + pp * (radius * radius - dd), 0.0)
    return (jnp.sqrt(disc) - dp) / jnp.where(pp > 0, pp, 1.0)


def newton_trust_region(
    cg_steps: int, gauss_newton: bool = False
) -> optax.GradientTransformationExtraArgs:
    """Newton's method in a trust region, the steps by Steihaug's truncated conjugate
    gradients (Nocedal & Wright 2006, algorithms 7.2 and 4.1).

    As ``newton_cg``, each update solves H d = -g by up to ``cg_steps`` conjugate-gradient
    iterations on Hessian-vector products, but within a trust radius: where an iterate would
    leave it, or a search direction shows negative curvature, the solve goes along that
    direction to the radius and stops, instead of keeping the iterate before it (far from the
    optimum, where the Hessian is indefinite, that direction is where the loss falls fastest).
    The loss at the step is compared with the decrease the quadratic model predicted: where
    it fell by less than a quarter of it the radius shrinks to a quarter of the step, where
    by more than three quarters on a step to the radius the radius doubles. A step that
    lowers the loss by less than ``_ARMIJO`` of the prediction is halved as ``newton_cg``'s
    (no Hessian-vector product is spent again) and the radius set to what was taken. The
    first step has no radius, and is ``newton_cg``'s; its length sets the first radius. With
    ``gauss_newton`` the products are ``curvature_fn``'s, as ``newton_cg``'s.
    """

    def init(params):
        del params
        return TrustRegionState(
            jnp.ones((), jnp.float32), jnp.zeros((), bool), jnp.zeros((), jnp.int32),
            jnp.full((), jnp.inf, jnp.float32),
        )  # fmt: skip

    def update(
        updates, state, params=None, *, value=None, grad=None, value_fn=None, curvature_fn=None,
        **extra,
    ):  # fmt: skip
        del updates, extra
        gradient_of = jax.grad(value_fn)
        real = jax.tree.leaves(grad)[0].dtype
        radius = state.radius.astype(real)
        bounded = jnp.isfinite(radius)
        hvp = _curvature_product(gauss_newton, value_fn, params, curvature_fn)
        iterations, d, model, bent, rs0 = _steihaug(hvp, grad, radius, bounded, cg_steps, real)
        length = jnp.sqrt(_vdot(d, d))
        loss = value_fn(_axpy(1.0, d, params))
        predicted = -model  # > 0 for any step the solve returns but d = 0
        ratio = (value - loss) / jnp.where(predicted > 0, predicted, 1.0)
        # Where the model predicts less than the loss's rounding the ratio is rounding too:
        # a step that does not raise the loss counts as a good one (so that the radius does
        # not collapse at the optimum), one that does as a failed one.
        resolved = predicted > 64 * jnp.finfo(real).eps * jnp.abs(value)
        ratio = jnp.where(resolved, ratio, jnp.where(loss <= value, 1.0, 0.0))
        taken = (ratio >= _ARMIJO) & (predicted > 0)
        # Only a step the ratio refuses is backtracked: jnp.where would run the halvings (loss
        # evaluations) for every step. Its slope takes the gradient again (as newton_cg's),
        # so that ``grad`` is not kept through the solve.
        slope = lambda: _vdot(gradient_of(params), d)  # noqa: E731
        size = jax.lax.cond(
            taken,
            lambda: jnp.ones((), real),
            lambda: _backtrack(value_fn, params, value, slope(), d, loss).astype(real),
        )
        radius_next = _next_radius(radius, bounded, taken, ratio, size, length, rs0)
        step = jax.tree.map(lambda x: (size * x).astype(x.dtype), d)
        new = TrustRegionState(
            size.astype(jnp.float32), bent, iterations, radius_next.astype(jnp.float32)
        )
        return step, new

    return optax.GradientTransformationExtraArgs(init, update)


def _steihaug(hvp, grad, radius, bounded, cg_steps: int, real):
    """Steihaug's truncated conjugate gradients for H d = -g within ``radius`` (none where not
    ``bounded``), H's products by ``hvp``: the iterations run, the step d, the quadratic
    model's change at d (g.d + d.H.d / 2), whether a search direction met negative curvature,
    and -g's squared norm."""

    def going(carry):
        k, *_, stop, _ = carry
        return (k < cg_steps) & ~stop

    def iteration(carry):
        # d: the step so far, r = -(g + H d), p: the search direction, model = g.d +
        # d.H.d / 2, the quadratic model's change at d.
        k, d, r, p, rs, model, _, _ = carry
        hp = hvp(p)
        curvature = _vdot(p, hp)
        bend = curvature <= 0
        rp = _vdot(r, p)
        alpha = rs / jnp.where(bend, 1.0, curvature)
        # ||d + alpha p||^2 from the boundary's three dot products (XLA fused the norm of
        # d + alpha p into one pass without forming it; this saves that pass).
        pp, dp, dd = _vdot(p, p), _vdot(d, p), _vdot(d, d)
        out = bounded & (dd + alpha * (2 * dp + alpha * pp) >= radius * radius)
        # To the radius along p; without one, a bend keeps d (or, at d = 0, takes p = -g).
        tau = jnp.where(bounded, _to_boundary(pp, dp, dd, radius), jnp.where(k == 0, 1.0, 0.0))
        stop = bend | out
        step = jnp.where(stop, tau, alpha)
        d_next = _axpy(step, p, d)
        model_next = model - step * rp + 0.5 * step * step * curvature
        r_next = _axpy(-alpha, hp, r)
        rs_next = _vdot(r_next, r_next)
        beta = rs_next / jnp.where(rs > 0, rs, 1.0)
        p_next = _axpy(beta, p, r_next)
        return (k + 1, d_next, r_next, p_next, rs_next, model_next, stop, bend)

    minus_g = jax.tree.map(jnp.negative, grad)
    zeros = jax.tree.map(jnp.zeros_like, grad)
    rs0 = _vdot(minus_g, minus_g)
    no = jnp.zeros((), bool)
    start = (jnp.zeros((), jnp.int32), zeros, minus_g, minus_g, rs0,
             jnp.zeros((), real), rs0 <= 0, no)  # fmt: skip
    iterations, d, _, _, _, model, _, bent = jax.lax.while_loop(going, iteration, start)
    return iterations, d, model, bent, rs0


def _next_radius(radius, bounded, taken, ratio, size, length, rs0):
    """The trust radius of the next step, from this one's: its ``length`` (the solve's step),
    the ``size`` taken along it, whether it was ``taken`` whole and the ``ratio`` of the
    loss's fall to the model's prediction; ``rs0``, -g's squared norm."""
    at_radius = bounded & (length >= 0.99 * radius)
    radius_next = jnp.where(
        ~taken,
        size * length,
        jnp.where(
            ratio < _RATIO_POOR,
            0.25 * length,
            jnp.where((ratio > _RATIO_GOOD) & at_radius, 2 * radius, radius),
        ),
    )
    # The first step (no radius yet) sets it; a radius of 0 (no step) would end the
    # polish, so it falls back to the step the gradient alone would take.
    radius_next = jnp.where(bounded | ~taken, radius_next, length)
    return jnp.where(radius_next > 0, radius_next, jnp.sqrt(rs0))
