"""The baseline-sharded model built block by block from the store (``blockwise.build``)
equals the one placed from a whole model (``baseline_axis.shard_model(joint.build(...))``), array by
array and in loss and gradient, on 1 to 4 virtual CPU devices, with and without the
antenna-reuse plan; and each device's rows were the only ones read for it."""

from functools import partial

import jax
import numpy as np
import pytest

from tabascal.fitting import run_config
from tabascal.model import joint
from tabascal.parallel import baseline_axis, blockwise, row_placement
from tabascal.store import read_meta, read_observation

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
def store(small_store, double_precision):
    return small_store


class CountingRows(blockwise.StoreRows):
    """StoreRows that records which rows each call asked for."""

    def __init__(self, path):
        super().__init__(path, read_meta(path))
        object.__setattr__(self, "calls", [])

    def read(self, rows):
        self.calls.append(np.asarray(rows).copy())
        return super().read(rows)


@partial(jax.jit, static_argnames="spec")
def _loss_and_grad(params, constants, data, spec):
    """The loss and its gradient, compiled once a spec: the block build and the placed whole
    model have equal specs (the test asserts it), so the second runs the first's program."""
    return jax.value_and_grad(lambda p: baseline_axis.loss(p, (constants, data), spec)[0])(params)


def _host(x):
    return np.asarray(x) if x is not None else None


def _per_cell(a, b) -> float:
    """The largest |a - b| / |b| over the cells (0 where both are 0), for the printed figures."""
    a, b = np.asarray(a), np.asarray(b)
    d = np.abs(a - b)
    return float(np.max(np.where(d == 0, 0.0, d / np.where(b == 0, 1e-300, np.abs(b)))))


# 28 rows: 3 devices pad (B = 10, 2 padded rows), 4 divide evenly; both orders permute. With 3
# blocks of rows per device on 2 devices, 6 blocks of 5 rows: 15 per device, not the 14 of the
# first read.
@pytest.mark.parametrize(
    "n_dev, reuse, init, row_blocks",
    [(1, False, "data", 1), (3, False, "prior", 1), (4, True, "data", 1), (2, False, "data", 3)],
)
def test_block_build_equals_the_placed_whole_model(store, n_dev, reuse, init, row_blocks):
    config = run_config.model_config(run_config.load(CONFIG))
    mesh = baseline_axis.make_mesh(n_dev)
    whole = baseline_axis.shard_model(joint.build(read_observation(store), config, init=init), mesh,
                                      reuse=reuse, row_blocks=row_blocks)  # fmt: skip
    source = CountingRows(store)
    blocks = blockwise.build(source, config, mesh, init=init, reuse=reuse, row_blocks=row_blocks)

    # Each device's rows were read for it alone: its ownership block, then, in the placement's
    # order, its rows (the reuse plan's, or the sky and RFI groups spread, row_blocks blocks of
    # B), never the whole observation in one call.
    B, n_bl = whole.spec.device_rows, whole.spec.model.n_bl
    first = -(-n_bl // n_dev)
    expected = [np.arange(d * first, min((d + 1) * first, n_bl)) for d in range(n_dev)]
    if n_dev > 1:
        order = np.asarray(whole.spec.order)
        if reuse:
            np.testing.assert_array_equal(order, whole.spec.reuse.order)
        expected += [order[d * B : min((d + 1) * B, n_bl)] for d in range(n_dev)]
        assert not np.array_equal(order, np.arange(n_bl))
    expected = [rows for rows in expected if rows.size]
    assert len(source.calls) == len(expected)
    for got, want in zip(source.calls, expected, strict=True):
        np.testing.assert_array_equal(got, want)

    assert blocks.spec == whole.spec
    assert blocks.data.vis.sharding.spec == baseline_axis.P(row_placement.AXIS)
    assert {s.data.shape[0] for s in blocks.data.vis.addressable_shards} == {B}
    for name in ("vis", "flags", "noise", "n_points"):
        np.testing.assert_array_equal(_host(getattr(blocks.data, name)),
                                      _host(getattr(whole.data, name)), err_msg=name)  # fmt: skip
    sky_b, sky_w = blocks.constants.sky, whole.constants.sky
    assert len(sky_b.groups) == len(sky_w.groups) > 1  # several boxes, placed in slots alike
    pairs = [("scale", sky_b.scale, sky_w.scale)]
    for g, (group_b, group_w) in enumerate(zip(sky_b.groups, sky_w.groups, strict=True)):
        np.testing.assert_array_equal(_host(group_b.rows), _host(group_w.rows))
        for name in ("weight_freq", "weight_time", "dft_freq", "dft_time"):
            pairs.append((f"groups[{g}].{name}", getattr(group_b, name), getattr(group_w, name)))
    for name, got, want in pairs:
        print(f"sky {name}: {_per_cell(_host(got), _host(want)):.1e} apart per cell")
        # Measured 1.6e-16 at most (scale, on 1 and 4 devices; the groups' arrays equal).
        np.testing.assert_allclose(_host(got), _host(want), rtol=2e-14, err_msg=name)
    # Sky means agree on the real rows (the first n_bl, in either order); padded rows are 0
    # here and a copy of row 0 there. Measured equal, as are the parameters, in every case
    # (both are 0 where the reference is, so no atol).
    mean_b = np.asarray(blocks.constants.sky.mean)[:n_bl]
    mean_w = np.asarray(whole.constants.sky.mean)[:n_bl]
    print(f"sky mean: {_per_cell(mean_b, mean_w):.1e} apart per cell")
    np.testing.assert_allclose(mean_b, mean_w, rtol=1e-15, atol=0)
    for a, b in zip(jax.tree.leaves(blocks.params), jax.tree.leaves(whole.params), strict=True):
        print(f"parameters {np.shape(b)}: {_per_cell(a, b):.1e} apart per cell")
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-15, atol=0)

    value_b, grad_b = _loss_and_grad(blocks.params, blocks.constants, blocks.data, blocks.spec)
    value_w, grad_w = _loss_and_grad(whole.params, whole.constants, whole.data, whole.spec)
    print(f"loss: {abs(float(value_b) / float(value_w) - 1):.1e} apart")
    assert abs(float(value_b) - float(value_w)) <= 1e-15 * abs(float(value_w))  # measured 0
    # Relative to each leaf's largest cell, not per cell: a gradient cell is a sum whose terms
    # cancel (the sky's go down to 1e-17 against 8), so its rounding scales with the largest.
    # A leaf that is zero to rounding (below 1e-12 of the whole gradient's largest cell) is held
    # to that largest cell instead: at the data start the sky's constant modes, which its mean
    # already fits, are 7e-15 at most, and as far apart, against 6.7e2 (1.2e-17 of it).
    largest = max(float(np.max(np.abs(np.asarray(b)))) for b in jax.tree.leaves(grad_w))
    for a, b in zip(jax.tree.leaves(grad_b), jax.tree.leaves(grad_w), strict=True):
        scale = float(np.max(np.abs(np.asarray(b))))
        scale = scale if scale > 1e-12 * largest else largest
        error = float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) / scale
        print(f"gradient {np.shape(b)}: {error:.1e} of its largest cell apart")
        # Measured 2.2e-16 at most (sky, on 1 and 4 devices; 0 for the rest).
        assert float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) <= 3e-14 * scale


def test_truth_init_is_refused_before_anything_is_read(store):
    config = run_config.model_config(run_config.load(CONFIG))
    source = CountingRows(store)
    with pytest.raises(ValueError, match="init 'truth'"):
        blockwise.build(source, config, baseline_axis.make_mesh(2), init="truth")
    assert source.calls == []
