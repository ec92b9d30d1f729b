"""The fit's optimiser: its settings (``FitConfig``), the optimiser they make
(``make_optimizer``), its jitted step (``make_step``) and the loop that takes the steps and
writes checkpoints (``run``).

The fit is a pure function of a loss ``loss_fn(params, inputs) -> (loss, aux)`` where ``aux``
is a dict of scalars (at least ``"chi2"``, the reduced chi-squared). ``inputs`` is passed to the
jitted step as an argument rather than closed over, so large arrays are never baked into the
compiled program as constants.

The optimiser runs ``steps`` steps at ``learning_rate``, then ``second_phase_steps`` at a
tenth of it, then ``polish_steps`` of the polish. The gradient steps find the basin from the
data-based start; the polish, built from the loss's curvature, walks down its long shallow
valleys (the trade between a gain and the RFI amplitude it multiplies, say) that a
first-order step crosses and recrosses. The default polish is Levenberg-Marquardt
(``fit.polish: levenberg-marquardt``, ``levenberg_marquardt``): Gauss-Newton steps, damped
and solved by preconditioned conjugate gradients, after 200 gradient steps and no second
phase, ending once it has converged (``converged``); with ``steps: 0`` and
``second_phase_steps: 0`` it is the whole fit. ``fit.polish: trust-region``
(``solvers.newton_trust_region``) solves H d = -g by up to ``polish_cg_steps``
conjugate-gradient iterations on Hessian-vector products of the loss within a trust radius,
following a direction of negative curvature to the radius; ``fit.polish: newton``
(``solvers.newton_cg``) takes the same solves without a radius, stopping at negative
curvature, then backtracks along d. Neither holds histories; both end once their steps no
longer lower the loss (``polish_tolerance``). The fourth is L-BFGS (``fit.polish: lbfgs``,
``optax.lbfgs``: a quasi-Newton direction from the last ``polish_memory`` steps and a zoom line
search on the loss).

The schedule and the phase live in the optimiser state (``phases``), so a run resumed from a
checkpoint (``checkpoint``) continues exactly where an uninterrupted run would be. The gradient
phases and the polish are two compiled programs (``make_step``'s ``PhasedStep``), each carrying
only its own optimiser state: the gradient phases no L-BFGS histories, the polish no AdaBelief
moments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding

from tabascal.config import option_field
from tabascal.fitting.checkpoint import FitHistory, save_checkpoint
from tabascal.fitting.levenberg_marquardt import LevenbergMarquardtState, levenberg_marquardt
from tabascal.fitting.phases import (
    FitState,
    Phased,
    PhasedState,
    enter_polish,
    in_polish,
    phased,
    polish_form,
    then_lbfgs,
)
from tabascal.fitting.solvers import newton_cg, newton_trust_region
from tabascal.parallel import processes

logger = logging.getLogger(__name__)

OPTIMIZERS = ("adabelief", "adam", "sgd")
POLISHES = ("lbfgs", "newton", "trust-region", "levenberg-marquardt")
#: What the Newton polishes' conjugate gradients multiply by (``FitConfig.polish_curvature``).
CURVATURES = ("hessian", "gauss-newton")


#: The most Newton steps a fit takes when ``fit.polish_steps`` is not set: ten arrive on the
#: demo where five stop short, the first few of them spent where the Hessian is not yet
#: positive (docs/science.md, longer conjugate-gradient solves).
NEWTON_STEPS_MAX = 10

#: The most trust-region steps a fit takes when ``fit.polish_steps`` is not set (a quarter of
#: the first phase's, rounded up, below it): a ceiling, since the polish ends once its steps no
#: longer lower the loss (``polish_tolerance``). It leaves room for a fit whose gradient phases
#: end far from the optimum, where each step is held to a radius of about half a posterior
#: standard deviation and the RFI left in the cleaned data takes some tens of steps to fall
#: below the goal (docs/science.md, the trust-region polish).
TRUST_REGION_STEPS_MAX = 100


#: The most Levenberg-Marquardt steps a fit takes when ``fit.polish_steps`` is not set: a
#: ceiling, since the fit ends once it has converged (``tolerance``, ``gradient_tolerance``).
#: The LEO passes reach their science goals within 60 after 200 gradient steps, the last
#: steps still lowering the loss (docs/science.md, the defaults).
LM_STEPS_MAX = 60

#: The most conjugate-gradient products a Levenberg-Marquardt step takes when
#: ``fit.polish_cg_steps`` is not set; most solves end sooner, at ``forcing``.
LM_CG_STEPS = 50


@dataclass(frozen=True)
class FitConfig:
    """Static settings of a fit.

    Attributes:
      optimizer: one of ``OPTIMIZERS``.
      learning_rate: step size of the first phase (whitened units per step).
      steps: number of steps in the first phase.
      second_phase_steps: number of further steps at ``learning_rate / 10`` (0 for none;
        None: ``steps // 2``, or 0 with the Levenberg-Marquardt polish).
      hold_gains: whether the gradient phases leave the gains at their start, for the polish
        to fit.
      polish: the optimiser after the gradient phases, one of ``POLISHES``: L-BFGS,
        Newton's method by conjugate gradients and a line search (``newton_cg``), or in a
        trust region (``newton_trust_region``).
      polish_steps: number of polish steps after those (0 for none; None: ``5 steps // 2``
        L-BFGS steps, ``steps / 40`` Newton steps, rounded up, at most ``NEWTON_STEPS_MAX``,
        or ``steps / 4`` trust-region steps, rounded up, at most ``TRUST_REGION_STEPS_MAX``).
      polish_memory: past steps the L-BFGS direction is built from; its state holds two
        copies of the parameters per step.
      polish_cg_steps: conjugate-gradient iterations (Hessian-vector products) per Newton
        or Levenberg-Marquardt step (None: 400, or ``LM_CG_STEPS`` with
        levenberg-marquardt).
      forcing: a Levenberg-Marquardt solve stops once an iteration lowers its quadratic
        model by less than this fraction of its fall so far, over the iterations taken.
      tolerance, gradient_tolerance: a Levenberg-Marquardt fit has converged (``converged``)
        once a step lowers the negative log posterior by less than ``tolerance`` of itself
        and the gradient's size, g' D^-1 g / 2 in nats, is below ``gradient_tolerance``.
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
    # 200 gradient steps from the data-based start find the basin, where the LEO passes'
    # Gauss-Newton steps alone stall; the Levenberg-Marquardt steps then meet the science
    # goals on every scenario in a fifth to a quarter of the time of 800 + 400 gradient
    # steps and a trust-region polish (docs/science.md, the defaults).
    steps: int = option_field(200, "steps in the first phase", min=0)
    second_phase_steps: int | None = option_field(
        None,
        "further steps at a tenth of the step size; null = half of steps, or none with "
        "levenberg-marquardt",
        min=0,
    )
    # Adam's and AdaBelief's steps are of one size whatever the gradient, so the gradient
    # phases carry the gains along the soft valley where a gain trades against the RFI it
    # multiplies, where Gauss-Newton steps then barely move them. Held, the demo's gains end
    # 0.06 of their spread from the truth rather than 0.30; but a LEO pass's strong RFI needs
    # the gains moved with it, and held its RFI is left at 0.56 of the noise rather than 0.15
    # (docs/science.md, the defaults).
    hold_gains: bool = option_field(
        False, "the gradient phases leave the gains at their start, for the polish to fit"
    )
    polish: str = option_field(
        "levenberg-marquardt",
        "optimiser after the gradient phases: lbfgs; newton (Newton steps by conjugate "
        "gradients on the loss's Hessian, then a line search); trust-region (the same "
        "steps within a trust radius, following negative curvature to it); or "
        "levenberg-marquardt (damped Gauss-Newton steps by preconditioned conjugate "
        "gradients, until converged)",
        choices=POLISHES,
    )
    polish_steps: int | None = option_field(
        None,
        "polish steps after the gradient phases (0 = none); null = 2.5 x steps with lbfgs, "
        "steps / 40 (rounded up, at most 10) with newton, steps / 4 (rounded up, at most 100) "
        "with trust-region, 60 with levenberg-marquardt",
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
    # need the longer solves. Fewer, longer solves settle the gains further in fewer products,
    # since a solve that meets negative curvature stops early, and leave the other scenarios'
    # fits as they were (docs/science.md, longer conjugate-gradient solves).
    polish_cg_steps: int | None = option_field(
        None,
        "conjugate-gradient iterations per polish step (newton, trust-region, "
        "levenberg-marquardt); null = 400, or 50 with levenberg-marquardt",
        min=1,
    )
    forcing: float = option_field(
        0.01,
        "a levenberg-marquardt step's conjugate gradients stop once one of them lowers the "
        "quadratic model by less than this fraction of its fall so far, over the "
        "iterations taken",
        min=0.0,
        max=1.0,
    )
    # 1e-5, not 1e-6: on the demo both end at the same fit, this one in three quarters of
    # the passes (docs/science.md, Gauss-Newton steps and their solves).
    tolerance: float = option_field(
        1e-5,
        "a levenberg-marquardt fit has converged once a step lowers the negative log "
        "posterior by less than this fraction of itself (and gradient_tolerance holds)",
        min=0.0,
    )
    gradient_tolerance: float = option_field(
        1.0,
        "and once the gradient's size, g' D^-1 g / 2 in nats (D: the curvature's "
        "diagonal; about the fall still to come), is below this",
        min=0.0,
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
        if self.polish_cg_steps is None:
            cg_steps = LM_CG_STEPS if self.polish == "levenberg-marquardt" else 400
            object.__setattr__(self, "polish_cg_steps", cg_steps)
        if self.second_phase_steps is None:
            # Levenberg-Marquardt's steps take the second phase's place: near the optimum a
            # fixed step size circles it, where a Gauss-Newton step walks down its valleys.
            second = 0 if self.polish == "levenberg-marquardt" else self.steps // 2
            object.__setattr__(self, "second_phase_steps", second)
        if self.polish_steps is None:
            if self.polish == "lbfgs":
                share = 5 * self.steps // 2
            elif self.polish == "levenberg-marquardt":
                share = LM_STEPS_MAX
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
    if config.hold_gains:
        first = optax.multi_transform({"move": first, "hold": optax.set_to_zero()}, _held_gains)
    if config.polish_steps == 0:
        return first
    switch = config.polish_start
    gauss_newton = config.polish_curvature == "gauss-newton"
    if config.polish == "newton":
        return phased(first, switch, newton_cg(config.polish_cg_steps, gauss_newton))
    if config.polish == "trust-region":
        return phased(first, switch, newton_trust_region(config.polish_cg_steps, gauss_newton))
    if config.polish == "levenberg-marquardt":
        solver = levenberg_marquardt(
            config.polish_cg_steps, config.forcing, block_axes=_mode_axes, rows_alike=_sky_rows
        )
        return phased(first, switch, solver)
    return then_lbfgs(first, switch, config.polish_memory)


#: The trailing axes of each of the model's parameter leaves (``ModelParams``) that the
#: Levenberg-Marquardt preconditioner's blocks span: a gain's time modes per antenna and
#: channel, a satellite's signal modes (real and imaginary, frequency, time), a baseline's
#: sky modes, a satellite's orbit offsets (docs/science.md, "Gauss-Newton steps and their
#: solves").
MODE_AXES = {".gains": 1, ".rfi": 3, ".sky": 3, ".orbits": 1}


def _mode_axes(path: str) -> int | None:
    """The axes ``MODE_AXES`` gives the leaf at ``path``; None (the whole leaf) for a leaf
    of no model's."""
    return next((axes for prefix, axes in MODE_AXES.items() if path.startswith(prefix)), None)


def _held_gains(params):
    """ "hold" on the gains' leaves (``ModelParams.gains``), "move" on the others: the labels
    of the gradient phases' ``optax.multi_transform`` under ``FitConfig.hold_gains``."""

    def label(path, _):
        return "hold" if jax.tree_util.keystr(path).startswith(".gains") else "move"

    return jax.tree_util.tree_map_with_path(label, params)


def _sky_rows(path: str) -> bool:
    """Whether ``path`` names one of the model's sky leaves (``ModelParams.sky``): one row per
    baseline, which no Gauss-Newton product couples to another row, and which the baseline
    axis pads and the reuse plan permutes (``levenberg_marquardt.estimate_diagonal``)."""
    return path.startswith(".sky")


def init_state(params, optimizer: optax.GradientTransformation) -> FitState:
    return FitState(params, optimizer.init(params), jnp.zeros((), jnp.int32))


def make_step(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    curvature_fn: Callable | None = None,
    curvature_floor: Callable | None = None,
) -> Callable:
    """A jitted ``step(state, inputs) -> (state, loss, aux)`` that donates ``state``.

    ``loss`` and ``aux`` are evaluated at the parameters *before* the update. With a phased
    optimiser (``phased``) the step is a ``PhasedStep``: one program for the gradient phases
    and one for the polish, which it enters itself (``enter_polish``). curvature_fn(params,
    v, inputs): the loss's Gauss-Newton product (``joint.gauss_newton`` over the route's
    predict), for a polish with ``polish_curvature: gauss-newton`` or Levenberg-Marquardt's;
    curvature_floor(inputs): the least eigenvalue that product can have (the priors' 1 /
    N), for Levenberg-Marquardt's preconditioner.
    """

    def step(state: FitState, inputs):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, inputs)
        extra = {}
        if isinstance(state.opt_state, PhasedState):  # the line search evaluates the loss
            extra = {"value": loss, "grad": grads, "value_fn": lambda p: loss_fn(p, inputs)[0]}
            # Only a polish that takes the products takes their floor: L-BFGS's line search
            # refuses any argument it does not know.
            if curvature_fn is not None:
                extra["curvature_fn"] = lambda v: curvature_fn(state.params, v, inputs)
                if curvature_floor is not None:
                    extra["curvature_floor"] = curvature_floor(inputs)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params, **extra)
        params = optax.apply_updates(state.params, updates)
        return FitState(params, opt_state, state.step + 1), loss, aux

    jitted = jax.jit(step, donate_argnums=0)
    if isinstance(optimizer, Phased):
        return PhasedStep(jitted, optimizer, step)
    return jitted


class PhasedStep:
    """The step of a phased optimiser: the gradient phases' program until ``switch`` steps
    have been taken, then, from a state ``enter_polish`` has put in the polish's form, the
    polish's. ``compile`` compiles both ahead of the first step; otherwise each compiles when
    first called, as ``jax.jit`` does."""

    def __init__(self, jitted, optimizer: Phased, step: Callable):
        self.jitted = jitted
        self.optimizer = optimizer
        self.step = step
        self.programs: dict[str, Any] = {}

    def _keeping(self, polishing: FitState):
        """The polish's program with its state's outputs placed as ``polishing``'s inputs
        are, on a mesh: else XLA may split an array of the solver's own (the curvature's
        blocks) otherwise than the next step's program was compiled for."""
        leaves = jax.tree.leaves(polishing)
        if not all(isinstance(getattr(x, "sharding", None), NamedSharding) for x in leaves):
            return self.jitted  # one device, or a state read back on the host (a checkpoint)
        shardings = jax.tree.map(lambda x: x.sharding, polishing)

        def step(state, inputs):
            new, loss, aux = self.step(state, inputs)
            return jax.lax.with_sharding_constraint(new, shardings), loss, aux

        return jax.jit(step, donate_argnums=0)

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
        self.programs = {"polish": self._keeping(polishing).lower(polishing, inputs).compile()}
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
    passes = list(history.passes) if history is not None and history.passes is not None else []
    if len(passes) != len(losses):  # a history written before passes were counted
        passes = [float(k + 1) for k in range(len(losses))]
    if len(losses) != done:
        raise ValueError(f"history holds {len(losses)} steps but the state has taken {done}")
    bar = tqdm(
        total=config.total_steps,
        initial=done,
        unit="step",
        leave=False,
        disable=not (progress and processes.is_writer()),
    )
    stopped = "steps"
    try:
        for _ in range(done, config.total_steps):
            state, loss, aux = step_fn(state, inputs)
            losses.append(float(loss))
            chi2s.append(float(aux["chi2"]))
            passes.append(passes_taken(state, passes, config))
            # Each figure is read from the device: only when they are to be logged.
            lm = _lm_state(state) if logger.isEnabledFor(logging.DEBUG) else None
            if lm is not None:
                logger.debug(
                    "step %d: loss %.9g, damping %.3g, %d products, %s, predicted fall %.3g",
                    len(losses), losses[-1], float(lm.damping), int(lm.cg_iterations),
                    "taken" if float(lm.step_size) else "refused", float(lm.decrease),
                )  # fmt: skip
            n = len(losses)
            bar.update(1)
            bar.set_postfix(
                loss=f"{losses[-1]:.4g}", chi2=f"{chi2s[-1]:#.4g}", passes=f"{passes[-1]:.0f}",
                refresh=False,
            )  # fmt: skip
            due = config.checkpoint_every and n % config.checkpoint_every == 0
            if checkpoint_dir is not None and due and n < config.total_steps:
                save_checkpoint(checkpoint_dir, state, _history(losses, chi2s, passes))
            if settled(losses, config):
                logger.info("the loss has settled after %d steps; stopping", n)
                stopped = "settled"
                break
            if polish_settled(losses, config, n_points):
                done = n - config.polish_start
                logger.info("the polish has settled after %d of its steps; stopping", done)
                stopped = "polish settled"
                break
            if converged(state, losses, config, n_points):
                logger.info("converged after %d steps (%.0f passes)", n, passes[-1])
                stopped = "converged"
                break
    finally:
        bar.close()
    history = _history(losses, chi2s, passes)._replace(stopped=stopped)
    if checkpoint_dir is not None and config.checkpoint_every:
        save_checkpoint(checkpoint_dir, state, history)
    return state, history


def _history(losses, chi2s, passes) -> FitHistory:
    as64 = lambda v: np.asarray(v, np.float64)  # noqa: E731
    return FitHistory(as64(losses), as64(chi2s), as64(passes))


def _lm_state(state: FitState) -> LevenbergMarquardtState | None:
    polish = getattr(state.opt_state, "polish", None)
    return polish if isinstance(polish, LevenbergMarquardtState) else None


def passes_taken(state: FitState, passes: list[float], config: FitConfig) -> float:
    """The passes (one forward and one backward evaluation of the model) the fit has taken
    after the step that made ``state``, ``passes`` those before it: one for a gradient step;
    a Levenberg-Marquardt step's from its state (``levenberg_marquardt``); a Newton or
    trust-region step's one, its conjugate-gradient products (each counted as one) and half
    of one for the loss at its step; an L-BFGS step's one."""
    lm = _lm_state(state)
    if lm is not None:
        gradient_steps = min(config.polish_start, len(passes))
        before = passes[gradient_steps - 1] if gradient_steps else 0.0
        return before + float(lm.passes)
    polish = getattr(state.opt_state, "polish", None)
    spent = 1.0
    if polish is not None and hasattr(polish, "cg_iterations"):
        spent += float(polish.cg_iterations) + 0.5
    return (passes[-1] if passes else 0.0) + spent


def converged(state: FitState, losses, config: FitConfig, n_points: float = 1.0) -> bool:
    """Whether a Levenberg-Marquardt fit has converged: the step before the last lowered
    the negative log posterior (the loss times ``n_points``) by less than ``tolerance`` of
    itself (a refused step, which lowers it by nothing, counts too), and the last step began
    where the gradient's size (``gradient_norm2`` / 2, in nats) was below
    ``gradient_tolerance``. Never for other solvers, or with tolerance 0.

    ``losses[n]`` is the loss at the parameters step n starts from, so the fall of the step
    that made ``state`` is known only from the next step's loss; the test reads the step
    before it, and the state's figures of that step's start are the step's own.
    """
    lm = _lm_state(state)
    if lm is None or config.tolerance <= 0 or int(lm.count) < 2 or len(losses) < 2:
        return False
    fall = (losses[-2] - losses[-1]) * n_points
    nlp = abs(losses[-1]) * n_points
    small_fall = 0 <= fall < config.tolerance * nlp
    flat = 0.5 * float(lm.gradient_norm2) * n_points < config.gradient_tolerance
    return small_fall and flat


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
    if config.polish not in ("newton", "trust-region") or config.polish_tolerance <= 0:
        return False
    switch = config.polish_start
    if len(losses) < switch + 3:
        return False
    return (losses[-3] - losses[-1]) * n_points < config.polish_tolerance
