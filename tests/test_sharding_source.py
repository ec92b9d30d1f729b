"""The source-sharded model (the comparison route) equals the single-device model.

The demo sky has 2 satellites, so 3 and 4 devices pad the sources with dark ones (zero signal)
while 2 devices divide them evenly.
"""

import jax
import numpy as np
import pytest
from conftest import single_device_reference
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.parallel import source_axis

N_DEVICES = 4
CONFIG = {
    "precision": "double",
    "rfi": {"quadrature_limit": 8, "max_groups": 2, "segments": 1, "terms": 3, "cubic_terms": 1},
    "sky": {"fov_radius_deg": 60.0},
}
# A field of 60 degrees: the sky's baselines then keep 1 x 1 to 3 x 11 modes, in three groups
# with their own boxes (28 baselines: 12, 10, 6), so every placement here has the sky's groups
# and their padding slots; with the dish's field every baseline keeps 1 x 1 (one group).


@pytest.fixture(scope="module", autouse=True)
def _float64(double_precision):
    """Every test here runs in float64 unless it says otherwise."""


@pytest.fixture(scope="module")
def reference(small_store, double_precision):
    """(model, loss, gradient) of the single-device hybrid model."""
    return single_device_reference(small_store, CONFIG)


def _relative(a, b) -> float:
    # Relative to the largest cell, not per cell: a gradient cell is a sum whose terms cancel
    # (cells go down to a few 1e-6 of the largest here), so its rounding scales with the
    # largest terms.
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("n_dev", [2, 3, 4])
def test_source_sharded_loss_and_gradient_equal_single_device(reference, n_dev):
    model, ref_value, ref_grad = reference
    sharded = source_axis.shard_model(model, source_axis.make_mesh(n_dev))
    spec = sharded.spec
    loss = jax.jit(jax.value_and_grad(lambda p, i: source_axis.loss(p, i, spec)[0]))
    value, grad = loss(sharded.params, (sharded.constants, sharded.data))

    n_src = model.spec.n_src
    dark = np.asarray(grad.rfi.z)[:, n_src:]
    assert not np.any(dark), "dark sources must get no gradient"
    grad = source_axis.unpad_params(grad, spec)
    worst = max(
        _relative(g, w)
        for g, w in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad), strict=True)
    )
    print(f"source axis on {n_dev}: loss {abs(float(value) / ref_value - 1):.1e}, grad {worst:.1e}")
    # float64, 2 to 4 devices: loss measured 0 (equal), gradient 2.2e-16 (gains; per cell it
    # would read 9.4e-14, sky).
    assert abs(float(value) - ref_value) <= 1e-15 * abs(ref_value)
    assert worst <= 3e-14

    # The sharded route ran: the RFI parameters are split by source, n_src / n_dev a device.
    z = sharded.params.rfi.z
    assert spec.n_src_padded == -(-n_src // n_dev) * n_dev and z.shape[1] == spec.n_src_padded
    assert z.sharding.is_equivalent_to(NamedSharding(spec.mesh, P(None, "src")), z.ndim)
    shards = z.addressable_shards
    assert len({s.device for s in shards}) == n_dev
    assert all(s.data.shape[1] == spec.n_src_padded // n_dev for s in shards)
    if n_dev > n_src:
        assert spec.n_src_padded > n_src
