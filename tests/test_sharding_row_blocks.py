"""The baseline axis with its rows in blocks taken in turn (``sharding.row_blocks``) equals one
device's model, on 1 to 3 virtual CPU devices.

With row_blocks k on n devices the rows are planned as for k n devices (each block holding its
share of every RFI and sky group, padded alike), every device holds k blocks, and the loss sums
the likelihood block by block (``baseline_axis.blocked_nll``): a ``lax.map`` over the device's
blocks of a rematerialised block. Its value, gradient and Hessian-vector products must equal
one device's, and its derivatives must hold fewer visibility-shaped temporaries than one block
per device does. So must the Gauss-Newton product (``blocked_gauss_newton``), the export's
blocks (``predict_block``, ``rows_block``) and the sky's data start (``sky_mean_from_data``).
"""

import dataclasses
import functools
from functools import partial
from typing import NamedTuple

import jax
import numpy as np
import pytest
from conftest import HYBRID_DOUBLE
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.fitting import run_config
from tabascal.model import joint
from tabascal.parallel import baseline_axis, routes
from tabascal.store import read_observation

# The hybrid route of test_sharding_baseline (quadrature t1 and an analytic group), cheap to
# compile, with the sky's three groups (a field of 60 degrees).
CONFIG = {**HYBRID_DOUBLE, "sky": {"fov_radius_deg": 60.0}}
# (devices, blocks per device): 28 baselines in 3 blocks of 10 (two padded rows), in 2 x 2 of
# 7, and in 3 x 2 of 5 (two padded rows); every case pads some sky group's slots.
CASES = [(1, 3), (2, 2), (3, 2)]


@pytest.fixture(scope="module", autouse=True)
def _float64(double_precision):
    """Every test here runs in float64."""


class Reference(NamedTuple):
    """One device's model and what the blocked programs must equal, computed once for the
    module: the loss, its gradient and the Hessian-vector product along ``_tangent``; the sky,
    RFI and model cubes; the Gauss-Newton product along ``_tangent``; the sky's data start."""

    model: joint.Model
    loss: float
    grad: object
    hvp: object
    predicted: object
    gauss_newton: object
    sky_start: np.ndarray


@pytest.fixture(scope="module")
def reference(small_store, double_precision):
    from tabascal.model import sky

    obs = read_observation(small_store)
    model = joint.build(obs, run_config.model_config(run_config.load(CONFIG)), init="prior")
    inputs = (model.constants, model.data)

    def value(p):
        return joint.loss(p, inputs, model.spec)[0]

    tangent = _tangent(model.params)
    loss, grad = jax.jit(jax.value_and_grad(value))(model.params)
    hvp = jax.jit(lambda p, v: jax.jvp(jax.grad(value), (p,), (v,))[1])(model.params, tangent)
    predicted = jax.jit(partial(joint.predict, spec=model.spec))(model.params, model.constants)
    product = jax.jit(partial(joint.gauss_newton, spec=model.spec))(model.params, tangent, inputs)
    rfi = joint.predict_rfi(model.params.rfi, model.constants, model.spec)
    sky_start = np.asarray(sky.mean_from_data(model.data.vis - rfi, model.data.flags))
    host = (jax.tree.map(np.asarray, t) for t in (grad, hvp, predicted, product))
    return Reference(model, float(loss), *host, sky_start)


@pytest.fixture(scope="module")
def placed(reference):
    """``place(n_dev, row_blocks)``: the model placed by the baseline route with
    ``row_blocks``, its phase moments kept, and ``_tangent`` placed as its parameters are;
    placed once a case for all the module's tests."""
    route = routes.route("baseline")
    along = dataclasses.replace(reference.model, params=_tangent(reference.model.params))

    @functools.cache
    def place(n_dev, row_blocks):
        sharded = route.place(reference.model, route.make_mesh(n_dev), row_blocks=row_blocks)
        mesh = sharded.spec.mesh
        tangent = baseline_axis.shard_model(along, mesh, row_blocks=row_blocks).params
        return sharded, tangent

    return place


def _tangent(params):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    return treedef.unflatten(
        [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
    )


def _relative(a, b) -> float:
    # Relative to the largest cell (as test_sharding_baseline: the cells are sums that cancel).
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _worst(got, want) -> float:
    pairs = zip(*map(jax.tree.leaves, (got, want)), strict=True)
    return max(_relative(g, w) for g, w in pairs)


@pytest.mark.parametrize(
    ("n_dev", "row_blocks"), CASES, ids=[f"{n}dev-{k}blocks" for n, k in CASES]
)
def test_blocked_loss_gradient_and_hvp_equal_one_device(reference, placed, n_dev, row_blocks):
    model, ref_loss, ref_grad, ref_hvp = reference[:4]
    sharded, tangent = placed(n_dev, row_blocks)
    spec = sharded.spec
    inputs = (sharded.constants, sharded.data)

    def value(p):
        return baseline_axis.loss(p, inputs, spec)[0]

    loss, grad = jax.jit(jax.value_and_grad(value))(sharded.params)
    hvp = jax.jit(lambda p, v: jax.jvp(jax.grad(value), (p,), (v,))[1])(sharded.params, tangent)
    grad, hvp = (baseline_axis.unpad_params(t, spec) for t in (grad, hvp))
    apart = (abs(float(loss) / ref_loss - 1), _worst(grad, ref_grad), _worst(hvp, ref_hvp))
    print(f"{n_dev} devices x {row_blocks} blocks: loss, gradient, hvp {apart}")
    assert apart[0] <= 2e-13
    assert apart[1] <= 5e-14
    assert apart[2] <= 5e-14

    # The blocks ran: k blocks of B rows per device, the loss a map over them.
    n_bl = model.spec.n_bl
    assert spec.row_blocks == row_blocks and spec.n_blocks == n_dev * row_blocks
    assert spec.block_size == -(-n_bl // (n_dev * row_blocks))
    # The analytic group's phase moments kept, row_blocks blocks on each device, and the
    # report's size per device what one device holds.
    ((_, report),) = sharded.info["rfi_phase_cache"]["groups"].items()
    moments = next(t.moments for t in sharded.constants.groups if t.moments is not None)
    assert report["kept"] and moments.shape[0] == spec.n_blocks
    held = moments.addressable_shards[0].data
    assert held.shape[0] == row_blocks
    assert report["mib_per_device"] == pytest.approx(held.nbytes / 2**20, rel=1e-12)
    rfi = jax.jit(partial(baseline_axis.predict_rfi, spec=spec))(sharded.params.rfi, inputs[0])
    assert rfi.sharding.is_equivalent_to(NamedSharding(spec.mesh, P("bl")), rfi.ndim)
    assert all(s.data.shape[0] == row_blocks * spec.block_size for s in rfi.addressable_shards)
    assert len({s.device for s in rfi.addressable_shards}) == n_dev
    jaxpr = str(jax.make_jaxpr(value)(sharded.params))
    assert "checkpoint" in jaxpr or "remat" in jaxpr
    assert f"length={row_blocks}" in jaxpr


@pytest.mark.parametrize(
    ("n_dev", "row_blocks"), CASES, ids=[f"{n}dev-{k}blocks" for n, k in CASES]
)
def test_each_block_of_rows_predicts_its_data_rows_as_one_device_does(
    reference, placed, n_dev, row_blocks
):
    """The export's blocks (``predict_block``, ``rows_block``, ``results.blocks(spec, j)``):
    block j of every device, taken in turn, covers every data row once, with one device's
    sky, RFI and model there and the data's own rows."""
    from tabascal.fitting import results

    model, want = reference.model, reference.predicted
    sharded, _ = placed(n_dev, row_blocks)
    spec = sharded.spec
    predict = jax.jit(partial(baseline_axis.predict_block, spec=spec))
    take = jax.jit(partial(baseline_axis.rows_block, spec=spec))
    seen = np.zeros(model.spec.n_bl, int)
    worst = 0.0
    for j in range(row_blocks):
        got = predict(sharded.params, sharded.constants, j)
        vis = take(sharded.data.vis, j)
        assert got.model.sharding.is_equivalent_to(NamedSharding(spec.mesh, P("bl")), 3)
        assert all(s.data.shape[0] == spec.block_size for s in got.model.addressable_shards)
        for block in results.blocks(spec, j):
            seen[block.rows] += 1
            cut = slice(block.start, block.stop)
            np.testing.assert_array_equal(
                np.asarray(vis)[cut], np.asarray(model.data.vis)[block.rows]
            )
            for name in ("sky", "rfi", "model"):
                a = np.asarray(getattr(got, name))[cut]
                worst = max(worst, _relative(a, np.asarray(getattr(want, name))[block.rows]))
    print(f"{n_dev} devices x {row_blocks} blocks: cubes {worst:.2g} apart")
    assert np.all(seen == 1)
    # measured 0 (1 x 3), 1.6e-16 (2 x 2) and 1.1e-16 (3 x 2) of the largest cell
    assert worst <= 2e-14


@pytest.mark.parametrize(
    ("n_dev", "row_blocks"), CASES, ids=[f"{n}dev-{k}blocks" for n, k in CASES]
)
def test_blocked_gauss_newton_product_equals_one_device(reference, placed, n_dev, row_blocks):
    """The Gauss-Newton polish's product (``fit.polish_curvature: gauss-newton``) with the
    likelihood's part summed block by block (``blocked_gauss_newton``), against
    ``joint.gauss_newton`` on one device, along the same tangent."""
    sharded, placed_tangent = placed(n_dev, row_blocks)
    spec = sharded.spec
    fit = run_config.fit_config(run_config.load({"fit": {"polish_curvature": "gauss-newton"}}))
    product = routes.route("baseline").curvature_fn(fit, spec)
    assert product.func is baseline_axis.blocked_gauss_newton
    got = jax.jit(product)(sharded.params, placed_tangent, (sharded.constants, sharded.data))
    apart = _worst(baseline_axis.unpad_params(got, spec), reference.gauss_newton)
    print(f"{n_dev} devices x {row_blocks} blocks: Gauss-Newton product {apart:.2g} apart")
    assert apart <= 5e-14  # measured 3.6e-16 (1 x 3), 4.5e-16 (2 x 2 and 3 x 2)


@pytest.mark.parametrize(
    ("n_dev", "row_blocks"), CASES, ids=[f"{n}dev-{k}blocks" for n, k in CASES]
)
def test_the_sky_data_start_block_by_block_equals_one_device(reference, placed, n_dev, row_blocks):
    """The sky's data start (each baseline's mean of the data less the initial RFI), formed
    block by block (``sky_mean_from_data``), as on one device."""
    sharded, _ = placed(n_dev, row_blocks)
    spec, data = sharded.spec, sharded.data
    got = jax.jit(partial(baseline_axis.sky_mean_from_data, spec=spec))(
        sharded.params.rfi, None, sharded.constants, data.vis, data.flags
    )
    assert got.shape == (spec.n_rows,)
    apart = _relative(baseline_axis.data_order(got, spec), reference.sky_start)
    print(f"{n_dev} devices x {row_blocks} blocks: sky start {apart:.2g} apart")
    assert apart <= 3e-14  # measured 2.9e-16 in every case
    jaxpr = str(jax.make_jaxpr(partial(baseline_axis.sky_mean_from_data, spec=spec))(
        sharded.params.rfi, None, sharded.constants, data.vis, data.flags
    ))  # fmt: skip
    assert f"length={row_blocks}" in jaxpr  # the blocks in turn
