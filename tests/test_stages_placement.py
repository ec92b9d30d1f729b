"""Placement from abstract shapes (tabascal.planning.stages) equals the routes' own placement of
real arrays, on 4 virtual CPU devices; one fit step is compiled, to follow the L-BFGS
histories' placement through it."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import require_devices
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.fitting import optimiser, phases, run_config
from tabascal.model import joint
from tabascal.parallel import routes
from tabascal.planning import stages
from tabascal.store import read_observation

N_DEVICES = 4


@pytest.fixture(scope="module")
def models(small_store):
    require_devices(N_DEVICES)
    path = small_store
    obs = read_observation(path)
    config = run_config.model_config(run_config.load(None))
    model = joint.build(obs, config)
    return model, joint.abstract_model(obs.meta, config, snr=model.info["rfi_snr"])


def _layout(placed):
    parts = (placed.constants, placed.data, placed.params)
    return jax.tree.structure(parts), [
        (x.shape, np.dtype(x.dtype), x.sharding) for x in jax.tree.leaves(parts)
    ]


@pytest.mark.parametrize(
    ("axis", "row_blocks"), [("source", 1), ("baseline", 1), ("reuse", 1), ("baseline", 2)]
)
def test_abstract_placement_has_the_shapes_and_shardings_of_the_real_one(models, axis, row_blocks):
    model, abstract = models
    route = routes.route(axis)
    mesh = route.make_mesh(N_DEVICES)
    real = route.place(model, mesh, row_blocks=row_blocks)
    from_shapes = stages.place_abstract(abstract, axis, mesh, row_blocks)
    assert getattr(real.spec, "row_blocks", 1) == row_blocks
    assert _layout(from_shapes) == _layout(real)
    devices = list(mesh.devices.flat)
    parts = lambda p: (p.constants, p.data, p.params)  # noqa: E731
    # Independent count: the bytes of every real shard on each device.
    held = {d: 0 for d in devices}
    for leaf in jax.tree.leaves(parts(real)):
        for shard in leaf.addressable_shards:
            held[shard.device] += shard.data.nbytes
    assert stages.bytes_per_device(parts(from_shapes), devices) == [held[d] for d in devices]


def _polish_state(model, axis):
    """The baseline-axis placement of ``model`` and its fit state with the L-BFGS polish."""
    route = routes.route(axis)
    mesh = route.make_mesh(N_DEVICES)
    real = route.place(model, mesh)
    config = optimiser.FitConfig(
        steps=1, second_phase_steps=0, polish="lbfgs", polish_steps=2, polish_memory=3
    )
    optimizer = optimiser.make_optimizer(config)
    return route, mesh, real, optimizer, optimiser.init_state(real.params, optimizer)


@pytest.mark.parametrize("axis", ["baseline", "reuse"])
def test_optimiser_state_shardings_follow_the_eager_initialisation(models, axis):
    model, _ = models
    _, mesh, real, optimizer, state = _polish_state(model, axis)
    shape = jax.eval_shape(optimizer.init, real.params)
    predicted = phases.state_shardings(real.params, shape, mesh, None)
    for got, leaf in zip(
        jax.tree.leaves(predicted), jax.tree.leaves(state.opt_state), strict=True
    ):  # fmt: skip
        # Uncommitted leaves (step counts, the histories' weights) are replicated under jit.
        assert got == (leaf.sharding if leaf.committed else NamedSharding(mesh, P()))


def _sky_histories(opt_state):
    lbfgs = [
        node
        for node in jax.tree.leaves(
            opt_state, is_leaf=lambda n: isinstance(n, optax.ScaleByLBFGSState)
        )
        if isinstance(node, optax.ScaleByLBFGSState)
    ]
    assert len(lbfgs) == 1
    return (*lbfgs[0].diff_params_memory.sky.z, *lbfgs[0].diff_updates_memory.sky.z)


@pytest.mark.parametrize("axis", ["baseline", "reuse"])
def test_lbfgs_histories_divide_like_the_sky_through_the_steps(models, axis):
    """The polish's histories of the sky's modes are held per device as the modes are, as the
    polish begins and after its L-BFGS steps (the step's outputs keep its inputs' placement),
    so its 2 x polish_memory copies divide over the devices instead of being replicated; the
    polish's form predicted from the shapes (``phases.polish_form``, what its program is
    compiled for ahead of it) places them alike. The gradient phase holds none."""
    model, _ = models
    route, _, real, optimizer, state = _polish_state(model, axis)
    # The sky's groups' shapes and placements (donated below), for both histories of each.
    groups = [(z.shape, z.sharding.spec) for z in real.params.sky.z] * 2
    step = optimiser.make_step(partial(route.loss, spec=real.spec), optimizer)
    # The step donates its state: its own copy of the parameters, not the shared fixture's.
    state = state._replace(params=jax.tree.map(jnp.copy, state.params))
    for taken in range(4):  # the start, one gradient step, then the two L-BFGS steps (and one)
        if taken < 2:  # the gradient phase holds no histories (the second step enters the polish)
            assert state.opt_state.polish is None
        else:
            predicted = phases.polish_form(state, optimizer)
            for history, like, (shape, spec) in zip(
                _sky_histories(state.opt_state),
                _sky_histories(predicted.opt_state),
                groups,
                strict=True,
            ):
                assert history.shape == like.shape == (3, *shape)
                assert history.sharding.spec == like.sharding.spec == P(None, *spec)
                # Independent of the sharding's description: what each device holds.
                shards = history.addressable_shards
                assert len(shards) == N_DEVICES
                assert {s.data.shape for s in shards} == {(3, shape[0] // N_DEVICES, *shape[1:])}
        if taken < 3:
            state, _, _ = step(state, (real.constants, real.data))
    assert int(state.step) == 3
