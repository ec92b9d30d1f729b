"""Placement from abstract shapes (tabascal.planning.stages) equals the routes' own placement of
real arrays, on 4 virtual CPU devices; no program is compiled here."""

import jax
import numpy as np
import pytest
from conftest import require_devices

from tabascal.config import run_config
from tabascal.fitting import optimiser
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


@pytest.mark.parametrize("axis", ["source", "baseline", "reuse"])
def test_abstract_placement_has_the_shapes_and_shardings_of_the_real_one(models, axis):
    model, abstract = models
    route = routes.route(axis)
    mesh = route.make_mesh(N_DEVICES)
    real = route.place(model, mesh)
    from_shapes = stages.place_abstract(abstract, axis, mesh)
    assert _layout(from_shapes) == _layout(real)
    devices = list(mesh.devices.flat)
    parts = lambda p: (p.constants, p.data, p.params)  # noqa: E731
    # Independent count: the bytes of every real shard on each device.
    held = {d: 0 for d in devices}
    for leaf in jax.tree.leaves(parts(real)):
        for shard in leaf.addressable_shards:
            held[shard.device] += shard.data.nbytes
    assert stages.bytes_per_device(parts(from_shapes), devices) == [held[d] for d in devices]


def test_optimiser_state_shardings_follow_the_eager_initialisation(models):
    model, _ = models
    route = routes.route("baseline")
    mesh = route.make_mesh(N_DEVICES)
    real = route.place(model, mesh)
    # The gradient phases' state. With the L-BFGS polish (the run default since 2026-12-02) the
    # eager initialisation leaves the polish's history arrays on one device where the planner
    # replicates them: its placement on the baseline axis is still to be made.
    optimizer = optimiser.make_optimizer(optimiser.FitConfig(polish_steps=0))
    eager = optimiser.init_state(real.params, optimizer).opt_state
    shape = jax.eval_shape(optimizer.init, real.params)
    predicted = stages.state_shardings(real.params, shape, mesh, None)
    expected = jax.tree.map(lambda x: x.sharding, eager)
    for got, want, leaf in zip(
        jax.tree.leaves(predicted), jax.tree.leaves(expected), jax.tree.leaves(eager),
        strict=True,
    ):  # fmt: skip
        if leaf.ndim:  # step counts: uncommitted scalars, replicated under jit
            assert got == want
