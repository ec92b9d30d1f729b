"""Backends: float64 work placed where it can run, double precision refused where it cannot,
and every matrix product of the fit at full float32 precision on any backend.

A TPU has no float64: XLA's TPU compiler aborts the process (no Python error) on the
simulator's float64 to complex128 conversion, and a float32 matrix product there runs by
default in bfloat16 passes (about three digits), as GPUs run it in TF32. These tests run on the
CPU: they check the choices the code makes for such a backend, and the programs it builds.
"""

import jax
import pytest

from tabascal import fitting, parallel
from tabascal.config import ConfigError
from tabascal.fitting import job, optimiser, phases, run_config
from tabascal.model import joint
from tabascal.parallel import backends
from tabascal.store import read_observation


def _pretend(monkeypatch, backend):
    """jax reports ``backend`` as the default; its devices are tagged by the backend asked."""
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    monkeypatch.setattr(jax, "devices", lambda name=None: [f"{name or backend} device 0"])


@pytest.mark.parametrize(("backend", "device"), [("tpu", "cpu"), ("gpu", "gpu"), ("cpu", "cpu")])
def test_float64_work_goes_to_the_host_only_where_the_backend_has_no_float64(
    monkeypatch, backend, device
):
    _pretend(monkeypatch, backend)
    assert backends.float64_device() == f"{device} device 0"


def test_a_double_precision_fit_is_refused_on_a_tpu_before_any_work(
    small_store, tmp_path, monkeypatch
):
    config = run_config.load({"precision": "double"})
    obs = read_observation(small_store)
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ConfigError, match=r"precision: double needs float64.*tpu.*single"):
        job.run(obs, tmp_path / "out", config, progress=False)
    assert not (tmp_path / "out").exists()
    assert not jax.config.jax_enable_x64
    backends.check_precision("single")  # single precision runs there


def _dot_precisions(jaxpr) -> list:
    """The precision of every dot_general in ``jaxpr`` and the programs nested in it."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for value in eqn.params.values():
            for inner in value if isinstance(value, (list, tuple)) else [value]:
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    found.extend(_dot_precisions(inner))
    return found


@pytest.mark.parametrize(
    "model_config",
    [
        {"orbits": {"fit": "ric"}},  # hybrid RFI, per-antenna signal, orbit corrections
        {"rfi": {"quadrature_limit": 0, "signal": "shared"}},  # analytic, shared signal
        {"fit": {"polish": "trust-region"}},  # Hessian-vector products
        {"fit": {"polish": "trust-region", "polish_curvature": "gauss-newton"}},
    ],
    ids=["hybrid-orbits", "analytic-shared", "trust-region", "trust-region-gauss-newton"],
)
def test_every_matrix_product_of_the_fit_asks_for_full_precision(rising_store, model_config):
    """On a TPU (bfloat16 passes) or a GPU (TF32) a product at the default precision keeps
    about three digits: a phase of many turns, or a sum over many modes, would lose the RFI's
    fit. Both of the optimiser's programs (the gradient phases' step and the polish's, with
    its Hessian- or Gauss-Newton-vector products) hold only HIGHEST products."""
    config = run_config.load(model_config)
    model = joint.build(
        read_observation(rising_store), run_config.model_config(config), init="prior"
    )
    inputs = (model.constants, model.data)
    fit = run_config.fit_config(config)
    optimizer = optimiser.make_optimizer(fit)
    step = fitting.route_step(parallel.route("none"), model.spec, fit, optimizer)
    state = optimiser.init_state(model.params, optimizer)
    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    for phase in (state, phases.polish_form(state, optimizer)):
        precisions = _dot_precisions(jax.make_jaxpr(step.jitted)(phase, inputs).jaxpr)
        assert len(precisions) > 10, "too few matrix products: the walk missed the programs"
        low = [p for p in precisions if p != highest]
        assert not low, f"{len(low)} of {len(precisions)} products at {set(map(str, low))}"
