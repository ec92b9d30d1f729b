"""ri_kernels seams inside shard_map on four (virtual) devices equal one device.

Baselines are owned in contiguous blocks of B = ceil(n_bl / 4) rows, so the devices hold
uneven real counts; every device is padded to B rows with pairs against a ghost antenna that
carries zero signal, builds its own index set, and the sets are stacked on a leading device
axis that the map splits. Padded rows are dropped after the map.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from ri_kernels import (
    AnalyticTables,
    QuadratureTables,
    analytic_eval_with_indices,
    fine_offsets,
    lagrange_stencils,
    make_indices,
    monomial_stencils,
    quadrature_eval_with_indices,
    stack_indices,
)

N_DEV = 4
N_ANT = 6
A1, A2 = np.triu_indices(N_ANT)  # 21 baselines with autocorrelations: 6, 6, 6 and 3 per device
GHOST = N_ANT  # one ghost antenna, appended after the real ones
N_FREQ, N_TIME, N_RFI = 2, 5, 2
INT_TIME, CHAN_WIDTH = 2.0, 0.25


def _device_lists():
    """Each device's (a1, a2) padded to B rows, and the positions of its real rows."""
    rows_per_device = math.ceil(A1.size / N_DEV)
    lists, real = [], []
    for d in range(N_DEV):
        rows = np.arange(d * rows_per_device, min((d + 1) * rows_per_device, A1.size))
        n_pad = rows_per_device - rows.size
        a1 = np.concatenate([A1[rows], np.arange(n_pad)])  # (j, ghost) pairs are fresh
        a2 = np.concatenate([A2[rows], np.full(n_pad, GHOST)])
        lists.append((a1, a2))
        real.append(np.arange(rows.size))
    return lists, real


def _signal():
    rng = np.random.default_rng(7)
    shape = (N_ANT, N_RFI, N_FREQ, N_TIME)
    amp = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    phase = rng.uniform(0, 2 * np.pi, shape).astype(np.float32)
    delay = np.stack(
        [
            rng.uniform(-20, 20, (*shape[:2], N_TIME)),
            0.02 * rng.normal(size=(*shape[:2], N_TIME)),
        ],
        axis=-1,
    ).astype(np.float32)
    return amp, phase, delay


def _tables(name):
    """The seam's (tables, freq_mhz), float32."""
    dnu = fine_offsets(CHAN_WIDTH, 2)
    w_freq, start_freq = lagrange_stencils(N_FREQ, dnu / CHAN_WIDTH, 2)
    freq = 1000.0 + CHAN_WIDTH * np.arange(N_FREQ)
    if name == "quadrature":
        dt = fine_offsets(INT_TIME, 4)
        w_time, start_time = lagrange_stencils(N_TIME, dt / INT_TIME, 3)
        tables = QuadratureTables(w_freq, start_freq, w_time, start_time, dnu, dt)
    else:
        g_time, start_time = monomial_stencils(N_TIME, 3)
        tables = AnalyticTables(w_freq, start_freq, g_time, start_time, dnu, INT_TIME)
    return jax.tree.map(
        lambda x: x.astype(np.float32) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x,
        (tables, freq),
    )


SEAMS = {"quadrature": quadrature_eval_with_indices, "analytic": analytic_eval_with_indices}


def _with_ghost(x):
    return jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])


@pytest.mark.parametrize("name", ["quadrature", "analytic"])
def test_sharded_seams_with_ghost_padding_equal_one_device(name):
    assert jax.device_count() >= N_DEV, (
        f"needs {N_DEV} devices (XLA_FLAGS=--xla_force_host_platform_device_count={N_DEV}); "
        f"got {jax.devices()}"
    )
    mesh = Mesh(np.array(jax.devices()[:N_DEV]), ("bl",))
    seam, tables = SEAMS[name], _tables(name)
    lists, real = _device_lists()
    stacked = stack_indices([make_indices(N_ANT + 1, a1, a2) for a1, a2 in lists])
    whole = make_indices(N_ANT, A1, A2)
    cotangent = np.random.default_rng(3).normal(size=(A1.size, N_FREQ, N_TIME)) * (1 + 2j)

    def per_device(indices, amp, phase, delay):
        local = jax.tree.map(lambda x: x[0], indices)
        return seam(local, amp, phase, delay, *tables)[None]

    sharded_map = jax.shard_map(
        per_device, mesh=mesh, in_specs=(P("bl"), P(), P(), P()), out_specs=P("bl")
    )

    def sharded(amp, phase, delay):
        blocks = sharded_map(stacked, _with_ghost(amp), _with_ghost(phase), _with_ghost(delay))
        return jnp.concatenate([blocks[d, rows] for d, rows in enumerate(real)]), blocks

    def single(amp, phase, delay):
        return seam(whole, amp, phase, delay, *tables), None

    argnums = (0, 1, 2) if name == "quadrature" else (0,)  # what each operator differentiates

    def value_and_grad(fn):
        def loss(amp, phase, delay):
            vis, blocks = fn(amp, phase, delay)
            return jnp.sum((cotangent * vis).real), (vis, blocks)

        return jax.jit(jax.value_and_grad(loss, argnums=argnums, has_aux=True))

    signal = _signal()
    (_, (vis_sharded, blocks)), grads_sharded = value_and_grad(sharded)(*signal)
    (_, (vis_single, _)), grads_single = value_and_grad(single)(*signal)
    # The map really ran on four devices, one block of rows on each.
    assert len(blocks.sharding.device_set) == N_DEV
    assert {s.data.shape for s in blocks.addressable_shards} == {(1, 6, N_FREQ, N_TIME)}
    np.testing.assert_allclose(
        vis_sharded, vis_single, rtol=0, atol=1e-5 * np.abs(vis_single).max()
    )
    for g_sharded, g_single in zip(grads_sharded, grads_single, strict=True):
        np.testing.assert_allclose(g_sharded, g_single, rtol=0, atol=1e-5 * np.abs(g_single).max())
