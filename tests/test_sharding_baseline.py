"""The baseline-sharded model equals the single-device model, on 1 to 4 virtual CPU devices.

28 baselines (8 stations) do not divide over 3 devices, so that case pads the baseline axis with
flagged rows and both RFI groups with ghost pairs that scatter into the spare row; every case
with three or four devices pads some sky groups' slots. The rows go in the spread order
(``tabascal_partition.spread_order``), so on 4 devices both RFI groups divide evenly. Each case
also proves the sharded route ran: the RFI output lives on P("bl") over n devices with one block
of B rows per device.
"""

import dataclasses
from functools import partial

import jax
import numpy as np
import pytest
from conftest import assert_steps_gather_nothing, compiled_step, fit_step
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.fitting import run_config
from tabascal.model import joint
from tabascal.parallel import baseline_axis, routes
from tabascal.store import read_observation

N_DEVICES = 4
# quadrature_limit picks the route: 256 keeps every group on quadrature (t1 and t16 here), 0
# makes one analytic group, 8 gives quadrature t1 and analytic (the hybrid). Two groups at most
# and a short analytic expansion keep compilation short; equivalence does not depend on them.
ROUTES = {"quadrature": 256, "analytic": 0, "hybrid": 8}
# The midpoint rule keeps these groups (Gauss-Legendre samples would need fewer time samples
# and leave the hybrid with no analytic group here).
CHEAP = {"max_groups": 2, "segments": 1, "terms": 3, "cubic_terms": 1, "sampling": "midpoint"}
CASES = [
    ("hybrid", 1),
    ("hybrid", 2),
    ("hybrid", 3),
    ("hybrid", 4),
    ("quadrature", 3),
    ("analytic", 4),
]
# Run by the nox session integration (the rest by integration_heavy): ghosts in both groups of
# the hybrid route, and the evenly dividing analytic case.
LIGHT = {("hybrid", 3), ("analytic", 4)}
# A field of 60 degrees: the sky's baselines then keep 1 x 1 to 3 x 11 modes, in three groups
# with their own boxes (28 baselines: 12, 10, 6), so every placement here has the sky's groups
# and their padding slots; with the dish's field every baseline keeps 1 x 1 (one group).
SKY = {"fov_radius_deg": 60.0}


@pytest.fixture(scope="module", autouse=True)
def _float64(double_precision):
    """Every test here runs in float64 unless it says otherwise."""


@pytest.fixture(scope="module")
def obs(small_store, double_precision):
    return read_observation(small_store)


_references = {}


def _reference(obs, route):
    """(model, loss, gradient) of the single-device model for a route, built once."""
    if route not in _references:
        config = {
            "precision": "double",
            "rfi": {"quadrature_limit": ROUTES[route], **CHEAP},
            "sky": SKY,
        }
        model = joint.build(obs, run_config.model_config(run_config.load(config)), init="prior")
        inputs = (model.constants, model.data)
        value, grad = jax.jit(jax.value_and_grad(lambda p: joint.loss(p, inputs, model.spec)[0]))(
            model.params
        )
        _references[route] = (model, float(value), jax.tree.map(np.asarray, grad))
    return _references[route]


def _relative(a, b) -> float:
    # Relative to the largest cell, not per cell: a gradient cell is a sum whose terms cancel
    # (cells go down to a few 1e-6 of the largest here), so its rounding scales with the
    # largest terms.
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize(
    ("route", "n_dev"),
    [
        pytest.param(r, n, id=f"{r}-{n}dev", marks=() if (r, n) in LIGHT else pytest.mark.heavy)
        for r, n in CASES
    ],
)
def test_sharded_loss_and_gradient_equal_single_device(obs, route, n_dev):
    model, ref_value, ref_grad = _reference(obs, route)
    sharded = baseline_axis.shard_model(model, baseline_axis.make_mesh(n_dev))
    spec, plan = sharded.spec, sharded.plan

    def value_grad_rfi(params, inputs):
        value, grad = jax.value_and_grad(lambda p: baseline_axis.loss(p, inputs, spec)[0])(params)
        return value, grad, baseline_axis.predict_rfi(params.rfi, inputs[0], spec)

    value, grad, rfi = jax.jit(value_grad_rfi)(sharded.params, (sharded.constants, sharded.data))

    grad = baseline_axis.unpad_params(grad, spec)
    worst = max(
        _relative(g, w) for g, w in zip(*map(jax.tree.leaves, (grad, ref_grad)), strict=True)
    )
    print(f"{route} on {n_dev}: loss {abs(float(value) / ref_value - 1):.1e}, grad {worst:.1e}")
    # float64, every case, with the sky's three groups: loss measured 1.7e-15 at most (hybrid on
    # 3), gradient 3.5e-16 (hybrid on 2 to 4, analytic on 4). Before the groups (one box):
    # 1.1e-15 and 4.2e-16 (rfi; per cell it would read 1.7e-13, quadrature on 3, sky).
    assert abs(float(value) - ref_value) <= 2e-13 * abs(ref_value)
    for name in ("sky", "rfi", "gains"):  # per component, every leaf (fixed orbits: no orbits)
        got, want = getattr(grad, name), getattr(ref_grad, name)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert g.shape == w.shape, name
            assert _relative(g, w) <= 5e-14, (name, _relative(g, w))

    # The sharded route ran: one block of B rows per device on P("bl").
    n_bl = model.spec.n_bl
    assert spec.block_size == -(-n_bl // n_dev)
    assert rfi.shape == (n_dev * spec.block_size, *model.data.vis.shape[1:])
    assert isinstance(rfi.sharding, NamedSharding) and rfi.sharding.mesh.size == n_dev
    assert rfi.sharding.is_equivalent_to(NamedSharding(spec.mesh, P("bl")), rfi.ndim)
    shards = rfi.addressable_shards
    assert len({s.device for s in shards}) == n_dev
    assert all(s.data.shape[0] == spec.block_size for s in shards)
    assert not np.any(np.asarray(rfi)[n_bl:]), "padded rows must carry no RFI"
    padded_groups = sum(int(g.n_padding.sum()) > 0 for g in plan.groups)
    assert (plan.n_ghost > 0) == (padded_groups > 0), plan.summary()
    assert (spec.order is None) == (n_dev == 1)  # the spread order, not the data's
    if n_dev == 3 and route != "analytic":
        # Measured plans: 3 devices pad the two groups by (1, 0, 2) and (0, 1, 1) rows: ghosts in
        # both groups (in the data's order (1, 5, 0) and (4, 0, 7)).
        assert padded_groups >= 2, plan.summary()
    if n_dev in (2, 4):
        # The spread order gives each device 3 and 4 rows of the hybrid's groups on 4 devices
        # (in the data's order they were padded by (3, 3, 6, 0) and (3, 3, 0, 6)).
        assert padded_groups == 0, plan.summary()
    if n_dev > 2:
        assert any((slot.member < 0).any() for slot in spec.sky_slots), "no sky padding slot"
    if route == "hybrid":
        operators = {g.operator for g in model.spec.groups}
        assert operators == {"quadrature", "analytic"} and len(model.spec.groups) >= 2


def test_compiled_step_on_four_devices_has_no_gather_or_permute(obs):
    model = _reference(obs, "hybrid")[0]
    assert_steps_gather_nothing(compiled_step(model, "baseline"), model.spec.n_ant, "baseline")


@pytest.mark.heavy
def test_twenty_fit_steps_on_four_devices_reach_the_single_device_chi2(obs):
    chi2 = {}
    for axis in ("none", "baseline"):
        # 20 of the 200 gradient steps: the polish's program is never compiled.
        step, state, inputs = fit_step(_reference(obs, "hybrid")[0], axis)
        for _ in range(20):
            state, _, aux = step(state, inputs)
        chi2[axis] = float(aux["chi2"])
    apart = abs(chi2["baseline"] / chi2["none"] - 1)
    print(f"reduced chi-squared after 20 steps: {chi2}, {apart:.1e} apart")
    assert abs(chi2["baseline"] - chi2["none"]) <= 1e-13 * chi2["none"]  # measured 7.8e-16


def test_gauss_newton_product_on_three_devices_equals_one_devices(obs):
    """The polish's Gauss-Newton product (``joint.gauss_newton`` over the route's predict, as
    ``routes.Route.curvature_fn`` gives it) through the baseline axis's shard_map: equal to the
    single-device product, leaf by leaf, in the spread order with ghosts and sky padding."""
    model, _, _ = _reference(obs, "hybrid")
    route = routes.route("baseline")
    sharded = baseline_axis.shard_model(model, baseline_axis.make_mesh(3))
    leaves, treedef = jax.tree_util.tree_flatten(model.params)
    keys = jax.random.split(jax.random.key(5), len(leaves))
    tangent = treedef.unflatten(
        [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
    )
    want = jax.jit(partial(joint.gauss_newton, spec=model.spec))(
        model.params, tangent, (model.constants, model.data)
    )
    # Placed as the parameters are: the model with the tangent for its parameters.
    mesh = sharded.spec.mesh
    placed_tangent = baseline_axis.shard_model(dataclasses.replace(model, params=tangent), mesh)
    got = jax.jit(partial(route.gauss_newton, spec=sharded.spec))(
        sharded.params, placed_tangent.params, (sharded.constants, sharded.data)
    )
    got = baseline_axis.unpad_params(got, sharded.spec)
    assert sharded.plan.n_ghost > 0 and sharded.spec.order is not None
    worst = max(_relative(g, w) for g, w in zip(*map(jax.tree.leaves, (got, want)), strict=True))
    print(f"Gauss-Newton product on 3 devices: {worst:.1e} of the largest entry apart")
    assert worst <= 5e-14  # float64, measured 3.2e-16
