"""The shared RFI signal (one per satellite, through each antenna's known factor) on every
sharded route equals the single-device model, in float64: the baseline axis gathers each
device's antennas of the factor (not of the modes, which have no antenna axis), the source
axis pads the factor with dark sources."""

import jax
import numpy as np
import pytest

from tabascal.fitting import run_config, satellites
from tabascal.model import joint, rfi_signal
from tabascal.parallel import routes, row_placement
from tabascal.store import read_observation

N_DEVICES = 4
CONFIG = {
    "precision": "double",
    "rfi": {"signal": "shared", "quadrature_limit": 8, "max_groups": 2, "terms": 3},
}


@pytest.fixture(scope="module", autouse=True)
def _float64(double_precision):
    """Every test here runs in float64."""


@pytest.fixture(scope="module")
def reference(small_store):
    """(model, loss, gradient) of the single-device model with the shared signal."""
    obs = read_observation(small_store)
    model = joint.build(obs, run_config.model_config(run_config.load(CONFIG)), init="prior")
    assert model.params.rfi.z.shape[0] == 1, "the shared signal has no antenna axis"
    assert model.constants.rfi_signal.factor.shape[0] == model.spec.n_ant
    inputs = (model.constants, model.data)
    value, grad = jax.jit(jax.value_and_grad(lambda p: joint.loss(p, inputs, model.spec)[0]))(
        model.params
    )
    return model, float(value), jax.tree.map(np.asarray, grad)


def _relative(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("name", ["baseline", "reuse", "source"])
def test_shared_signal_loss_and_gradient_equal_single_device_on_every_route(reference, name):
    model, ref_value, ref_grad = reference
    route = routes.route(name)
    placed = route.place(model, route.make_mesh(N_DEVICES))
    assert len(routes.devices(placed.spec)) == N_DEVICES  # the sharded path ran
    inputs = (placed.constants, placed.data)
    value, grad = jax.jit(jax.value_and_grad(lambda p, i: route.loss(p, i, placed.spec)[0]))(
        placed.params, inputs
    )
    # The shared signal's modes (replicated, or split by source) and the gains' (replicated).
    grad_z = np.asarray(grad.rfi.z)[:, : model.spec.n_src]
    worst = {
        "rfi": _relative(grad_z, ref_grad.rfi.z),
        "log_amp": _relative(grad.gains.log_amp, ref_grad.gains.log_amp),
        "phase": _relative(grad.gains.phase, ref_grad.gains.phase),
    }
    print(f"{name}: loss {abs(float(value) / ref_value - 1):.1e} apart, gradients {worst}")
    # Measured: loss 2.2e-16 apart, gradients at most 4.9e-16 (float64 sums in another order).
    assert float(value) == pytest.approx(ref_value, rel=2e-14)
    assert max(worst.values()) < 5e-14, worst


def test_signal_rms_with_the_factor_per_device_equals_every_antennas(reference):
    """The reuse plan places the factor per device, each device holding its compact antennas
    (some antennas on several devices, ghosts with zero factor); ``satellites.signal_rms``
    weighs each antenna by one over its holders, so it equals the rms over every antenna of
    the single-device signal, computed here in numpy."""
    model, _, _ = reference
    route = routes.route("reuse")
    placed = route.place(model, route.make_mesh(N_DEVICES))
    assert len(routes.devices(placed.spec)) == N_DEVICES  # the sharded path ran
    assert row_placement.factor_per_device(placed.constants.rfi_signal)
    assert placed.constants.rfi_signal.factor.shape[:2] == (N_DEVICES, placed.plan.n_ant_total)
    weights = row_placement.antenna_weights(placed.spec)
    ids = np.asarray(placed.spec.antenna_ids)
    held = [weights[ids == a].sum() for a in range(model.spec.n_ant)]
    np.testing.assert_allclose(held, 1.0, rtol=1e-15)
    assert not np.any(weights[ids >= model.spec.n_ant])
    assert len(set(ids[ids < model.spec.n_ant].tolist())) == model.spec.n_ant

    amp = np.asarray(rfi_signal.forward(model.params.rfi, model.constants.rfi_signal))
    want = np.sqrt(np.mean(np.abs(amp) ** 2, axis=(0, 2)))
    got = satellites.signal_rms(placed, placed.params, model.spec.n_src)
    print(f"signal rms {np.max(np.abs(got / want - 1)):.1e} apart")
    # Measured: 3.3e-16 apart (float64).
    np.testing.assert_allclose(got, want, rtol=5e-14)
