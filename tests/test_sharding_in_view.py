"""A satellite that sets below the minimum elevation during the observation, in the middle of
an integration: the RFI groups then carry per-source tables (a quadrature group's weights and
fine times, an analytic group's view), which the baseline axis replicates and the source axis
splits with the sources. Both equal the single-device model, loss and gradient."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.fitting import run_config
from tabascal.model import joint
from tabascal.observation import geometry
from tabascal.parallel import baseline_axis, source_axis
from tabascal.store import read_observation

# quadrature t1 and an analytic group (the hybrid), cheap options (see test_sharding_baseline)
RFI = {"quadrature_limit": 8, "max_groups": 2, "segments": 1, "terms": 3, "cubic_terms": 1,
       "sampling": "midpoint"}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _float64(double_precision):
    """Every test here runs in float64."""


@pytest.fixture(scope="module")
def reference(small_store, double_precision):
    """(model, loss, gradient) on one device, satellite 0 setting below the minimum elevation
    (its median) within an integration."""
    obs = read_observation(small_store)
    elevation = geometry.satellite_elevation(obs.ant_itrf, obs.orbits, obs.times_s, obs.gast0_rad)
    config = {
        "precision": "double",
        "rfi": RFI,
        "satellites": {"min_elevation_deg": float(np.rad2deg(np.median(elevation[0])))},
    }
    model = joint.build(obs, run_config.model_config(run_config.load(config)), init="prior")
    kinds = {
        (spec.operator, "per source" if _per_source(spec, group) else "")
        for spec, group in zip(model.spec.groups, model.constants.groups, strict=True)
    }
    assert kinds == {("quadrature", "per source"), ("analytic", "per source")}
    inputs = (model.constants, model.data)
    value, grad = jax.jit(jax.value_and_grad(lambda p: joint.loss(p, inputs, model.spec)[0]))(
        model.params
    )
    return model, float(value), jax.tree.map(np.asarray, grad)


def _per_source(spec, group) -> bool:
    """Whether a group's tables are per source: a quadrature group's weights and fine times,
    an analytic group's view."""
    if spec.operator == "quadrature":
        return group.tables.dt.ndim == 3
    return group.view is not None


def _worst(grad, ref_grad) -> float:
    return max(
        float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-300))
        for g, w in zip(*map(jax.tree.leaves, (grad, ref_grad)), strict=True)
    )


def _route(route, model, n_dev):
    """(sharded model, loss, gradient on the host in the single-device layout) on ``route``."""
    sharded = route.shard_model(model, route.make_mesh(n_dev))
    spec = sharded.spec
    value, grad = jax.jit(jax.value_and_grad(lambda p, i: route.loss(p, i, spec)[0]))(
        sharded.params, (sharded.constants, sharded.data)
    )
    return sharded, float(value), route.unpad_params(grad, spec)


@pytest.mark.parametrize("n_dev", [3, pytest.param(4, marks=pytest.mark.heavy)])
def test_baseline_axis_with_a_setting_satellite_equals_single_device(reference, n_dev):
    model, ref_value, ref_grad = reference
    sharded, value, grad = _route(baseline_axis, model, n_dev)
    loss_error, worst = abs(value / ref_value - 1), _worst(grad, ref_grad)
    print(f"baseline axis on {n_dev}: loss {loss_error:.1e}, grad {worst:.1e}")
    # float64: loss measured 2.2e-16 at most, gradient 2.6e-16 (relative to the largest cell)
    assert loss_error <= 2e-14
    assert worst <= 3e-14
    leaf = jax.tree.leaves(sharded.params.sky)[0]
    assert len({s.device for s in leaf.addressable_shards}) == n_dev  # the sharded route ran


@pytest.mark.parametrize("n_dev", [pytest.param(2, marks=pytest.mark.heavy), 3])
def test_source_axis_with_a_setting_satellite_equals_single_device(reference, n_dev):
    model, ref_value, ref_grad = reference
    sharded, value, grad = _route(source_axis, model, n_dev)
    loss_error, worst = abs(value / ref_value - 1), _worst(grad, ref_grad)
    print(f"source axis on {n_dev}: loss {loss_error:.1e}, grad {worst:.1e}")
    # float64: loss measured 0 (equal), gradient 3.0e-16
    assert loss_error <= 1e-15
    assert worst <= 3e-14
    # the per-source tables are split with the sources
    for group in sharded.constants.groups:
        split = group.tables.w_time if group.view is None else group.view
        assert split.shape[0] == sharded.spec.n_src_padded
        assert split.sharding.is_equivalent_to(
            NamedSharding(sharded.spec.mesh, P("src")), split.ndim
        )
