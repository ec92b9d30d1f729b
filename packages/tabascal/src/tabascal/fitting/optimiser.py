"""Gradient-descent fit of whitened parameters with optax, with checkpoints and resume.

The fit is a pure function of a loss ``loss_fn(params, inputs) -> (loss, aux)`` where ``aux``
is a dict of scalars (at least ``"chi2"``, the reduced chi-squared). ``inputs`` is passed to the
jitted step as an argument rather than closed over, so large arrays are never baked into the
compiled program as constants.

The optimiser runs ``steps`` steps at ``learning_rate``, then ``second_phase_steps`` at a
tenth of it, then ``polish_steps`` of the polish. The gradient phases find the basin; near the
optimum their fixed step size makes them circle it, while the polish, built from the loss's
curvature, walks down its long shallow valleys (the trade between a gain and the RFI amplitude
it multiplies, say) that a first-order step crosses and recrosses. The default polish is
Newton's method in a trust region (``fit.polish: trust-region``, ``newton_trust_region``):
each step solves H d = -g by up to ``polish_cg_steps`` conjugate-gradient iterations on
Hessian-vector products of the loss within a trust radius, following a direction of negative
curvature to the radius. ``fit.polish: newton`` (``newton_cg``) takes the same solves without
a radius, stopping at negative curvature, then backtracks along d. Neither holds histories;
both end once their steps no longer lower the loss (``polish_tolerance``). The third is
L-BFGS (``fit.polish: lbfgs``, ``optax.lbfgs``: a quasi-Newton direction from the last
``polish_memory`` steps and a zoom line search on the loss).
The schedule and the phase live in the optimiser state, so a run resumed from a checkpoint
continues exactly where an uninterrupted run would be. The gradient phases and the polish are
two compiled programs (``make_step``'s ``PhasedStep``), each carrying only its own optimiser
state: the gradient phases no L-BFGS histories, the polish no AdaBelief moments.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.config import option_field
from tabascal.parallel import processes
from tabascal.store.writer import kill_point

logger = logging.getLogger(__name__)

OPTIMIZERS = ("adabelief", "adam", "sgd")
POLISHES = ("lbfgs", "newton", "trust-region")
#: What the Newton polishes' conjugate gradients multiply by (``FitConfig.polish_curvature``).
CURVATURES = ("hessian", "gauss-newton")
CHECKPOINT_NAME = "checkpoint.npz"


#: The most Newton steps a fit takes when ``fit.polish_steps`` is not set: on the demo, 10
#: steps of 400 conjugate-gradient iterations after 400 + 200 gradient steps left the gains
#: 0.02 of their spread and after 800 + 400 0.04, while 5 after 400 + 200 stopped short
#: (chi-squared 1.026, the RFI left 0.30 of the noise), three of them spent where the Hessian
#: is not yet positive (2026-12-04).
NEWTON_STEPS_MAX = 10

#: The most trust-region steps a fit takes when ``fit.polish_steps`` is not set (a quarter of
#: the first phase's, rounded up, below it): a ceiling, since the polish ends once its steps no
#: longer lower the loss (``polish_tolerance``). On the eight-satellite shell at half length,
#: whose gradient phases end far from the optimum, each step is held to a radius of about
#: half a posterior standard deviation and the RFI left in the cleaned data first fell below
#: 0.2 of the noise at the 43rd (2026-12-04).
TRUST_REGION_STEPS_MAX = 100


@dataclass(frozen=True)
class FitConfig:
    """Static settings of a fit.

    Attributes:
      optimizer: one of ``OPTIMIZERS``.
      learning_rate: step size of the first phase (whitened units per step).
      steps: number of steps in the first phase.
      second_phase_steps: number of further steps at ``learning_rate / 10`` (0 for none;
        None: ``steps // 2``).
      polish: the optimiser after the gradient phases, one of ``POLISHES``: L-BFGS,
        Newton's method by conjugate gradients and a line search (``newton_cg``), or in a
        trust region (``newton_trust_region``).
      polish_steps: number of polish steps after those (0 for none; None: ``5 steps // 2``
        L-BFGS steps, ``steps / 40`` Newton steps, rounded up, at most ``NEWTON_STEPS_MAX``,
        or ``steps / 4`` trust-region steps, rounded up, at most ``TRUST_REGION_STEPS_MAX``).
      polish_memory: past steps the L-BFGS direction is built from; its state holds two
        copies of the parameters per step.
      polish_cg_steps: conjugate-gradient iterations (Hessian-vector products) per Newton
        step.
      polish_curvature: one of ``CURVATURES``, the curvature a Newton polish's conjugate
        gradients take: the loss's Hessian (forward over reverse), or its Gauss-Newton part
        (``joint.gauss_newton``: the model's tangent, then its cotangent), which leaves out
        the residuals' curvature and is never indefinite.
      checkpoint_every: write a checkpoint every this many steps (0 for never).
      stop_tolerance: stop before the ceiling ``total_steps`` once the loss has fallen by less
        than this fraction of itself over the last ``stop_window`` steps (0: never stop early).
      stop_window: steps over which the fall is measured.
      polish_tolerance: stop a Newton or trust-region polish before its ``polish_steps`` once
        two polish steps together have lowered the negative log posterior by less than this
        many nats (the loss times the data's points; 0: never stop early).
    """

    optimizer: str = option_field("adabelief", "optax optimiser", choices=OPTIMIZERS)
    learning_rate: float = option_field(0.1, "step size of the first phase", min=0.0)
    # The schedule of the benchmark's best fits (docs/science.md): 800 + 400 gradient steps
    # find the basin, the polish walks down it (the demo's RFI left in the cleaned data: 0.31
    # of the noise after the gradient phases, 0.22, 0.18 and 0.17 after 500, 1000 and 2000
    # L-BFGS steps, 2026-12-02; 0.113 after 10 Newton steps of 400 iterations, 2026-12-04).
    steps: int = option_field(800, "steps in the first phase", min=0)
    second_phase_steps: int | None = option_field(
        None, "further steps at a tenth of the step size; null = half of steps", min=0
    )
    # Newton's method in a trust region is the default: on the eight-satellite shell, whose
    # gradient phases end where the Hessian is indefinite, 60 of its steps left 0.13 of the
    # noise of RFI in the cleaned data where the line-search Newton polish left 0.97 and
    # L-BFGS 0.30, and on the six other scenarios it reached the line-search polish's figures
    # to the second digit or better, in up to three times the time (docs/science.md,
    # 2026-12-04). Newton's methods hold no histories: their step at bench-512 took 46.9 GB on
    # one device against L-BFGS's 133.7 GB (docs/benchmarks.md).
    polish: str = option_field(
        "trust-region",
        "optimiser after the gradient phases: lbfgs; newton (Newton steps by conjugate "
        "gradients on the loss's Hessian, then a line search); or trust-region (the same "
        "steps within a trust radius, following negative curvature to it)",
        choices=POLISHES,
    )
    polish_steps: int | None = option_field(
        None,
        "polish steps after the gradient phases (0 = none); null = 2.5 x steps with lbfgs, "
        "steps / 40 (rounded up, at most 10) with newton, steps / 4 (rounded up, at most 100) "
        "with trust-region",
        min=0,
    )
    polish_memory: int = option_field(
        10,
        "past steps the L-BFGS direction is built from (its state holds 2 x this many copies "
        "of the parameters)",
        min=1,
    )
    checkpoint_every: int = option_field(100, "checkpoint every this many steps (0 = never)", min=0)
    stop_tolerance: float = option_field(
        0.0,
        "stop before the steps run out once the loss falls by less than this fraction of "
        "itself over stop_window steps (0 = never)",
        min=0.0,
    )
    stop_window: int = option_field(50, "steps over which stop_tolerance is measured", min=1)
    # Near the optimum the loss is quadratic, so a Newton step that lowers it by e nats leaves
    # the fit about e nats (superlinear convergence: less) from the optimum, sqrt(2 e)
    # posterior standard deviations along the whole parameter vector: 0.1 nats is a fifth of
    # one, what no figure of the fit can show.
    polish_tolerance: float = option_field(
        0.1,
        "stop a newton or trust-region polish once two of its steps together lower the "
        "negative log posterior by less than this many nats (0 = never)",
        min=0.0,
    )
    # 400, not 200: the loss's softest directions (the trade between the gains and the RFI)
    # need the longer solves. On the demo at full length, 10 Newton steps of 400 iterations
    # left the gains 0.04 of their spread against 0.11 after 20 of 200, in fewer products
    # (the solves that meet negative curvature stop early); on the hard calibration case, the
    # long baselines and the RFI near the noise ended at the same fit, the LEO passes within
    # 0.02 of their spread (docs/science.md, 2026-12-04).
    polish_cg_steps: int = option_field(
        400, "conjugate-gradient iterations per Newton step (polish: newton or trust-region)", min=1
    )

    polish_curvature: str = option_field(
        "hessian",
        "what a newton or trust-region polish's conjugate gradients multiply by: hessian "
        "(the loss's, forward over reverse) or gauss-newton (without the residuals' "
        "curvature: the model's tangent, then its cotangent)",
        choices=CURVATURES,
    )

    def __post_init__(self):
        if self.polish_curvature not in CURVATURES:
            raise ValueError(
                f"polish_curvature {self.polish_curvature!r} is not known; choose one of "
                f"{CURVATURES}"
            )
        if self.polish not in POLISHES:
            raise ValueError(f"polish {self.polish!r} is not known; choose one of {POLISHES}")
        # The phases left unset follow the first phase's length, so that a shorter (or
        # longer) fit keeps the schedule's proportions, but for the Newton steps, which end
        # at NEWTON_STEPS_MAX: their number is set by the loss's shape near its optimum (the
        # first few steps meet negative curvature and backtrack), not by the gradient phases'
        # length.
        if self.second_phase_steps is None:
            object.__setattr__(self, "second_phase_steps", self.steps // 2)
        if self.polish_steps is None:
            if self.polish == "lbfgs":
                share = 5 * self.steps // 2
            elif self.polish == "trust-region":
                share = min(-(-self.steps // 4), TRUST_REGION_STEPS_MAX)
            else:
                share = min(-(-self.steps // 40), NEWTON_STEPS_MAX)
            object.__setattr__(self, "polish_steps", share)

    @property
    def polish_start(self) -> int:
        """The step the polish begins at: the gradient phases' length."""
        return self.steps + self.second_phase_steps

    @property
    def total_steps(self) -> int:
        return self.polish_start + self.polish_steps


class FitState(NamedTuple):
    """Everything that changes from one step to the next."""

    params: Any
    opt_state: Any
    step: jax.Array  # int32 scalar: steps taken so far


class FitHistory(NamedTuple):
    """Per-step loss and reduced chi-squared, shape (steps taken,), float64 on the host."""

    loss: np.ndarray
    chi2: np.ndarray


def make_optimizer(config: FitConfig) -> optax.GradientTransformation:
    """The optimiser of ``config``: its two-phase step-size schedule, then L-BFGS for
    ``polish_steps`` (``then_lbfgs``)."""
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(
            f"optimizer {config.optimizer!r} is not known; choose one of {', '.join(OPTIMIZERS)}"
        )
    schedule = optax.piecewise_constant_schedule(config.learning_rate, {config.steps: 0.1})
    if config.optimizer == "adabelief":
        first = optax.adabelief(schedule)
    elif config.optimizer == "adam":
        first = optax.adam(schedule)
    else:
        first = optax.sgd(schedule)
    if config.polish_steps == 0:
        return first
    switch = config.polish_start
    gauss_newton = config.polish_curvature == "gauss-newton"
    if config.polish == "newton":
        return phased(first, switch, newton_cg(config.polish_cg_steps, gauss_newton))
    if config.polish == "trust-region":
        return phased(first, switch, newton_trust_region(config.polish_cg_steps, gauss_newton))
    return then_lbfgs(first, switch, config.polish_memory)


class PhasedState(NamedTuple):
    """State of ``phased``: steps taken, and the state of the phase in progress: ``first``'s
    until the polish begins (``polish`` None), the polish's after it (``first`` None).

    Each phase is its own compiled program (``make_step``) holding only its own state: the
    gradient phases carry no L-BFGS histories (twenty copies of the parameters by default)
    and the polish no AdaBelief moments (two copies), which at bench-512's 64 channels are
    38 GB of the sky's modes (docs/benchmarks.md).
    """

    count: jax.Array  # int32 scalar
    first: Any
    polish: Any


class Phased(NamedTuple):
    """``phased``'s transformation: optax's ``init`` and ``update``; ``polish_init``, the
    polish's state for given parameters, made where the polish begins (``enter_polish``);
    and ``switch``, the number of ``first``'s updates before it."""

    init: Callable
    update: Callable
    polish_init: Callable
    switch: int


def then_lbfgs(first: optax.GradientTransformation, switch: int, memory: int) -> Phased:
    """``first`` for ``switch`` updates, then ``optax.lbfgs(memory_size=memory)``."""
    return phased(first, switch, optax.lbfgs(memory_size=memory))


def phased(
    first: optax.GradientTransformation,
    switch: int,
    polish: optax.GradientTransformationExtraArgs,
) -> Phased:
    """``first`` for ``switch`` updates, then ``polish``.

    The update takes optax's extra arguments ``value``, ``grad`` and ``value_fn`` (the loss at
    ``params``, its gradient, and the loss as a function of the parameters), which the
    polish's line search (and Newton's Hessian) needs, and ``curvature_fn`` (v -> the
    Gauss-Newton product at ``params``, or None), which it passes on; ``make_step`` passes
    them. The state
    holds one phase's state at a time (``PhasedState``), and which one fixes, when the step
    is traced, which phase's update runs: ``enter_polish`` replaces the first's with the
    polish's once ``switch`` updates have been taken (``make_step``'s step does so itself).
    """

    def init(params):
        return PhasedState(jnp.zeros((), jnp.int32), first.init(params), None)

    def polish_init(params):
        inner = map_history(polish.init(params), params, _place_stack)
        # optax's L-BFGS state holds one array in several leaves; the step donates its state,
        # which needs every leaf its own buffer.
        return jax.tree_util.tree_map(jnp.copy, inner)

    def update(updates, state, params=None, *, value=None, grad=None, value_fn=None, **extra):
        if state.polish is None:
            out, inner = first.update(updates, state.first, params)
            return out, PhasedState(state.count + 1, inner, None)
        out, inner = polish.update(
            updates, state.polish, params, value=value, grad=grad, value_fn=value_fn, **extra
        )
        # The state keeps its types from one step to the next: some optax versions' update
        # returns a counter of another integer width than their init made (int32 against
        # int64).
        inner = jax.tree_util.tree_map(lambda new, old: new.astype(old.dtype), inner, state.polish)
        return out, PhasedState(state.count + 1, None, inner)

    return Phased(init, update, polish_init, switch)


def in_polish(state: FitState) -> bool:
    """Whether ``state``'s optimiser state is in the polish's form (``PhasedState``)."""
    return isinstance(state.opt_state, PhasedState) and state.opt_state.first is None


def enter_polish(state: FitState, optimizer) -> FitState:
    """``state`` with the polish's optimiser state in place of the gradient phases' once
    ``optimizer`` (``phased``) has taken its ``switch`` updates; otherwise ``state`` itself.

    The gradient phases' state (AdaBelief's moments) is deleted from the devices here, as a
    donated argument would be, so that the polish's first step does not run beside it.
    """
    opt = state.opt_state
    if not isinstance(optimizer, Phased) or not isinstance(opt, PhasedState) or in_polish(state):
        return state
    if int(opt.count) < optimizer.switch:
        return state
    polish = optimizer.polish_init(state.params)
    for leaf in jax.tree.leaves(opt.first):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted():
            leaf.delete()
    return state._replace(opt_state=PhasedState(opt.count, None, polish))


def polish_form(state: FitState, optimizer: Phased) -> FitState:
    """The shapes, dtypes and shardings of ``state`` (real or abstract) in the polish's form:
    what ``enter_polish`` will make, for compiling the polish's program (or reading its
    checkpoint) ahead of it, placed as ``state_shardings`` says."""
    abstract = lambda x: jax.ShapeDtypeStruct(  # noqa: E731
        jnp.shape(x), jnp.result_type(x), sharding=getattr(x, "sharding", None)
    )
    params = jax.tree.map(abstract, state.params)
    leaves = jax.tree.leaves(params)
    meshes = [x.sharding.mesh for x in leaves if isinstance(x.sharding, NamedSharding)]
    mesh = meshes[0] if meshes else None
    # Without a mesh, scalars live where the step count (or else the parameters) does.
    device = getattr(state.step, "sharding", None) or next((x.sharding for x in leaves), None)
    shapes = jax.eval_shape(optimizer.polish_init, state.params)
    shardings = state_shardings(params, shapes, mesh, device)
    polish = jax.tree.map(
        lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
        shapes,
        shardings,
    )
    scalar = device if mesh is None else NamedSharding(mesh, P())
    count = jax.ShapeDtypeStruct((), jnp.result_type(state.opt_state.count), sharding=scalar)
    step = jax.ShapeDtypeStruct((), jnp.result_type(state.step), sharding=scalar)
    return FitState(params, PhasedState(count, None, polish), step)


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
        radius_next = jnp.where(radius_next > 0, radius_next, jnp.sqrt(rs0))
        step = jax.tree.map(lambda x: (size * x).astype(x.dtype), d)
        new = TrustRegionState(
            size.astype(jnp.float32), bent, iterations, radius_next.astype(jnp.float32)
        )
        return step, new

    return optax.GradientTransformationExtraArgs(init, update)


def stacked_sharding(sharding):
    """The sharding of a stack of arrays each placed as ``sharding``: the stack's new leading
    axis whole on every device, the rest as one array."""
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, P(None, *sharding.spec))
    return sharding


def state_shardings(params, state_shape, mesh, device):
    """Shardings of an optimiser state, as ``optimizer.init`` run eagerly on placed parameters
    gives: each leaf shaped like a parameter takes that parameter's sharding (its
    ``zeros_like`` keeps the sharding); the L-BFGS histories, stacks of past steps, take their
    parameter's stacked (``map_history``); the rest (step counts, the histories' weights) are
    replicated over ``mesh``, or on ``device`` without one."""
    by_shape = {}
    for leaf in jax.tree.leaves(params):
        by_shape.setdefault((leaf.shape, np.dtype(leaf.dtype)), leaf.sharding)
    other = device if mesh is None else NamedSharding(mesh, P())
    shardings = jax.tree.map(
        lambda s: by_shape.get((s.shape, np.dtype(s.dtype)), other), state_shape
    )
    stacked = lambda _, leaf: stacked_sharding(leaf.sharding)  # noqa: E731
    return map_history(shardings, params, stacked)


def map_history(state, params, fn):
    """``state`` with each leaf of its L-BFGS histories (``diff_params_memory`` and
    ``diff_updates_memory``: (memory, *leaf.shape) stacks of past steps, one per parameter
    leaf) replaced by ``fn(stack, parameter leaf)``.

    ``optax.lbfgs`` makes its histories with ``jnp.zeros``: uncommitted, on one device, and
    replicated by ``jit``, where each parameter it stacks may be divided over the devices
    (the sky's modes on the baseline axis). Placed as their parameters, stacked
    (``stacked_sharding``), they divide like the parameters they remember.
    """

    def place(node):
        if not isinstance(node, optax.ScaleByLBFGSState):
            return node
        return node._replace(
            diff_params_memory=jax.tree.map(fn, node.diff_params_memory, params),
            diff_updates_memory=jax.tree.map(fn, node.diff_updates_memory, params),
        )

    return jax.tree.map(place, state, is_leaf=lambda n: isinstance(n, optax.ScaleByLBFGSState))


def _place_stack(stack, leaf):
    """``stack`` on the devices of ``leaf``, stacked (``stacked_sharding``), when ``leaf`` is a
    placed array; traced or abstract, as it is (``jit``'s ``out_shardings`` place it)."""
    if isinstance(leaf, jax.core.Tracer) or not isinstance(leaf, jax.Array):
        return stack
    return jax.device_put(stack, stacked_sharding(leaf.sharding))


def init_state(params, optimizer: optax.GradientTransformation) -> FitState:
    return FitState(params, optimizer.init(params), jnp.zeros((), jnp.int32))


def make_step(
    loss_fn: Callable, optimizer: optax.GradientTransformation, curvature_fn: Callable | None = None
) -> Callable:
    """A jitted ``step(state, inputs) -> (state, loss, aux)`` that donates ``state``.

    ``loss`` and ``aux`` are evaluated at the parameters *before* the update. With a phased
    optimiser (``phased``) the step is a ``PhasedStep``: one program for the gradient phases
    and one for the polish, which it enters itself (``enter_polish``). curvature_fn(params,
    v, inputs): the loss's Gauss-Newton product (``joint.gauss_newton`` over the route's
    predict), for a polish with ``polish_curvature: gauss-newton``.
    """

    def step(state: FitState, inputs):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, inputs)
        extra = {}
        if isinstance(state.opt_state, PhasedState):  # the line search evaluates the loss
            extra = {"value": loss, "grad": grads, "value_fn": lambda p: loss_fn(p, inputs)[0]}
            if curvature_fn is not None:
                extra["curvature_fn"] = lambda v: curvature_fn(state.params, v, inputs)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params, **extra)
        params = optax.apply_updates(state.params, updates)
        return FitState(params, opt_state, state.step + 1), loss, aux

    jitted = jax.jit(step, donate_argnums=0)
    if isinstance(optimizer, Phased):
        return PhasedStep(jitted, optimizer)
    return jitted


class PhasedStep:
    """The step of a phased optimiser: the gradient phases' program until ``switch`` steps
    have been taken, then, from a state ``enter_polish`` has put in the polish's form, the
    polish's. ``compile`` compiles both ahead of the first step; otherwise each compiles when
    first called, as ``jax.jit`` does."""

    def __init__(self, jitted, optimizer: Phased):
        self.jitted = jitted
        self.optimizer = optimizer
        self.programs: dict[str, Any] = {}

    def __call__(self, state: FitState, inputs):
        state = enter_polish(state, self.optimizer)
        phase = "polish" if in_polish(state) else "gradient"
        return self.programs.get(phase, self.jitted)(state, inputs)

    def lower(self, state: FitState, inputs):
        """The gradient phases' program lowered for ``state`` (``jax.jit``'s ``lower``); see
        ``compile`` for both."""
        return self.jitted.lower(state, inputs)

    def compile(self, state: FitState, inputs) -> dict[str, Any]:
        """Compile the programs still to run from ``state`` (real or abstract) with
        ``inputs``: both phases' from a gradient phase's state, the polish's alone from the
        polish's; return them by phase ("gradient", "polish")."""
        polishing = state if in_polish(state) else polish_form(state, self.optimizer)
        self.programs = {"polish": self.jitted.lower(polishing, inputs).compile()}
        if not in_polish(state):
            self.programs["gradient"] = self.jitted.lower(state, inputs).compile()
        return self.programs


def compile_step(step, state: FitState, inputs) -> tuple[Callable, dict[str, Any]]:
    """``step`` (``make_step``'s) with its programs compiled ahead of the first step for
    ``state`` and ``inputs``, and those programs by phase ("gradient", "polish"; a fit
    without a polish has only the first, one resumed in its polish only the second)."""
    if isinstance(step, PhasedStep):
        return step, step.compile(state, inputs)
    compiled = step.lower(state, inputs).compile()
    return compiled, {"gradient": compiled}


def run(
    step_fn: Callable,
    state: FitState,
    inputs,
    config: FitConfig,
    *,
    history: FitHistory | None = None,
    checkpoint_dir: Path | None = None,
    progress: bool = True,
    n_points: float = 1.0,
) -> tuple[FitState, FitHistory]:
    """Take steps until ``config.total_steps`` have been taken in all, or the loss has
    settled (``settled``).

    ``state`` may come from a checkpoint (``state.step > 0``), in which case ``history`` holds
    the earlier steps' figures. Checkpoints go to ``checkpoint_dir`` every
    ``config.checkpoint_every`` steps and at the end. ``n_points``: what the loss is divided
    by, so that the loss times it is the negative log posterior in nats (``polish_settled``).
    """
    from tqdm.auto import tqdm

    done = int(state.step)
    losses = list(history.loss) if history is not None else []
    chi2s = list(history.chi2) if history is not None else []
    if len(losses) != done:
        raise ValueError(f"history holds {len(losses)} steps but the state has taken {done}")
    bar = tqdm(
        total=config.total_steps,
        initial=done,
        unit="step",
        leave=False,
        disable=not (progress and processes.is_writer()),
    )
    try:
        for _ in range(done, config.total_steps):
            state, loss, aux = step_fn(state, inputs)
            losses.append(float(loss))
            chi2s.append(float(aux["chi2"]))
            n = len(losses)
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4g}", chi2=f"{chi2s[-1]:#.4g}", refresh=False)
            due = config.checkpoint_every and n % config.checkpoint_every == 0
            if checkpoint_dir is not None and due and n < config.total_steps:
                save_checkpoint(
                    checkpoint_dir, state, FitHistory(np.array(losses), np.array(chi2s))
                )
            if settled(losses, config):
                logger.info("the loss has settled after %d steps; stopping", n)
                break
            if polish_settled(losses, config, n_points):
                done = n - config.polish_start
                logger.info("the polish has settled after %d of its steps; stopping", done)
                break
    finally:
        bar.close()
    history = FitHistory(np.asarray(losses, np.float64), np.asarray(chi2s, np.float64))
    if checkpoint_dir is not None and config.checkpoint_every:
        save_checkpoint(checkpoint_dir, state, history)
    return state, history


def settled(losses, config: FitConfig) -> bool:
    """Whether the loss fell by less than ``stop_tolerance`` of itself over the last
    ``stop_window`` steps (never when stop_tolerance is 0 or fewer steps were taken)."""
    window = config.stop_window
    if config.stop_tolerance <= 0 or len(losses) <= window:
        return False
    fall = losses[-window - 1] - losses[-1]
    return fall < config.stop_tolerance * abs(losses[-1])


def polish_settled(losses, config: FitConfig, n_points: float = 1.0) -> bool:
    """Whether the last two Newton or trust-region polish steps whose outcome is known lowered
    the negative log posterior (the loss times ``n_points``) by less than
    ``polish_tolerance`` nats together (never with polish_tolerance 0 or an L-BFGS polish,
    whose steps are short by design).

    ``losses[n]`` is the loss at the parameters step n starts from, so polish step k's outcome
    is known once step k + 1 has been taken.
    """
    if config.polish == "lbfgs" or config.polish_tolerance <= 0:
        return False
    switch = config.polish_start
    if len(losses) < switch + 3:
        return False
    return (losses[-3] - losses[-1]) * n_points < config.polish_tolerance


# The sky's modes as one array for every baseline, as checkpoints written before the sky's
# groups (2026-12-05) name them: "...sky.z" where today's name "...sky.z[0]" and on.
_ONE_BOX = re.compile(r"\.sky\.z(?![\[\w])")


def _leaf_names(tree) -> list[str]:
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(tree)]


def _host(leaf) -> np.ndarray:
    """A state leaf as numpy, whether or not all of it lives in this process."""
    if not isinstance(leaf, jax.Array) or leaf.is_fully_addressable:
        return np.asarray(jax.device_get(leaf))
    if leaf.sharding.is_fully_replicated:
        return np.asarray(leaf.addressable_data(0))
    return processes.host_rows(leaf, 0, leaf.shape[0])


def save_checkpoint(directory: Path, state: FitState, history: FitHistory) -> Path:
    """Write ``state`` and ``history`` to ``directory/checkpoint.npz`` atomically.

    The file is written whole under a hidden temporary name, flushed to the disk and renamed
    over the previous checkpoint, and the rename is flushed too: a process killed at any
    moment (or a machine that loses power) leaves the previous checkpoint or this one, never
    part of one.
    """
    directory = Path(directory)
    # In a multi-process run every process takes part in gathering the leaves; process 0 writes.
    arrays = {f"leaf_{i}": _host(leaf) for i, leaf in enumerate(jax.tree_util.tree_leaves(state))}
    final = directory / CHECKPOINT_NAME
    if not processes.is_writer():
        return final
    directory.mkdir(parents=True, exist_ok=True)
    arrays["leaf_names"] = np.array(_leaf_names(state))
    arrays["history_loss"] = history.loss
    arrays["history_chi2"] = history.chi2
    partial = directory / f".{CHECKPOINT_NAME}.partial"
    with open(partial, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    kill_point("checkpoint")
    os.replace(partial, final)
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    logger.info("checkpoint at step %d written to %s", int(state.step), final)
    return final


def load_checkpoint(
    directory: Path, template: FitState, optimizer=None
) -> tuple[FitState, FitHistory]:
    """Read a checkpoint written by ``save_checkpoint`` for a state shaped like ``template``
    (a gradient phase's; with a phased ``optimizer``, a checkpoint written in the polish is
    read in the polish's form, ``polish_form``).

    Refuses a checkpoint whose parameter names, shapes or dtypes differ from ``template``'s
    (a checkpoint of another configuration or data set).
    """
    path = Path(directory) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
    with np.load(path) as saved:
        names = list(saved["leaf_names"])
        expected = _leaf_names(template)
        one_box = any(_ONE_BOX.search(name) for name in names)
        # The one box's modes are a single group's, the first: with sky.groups 1 the same arrays.
        names = [_ONE_BOX.sub(".sky.z[0]", name) for name in names]
        if names != expected and isinstance(optimizer, Phased) and not in_polish(template):
            polishing = polish_form(template, optimizer)
            if names == _leaf_names(polishing):
                template, expected = polishing, names
        both = [any(n.startswith(f".opt_state.{k}") for n in names) for k in ("first", "polish")]
        if names != expected and all(both):
            raise ValueError(
                f"checkpoint {path} holds both phases' optimiser states, as tabascal wrote "
                "them before the gradient phases and the polish became two programs "
                "(2026-12-05); this version cannot resume it: run the fit again without "
                "--resume (or with the tabascal that wrote it)"
            )
        if names != expected and one_box:
            raise ValueError(
                f"checkpoint {path} holds the sky's modes as one array for every baseline, as "
                "tabascal wrote them before the sky's baselines were split into groups "
                "(2026-12-05); resume it with the config key sky.groups set to 1 (every "
                "baseline in one group, as it was written), or run the fit again without --resume"
            )
        if names != expected:
            raise ValueError(
                f"checkpoint {path} holds parameters {names[:4]}... but this run expects "
                f"{expected[:4]}...; it was written by a different model configuration"
            )
        template_leaves, treedef = jax.tree_util.tree_flatten(template)
        leaves = []
        for i, like in enumerate(template_leaves):
            value = saved[f"leaf_{i}"]
            if value.shape != jnp.shape(like) or value.dtype != jnp.result_type(like):
                raise ValueError(
                    f"checkpoint {path}: {names[i]} has shape {value.shape} and dtype "
                    f"{value.dtype}, but this run expects {jnp.shape(like)} "
                    f"{jnp.result_type(like)}; it was written for different data or precision"
                )
            leaves.append(value)
        history = FitHistory(saved["history_loss"].copy(), saved["history_chi2"].copy())
    return jax.tree_util.tree_unflatten(treedef, leaves), history
