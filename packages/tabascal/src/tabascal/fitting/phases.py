"""The fit in phases: the gradient phases, then the polish, as one optax transformation whose
state holds one phase's state at a time (``phased``); the fit's state (``FitState``), its
polish's form (``enter_polish``, ``polish_form``), and where an optimiser state's arrays are
placed (``state_shardings``).

The gradient phases and the polish are two compiled programs (``optimiser.make_step``'s
``PhasedStep``), each carrying only its own optimiser state: the gradient phases no L-BFGS
histories, the polish no AdaBelief moments. Which phase a state is in is read from its form
(``in_polish``), so a fit resumed from a checkpoint continues in the phase it was written in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


class FitState(NamedTuple):
    """Everything that changes from one step to the next."""

    params: Any
    opt_state: Any
    step: jax.Array  # int32 scalar: steps taken so far


class PhasedState(NamedTuple):
    """State of ``phased``: steps taken, and the state of the phase in progress: ``first``'s
    until the polish begins (``polish`` None), the polish's after it (``first`` None).

    Each phase is its own compiled program (``optimiser.make_step``) holding only its own
    state: the gradient phases carry no L-BFGS histories (twenty copies of the parameters by
    default) and the polish no AdaBelief moments (two copies), which at bench-512's 64
    channels are most of a device's memory (docs/benchmarks.md, the gradient phases and the
    polish as two programs).
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
    Gauss-Newton product at ``params``, or None), which it passes on; ``optimiser.make_step``
    passes them. The state holds one phase's state at a time (``PhasedState``), and which one
    fixes, when the step is traced, which phase's update runs: ``enter_polish`` replaces the
    first's with the polish's once ``switch`` updates have been taken (``optimiser.make_step``'s
    step does so itself).
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
    # Placed as the polish's program is compiled for (``polish_form``): an eager init on
    # sharded parameters can leave an array of its own sharded where the form replicates it
    # (the Levenberg-Marquardt blocks, whose rows XLA may split over the devices).
    form = polish_form(state, optimizer).opt_state.polish
    polish = jax.tree.map(lambda x, f: jax.device_put(x, f.sharding), polish, form)
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
    parameter's stacked (``map_history``); the Levenberg-Marquardt blocks are divided as
    their leaf's first axis is (``_place_blocks``); the rest (step counts, the histories'
    weights) are replicated over ``mesh``, or on ``device`` without one."""
    by_shape = {}
    for leaf in jax.tree.leaves(params):
        by_shape.setdefault((leaf.shape, np.dtype(leaf.dtype)), leaf.sharding)
    other = device if mesh is None else NamedSharding(mesh, P())
    shardings = jax.tree.map(
        lambda s: by_shape.get((s.shape, np.dtype(s.dtype)), other), state_shape
    )
    stacked = lambda _, leaf: stacked_sharding(leaf.sharding)  # noqa: E731
    return _place_blocks(map_history(shardings, params, stacked), params, mesh)


def _place_blocks(shardings, params, mesh):
    """``shardings`` with the Levenberg-Marquardt state's blocks (``blocks``: one (rows, b, b)
    array per parameter leaf, its rows the leaf's leading axes flattened) divided over the
    devices as their leaf's first axis is: the sky's by baseline on the baseline axis, the
    rest whole on every device."""
    if mesh is None or not hasattr(shardings, "blocks"):
        return shardings

    def place(leaf):
        spec = getattr(leaf.sharding, "spec", ())
        return NamedSharding(mesh, P(spec[0] if len(spec) else None))

    blocks = tuple(place(leaf) for leaf in jax.tree.leaves(params))
    return shardings._replace(blocks=blocks)


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
