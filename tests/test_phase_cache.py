"""Phase moments kept across steps (``rfi.phase_cache``) against formed at every evaluation:
the same loss and gradient, on one device and on the baseline axis over 4 virtual CPU devices.

The small store's 28 baselines in one analytic group (quadrature_limit 0), float64. Each case
proves the kept moments were used: the placed group holds them (on the baseline axis split
over the devices, one block per device), and the route's report says so. With
``rfi.channel_terms`` the group's moments are kept at its channels' centres, and the cases
prove that too (the report's "at", the moments' one point per channel).
"""

import functools

import jax
import numpy as np
import pytest
from conftest import host_memory_bytes
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.fitting import run_config
from tabascal.model import joint
from tabascal.parallel import routes
from tabascal.store import read_observation

N_DEVICES = 4
CHEAP = {"max_groups": 1, "segments": 1, "terms": 3, "cubic_terms": 1, "sampling": "midpoint"}


@pytest.fixture(scope="module", autouse=True)
def _float64(double_precision):
    """Every test here runs in float64."""


@pytest.fixture(scope="module")
def obs(small_store, double_precision):
    return read_observation(small_store)


@pytest.fixture(scope="module")
def evaluated(obs):
    """``evaluated(name, cache, n_dev, channel_terms)``: (route, placed model, loss, gradient
    leaves) with ``rfi.phase_cache`` ``cache`` on route ``name``, placed and evaluated once
    for all the module's tests."""

    @functools.cache
    def evaluate(name, cache, n_dev, channel_terms):
        route, placed = _placed(obs, name, cache, n_dev, channel_terms=channel_terms)
        return route, placed, *_value_and_grad(route, placed)

    return evaluate


def _model(obs, **rfi):
    config = {"precision": "double", "rfi": {"quadrature_limit": 0, **CHEAP, **rfi}}
    return joint.build(obs, run_config.model_config(run_config.load(config)), init="prior")


def _value_and_grad(route, placed):
    inputs = (placed.constants, placed.data)

    def loss(params):
        return route.loss(params, inputs, placed.spec)[0]

    value, grad = jax.jit(jax.value_and_grad(loss))(placed.params)
    return float(value), [np.asarray(g) for g in jax.tree.leaves(grad)]


def _placed(obs, name, cache, n_dev=None, **rfi):
    route = routes.route(name)
    mesh = route.make_mesh(n_dev)
    return route, route.place(_model(obs, phase_cache=cache, **rfi), mesh)


def _worst(a, b) -> float:
    return max(float(np.max(np.abs(x - y)) / np.max(np.abs(y))) for x, y in zip(a, b, strict=True))


# (route, devices, rfi.channel_terms): with channel terms the group's moments are kept at its
# channels' centres and each fine channel's made from them at every step, as where formed.
KEPT_CASES = [
    ("none", None, 0),
    ("baseline", N_DEVICES, 0),
    ("none", None, 4),
    ("baseline", N_DEVICES, 4),
]


@pytest.mark.parametrize(("name", "n_dev", "channel_terms"), KEPT_CASES)
def test_kept_moments_give_the_loss_and_gradient_of_formed_ones(
    evaluated, name, n_dev, channel_terms
):
    _, kept, value_k, grad_k = evaluated(name, "always", n_dev, channel_terms)
    _, formed, value_f, grad_f = evaluated(name, "never", n_dev, channel_terms)
    ((group, report),) = kept.info["rfi_phase_cache"]["groups"].items()
    assert group.startswith("analytic") and report["kept"] and report["mib_per_device"] > 0
    assert not formed.info["rfi_phase_cache"]["groups"][group]["kept"]
    moments = kept.constants.groups[0].moments
    assert formed.constants.groups[0].moments is None
    options = kept.info["rfi_analytic_options"][group]
    print(group, options, report)
    if channel_terms:  # the series ran: terms taken, the moments at one point per channel
        assert options["channel_terms"] > 0 and report["at"] == "centres"
        fine_channels = getattr(kept.spec, "model", kept.spec).groups[0].n_freq_samples
        assert moments.shape[-1] == 1 and fine_channels > 1
    else:  # kept at every fine channel: what is kept is the whole of the moments
        assert options["channel_terms"] == 0 and report["at"] == "channels"
        assert report["kept_mib_per_device"] == report["mib_per_device"]
    if name == "baseline":  # split over the devices, one block of rows each
        assert moments.shape[0] == N_DEVICES
        assert moments.sharding.is_equivalent_to(NamedSharding(kept.spec.mesh, P("bl")), 7)
        assert len({s.device for s in moments.addressable_shards}) == N_DEVICES
        # the report's per-device size kept is one device's block
        one_block = moments.addressable_shards[0].data.nbytes / 2**20
        assert report["kept_mib_per_device"] == pytest.approx(one_block, rel=1e-12)
    else:
        assert report["kept_mib_per_device"] == pytest.approx(moments.nbytes / 2**20, rel=1e-12)

    worst = _worst(grad_k, grad_f)
    print(f"{name}: loss {abs(value_k / value_f - 1):.1e} apart, gradient {worst:.1e}")
    # Measured 0 and 0 (the same moments in the same sums); the criterion is 1e-12.
    assert value_k == pytest.approx(value_f, rel=1e-12)
    assert worst <= 1e-12


def test_the_baseline_axis_keeping_moments_equals_one_device(evaluated):
    # The same evaluations as the kept and formed cases without channel terms above.
    _, _, value_s, grad_s = evaluated("baseline", "always", N_DEVICES, 0)
    _, _, value_1, _ = evaluated("none", "never", None, 0)
    print(f"baseline axis kept against one device formed: {abs(value_s / value_1 - 1):.1e}")
    # Measured 3.3e-16 (the devices' partial sums in another order; test_sharding_baseline:
    # 1.1e-15 at most).
    assert value_s == pytest.approx(value_1, rel=2e-13)
    assert all(np.isfinite(g).all() for g in grad_s)


def test_a_budget_below_the_moments_forms_them_at_every_step(obs):
    model = _model(obs, phase_cache="auto", phase_cache_mb=1e-6)
    placed = routes.route("none").place(model, None)
    report = placed.info["rfi_phase_cache"]
    ((group, entry),) = report["groups"].items()
    print(group, entry, report)
    assert entry["mib_per_device"] > 1e-6 and not entry["kept"]
    assert report["kept_mib_per_device"] == 0 and report["mode"] == "auto"
    assert placed.constants.groups[0].moments is None
    # and a budget that holds them keeps them
    roomy = routes.route("none").place(_model(obs, phase_cache="auto", phase_cache_mb=1e3), None)
    assert roomy.info["rfi_phase_cache"]["groups"][group]["kept"]
    assert roomy.constants.groups[0].moments is not None


def test_the_source_axis_forms_them_at_every_step_and_says_so(obs):
    _, placed = _placed(obs, "source", "always", 2)
    ((_, entry),) = placed.info["rfi_phase_cache"]["groups"].items()
    assert not entry["kept"] and all(t.moments is None for t in placed.constants.groups)


def test_by_default_the_budget_is_half_of_each_virtual_devices_share_of_the_host(obs):
    """rfi.phase_cache_mb unset: the budget follows the device's memory, which on CPU is the
    host's shared by the process's virtual devices (read here from /proc/meminfo)."""
    assert len(jax.devices()) == N_DEVICES, "the multi-device tests run on 4 virtual devices"
    host = host_memory_bytes()
    _, placed = _placed(obs, "baseline", "auto", N_DEVICES)
    report = placed.info["rfi_phase_cache"]
    print(report)
    want_mib = 0.5 * host / N_DEVICES / 2**20
    assert report["budget_mib"] == pytest.approx(want_mib, abs=1e-3)
    share_gib = host / N_DEVICES / 2**30
    assert report["budget_from"] == f"phase_cache_fraction 0.5 of {share_gib:.1f} GiB"
    assert all(g["kept"] for g in report["groups"].values())
