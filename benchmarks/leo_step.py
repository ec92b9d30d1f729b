"""Optimisation-step time and RFI-operator accuracy of a LEO-heavy fit, by fine-sample rule.

    python benchmarks/leo_step.py                      # benchmarks/scenarios/speed/leo-8.yaml
    python benchmarks/leo_step.py --scenario FILE.yaml --rounds 5

The scenario (a simulation config over the demo preset) is simulated once into a temporary
store; each variant (a set of ``rfi`` config keys) builds the model from it as ``tabascal run``
does (init ``data``), compiles its step, and the variants then take ``--steps`` steps each in
turn for ``--rounds`` rounds, so that a change of load on a shared machine touches each alike.
Reported per variant: the RFI groups, the median per-step time, where it goes (the value and
gradient of each component alone: RFI, sky, gains), one Hessian-vector product of the whole
loss (the unit of the Newton polish's work), whether the analytic group's phase moments
were kept (``rfi.phase_cache``) and the RFI visibilities' error against a
reference of the same parameters (analytic in time with the conservative
options segments 4, terms 16; Gauss-Legendre in frequency at a 1e-4 tolerance), in float64,
as the largest and rms error over the noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "speed" / "leo-8.yaml"
# "formed": the analytic group's phase moments formed at every step (rfi.phase_cache never), as
# before they could be kept; the others keep them within the default budget (auto).
VARIANTS = {
    "midpoint": {"sampling": "midpoint"},
    "gauss": {"sampling": "gauss"},
    "gauss-formed": {"sampling": "gauss", "phase_cache": "never"},
    "gauss-analytic": {"sampling": "gauss", "quadrature_limit": 0},
    "gauss-analytic-formed": {"sampling": "gauss", "quadrature_limit": 0, "phase_cache": "never"},
    "gauss-limit-4": {"sampling": "gauss", "quadrature_limit": 4},
    "gauss-limit-8": {"sampling": "gauss", "quadrature_limit": 8},
    "gauss-limit-16": {"sampling": "gauss", "quadrature_limit": 16},
    "gauss-freq-stencil-1": {"sampling": "gauss", "freq_stencil": 1},
    "gauss-freq-stencil-3": {"sampling": "gauss", "freq_stencil": 3},
    "gauss-stencils-7-3": {"sampling": "gauss", "time_stencil": 7, "freq_stencil": 3},
}
REFERENCE = {"sampling": "gauss", "quadrature_limit": 0, "tolerance": 1e-4, "max_samples": 512,
             "segments": 4, "terms": 16}  # fmt: skip


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="steps per variant per round")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def _model(obs, rfi: dict, precision: str):
    from tabascal import parallel
    from tabascal.fitting import run_config as rc
    from tabascal.model import joint

    config = rc.load({"precision": precision, "rfi": rfi})
    model = joint.build(obs, rc.model_config(config), init="data", seed=0)
    return parallel.route("none").place(model, None), config  # keeps moments as run does


def _rfi_errors(obs, variants) -> dict:
    """Largest and rms |V_rfi - V_ref| over the noise of each variant, float64."""
    import jax
    import numpy as np

    from tabascal.model import joint

    with jax.enable_x64(True):
        reference, _ = _model(obs, REFERENCE, "double")
        want = np.asarray(jax.jit(joint.predict_rfi, static_argnums=2)(
            reference.params.rfi, reference.constants, reference.spec))  # fmt: skip
        noise = float(np.mean(obs.noise))
        out = {}
        for name in variants:
            model, _ = _model(obs, VARIANTS[name], "double")
            got = np.asarray(jax.jit(joint.predict_rfi, static_argnums=2)(
                reference.params.rfi, model.constants, model.spec))  # fmt: skip
            error = np.abs(got - want) / noise
            out[name] = {"max_over_noise": float(error.max()),
                         "rms_over_noise": float(np.sqrt(np.mean(error**2)))}  # fmt: skip
    return out


def _component_seconds(model, repeats: int = 3) -> dict:
    """Median seconds of a value and gradient of each model component alone (the sum of its
    output's |x|^2 with respect to its own parameters), compiled first: where a step's time
    goes. The rest of the step (gains applied, likelihood, optimiser) is the difference."""
    import statistics

    import jax
    import jax.numpy as jnp

    from tabascal.model import gains, joint, sky

    c, spec, params = model.constants, model.spec, model.params
    parts = {
        "rfi": (lambda p: jnp.sum(jnp.abs(joint.predict_rfi(p, c, spec)) ** 2), params.rfi),
        "sky": (lambda p: jnp.sum(jnp.abs(sky.forward(p, c.sky)) ** 2), params.sky),
        "gains": (lambda p: jnp.sum(jnp.abs(gains.forward(p, c.gains)) ** 2), params.gains),
    }
    out = {}
    for name, (fn, p) in parts.items():
        run = jax.jit(jax.value_and_grad(fn))
        out[name] = statistics.median(_common.warm_seconds(run, p, repeats=repeats))
    return out


def _hvp_seconds(model, repeats: int = 3) -> float:
    """Median seconds of one Hessian-vector product of the whole loss (forward over reverse,
    as the Newton polish's conjugate-gradient iterations take it), compiled first."""
    import statistics

    import jax

    from tabascal.model import joint

    inputs = (model.constants, model.data)
    gradient = jax.grad(lambda p: joint.loss(p, inputs, model.spec)[0])
    product = jax.jit(lambda p, v: jax.jvp(gradient, (p,), (v,))[1])
    times = _common.warm_seconds(product, model.params, model.params, repeats=repeats)
    return statistics.median(times)


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    import jax

    from tabascal import fitting, parallel
    from tabascal.config import load_yaml
    from tabascal.fitting import optimiser
    from tabascal.fitting import run_config as rc
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    jax.config.update("jax_enable_x64", False)
    with tempfile.TemporaryDirectory() as where:
        store = Path(where) / "obs.zarr"
        simulate(simulation_config("demo", load_yaml(options.scenario)), store)
        obs = read_observation(store)
    print(f"{options.scenario.name}: (baselines, channels, times) {obs.vis.shape}")
    runs = {}
    for name in options.variants:
        model, config = _model(obs, VARIANTS[name], "single")
        components = _component_seconds(model)  # before the step donates the parameters
        hvp = _hvp_seconds(model)
        fit_config = rc.fit_config(config)
        optimizer = optimiser.make_optimizer(fit_config)
        step = fitting.route_step(parallel.route("none"), model.spec, fit_config, optimizer)
        inputs = (model.constants, model.data)
        state = optimiser.init_state(model.params, optimizer)
        start = time.perf_counter()
        state, loss, _ = step(state, inputs)
        jax.block_until_ready(loss)
        first = time.perf_counter() - start
        runs[name] = {"step": step, "state": state, "inputs": inputs, "first_seconds": first,
                      "per_step": [], "groups": model.info["rfi_groups"],
                      "phase_cache": model.info["rfi_phase_cache"],
                      "components": components, "hvp": hvp}  # fmt: skip
        print(f"{name}: groups {model.info['rfi_groups']}; compiled and first step {first:.1f} s; "
              f"phase moments {model.info['rfi_phase_cache']['groups']}")  # fmt: skip
    _common.interleaved_rounds(runs, options.rounds, options.steps)
    errors = _rfi_errors(obs, options.variants)
    base = _common.provenance(["benchmarks/leo_step.py", *(argv or sys.argv[1:])])
    print(f"{'variant':>21} {'median s':>9} {'min s':>8} {'max err/noise':>14} {'rms':>9} "
          f"{'rfi s':>7} {'sky s':>7} {'gains s':>7} {'hvp s':>7}")  # fmt: skip
    records = []
    for name, run in runs.items():
        median = statistics.median(run["per_step"])
        e = errors[name]
        k = run["components"]
        print(f"{name:>21} {median:9.3f} {min(run['per_step']):8.3f} "
              f"{e['max_over_noise']:14.2e} {e['rms_over_noise']:9.2e} "
              f"{k['rfi']:7.3f} {k['sky']:7.3f} {k['gains']:7.3f} {run['hvp']:7.3f}")  # fmt: skip
        records.append({
            **base, "scenario": options.scenario.name, "variant": name, "rfi": VARIANTS[name],
            "rfi_groups": run["groups"], "phase_cache": run["phase_cache"],
            "rounds": options.rounds,
            "steps_per_round": options.steps, "step_seconds_median": median,
            "step_seconds_per_round": run["per_step"], "first_step_seconds": run["first_seconds"],
            "rfi_error_vs_reference": e, "reference": REFERENCE,
            "component_value_and_grad_seconds": run["components"],
            "hvp_seconds_median": run["hvp"],
            "load_average": list(os.getloadavg()),
        })  # fmt: skip
    path = _common.write_json(records, options.json, "leo_step")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
