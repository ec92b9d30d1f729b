"""How a scenario's fit proceeds, step by step: the gradient phases' chi-squared, then each
polish step's.

    python benchmarks/fit_trace.py --scenario leo-shell --steps 400
    python benchmarks/fit_trace.py --scenario demo --every 50 --polish-limit 3

The scenario (``benchmarks/scenarios/<name>.yaml``) is simulated and fitted as ``tabascal run``
fits it on one device (the run configuration's defaults, ``--config`` over them, ``--steps``
first-phase steps), but step by step: the reduced chi-squared every ``--every`` gradient steps
and at the phase's end, then at every polish step, with the Newton polish's state (the step
length it took along its direction, whether its conjugate gradients met negative curvature,
how many iterations they ran), the loss (the negative log posterior over the data's
``n_points``, recorded with them), and at every row the fit against the simulation's truth, as
``tabascal run``'s summary scores it: the RFI left in the cleaned data and the apparent sky's
error over the noise, the gains' error over their spread. A row's chi-squared is that at the
parameters its step starts from, its scores those after the step; its seconds leave the
scoring out. The trace ends where ``tabascal run`` would (``fitting.settled`` and
``fitting.polish_settled`` on the same losses; the row where it would is marked ``stop``) unless
``--past-stop`` runs on to the ceiling; ``--polish-limit`` stops after that many polish steps.
Prints a table and writes JSON under benchmarks/results/, rewritten after every polish row so
that a long trace cut short keeps what it reached (``complete`` false).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="leo-shell", help="a name in benchmarks/scenarios")
    parser.add_argument(
        "--steps", type=int, default=None, help="first-phase steps (fit.steps; default the run's)"
    )
    parser.add_argument("--config", type=Path, default=None, help="run configuration YAML")
    parser.add_argument("--every", type=int, default=100, help="gradient steps between rows")
    parser.add_argument("--polish-limit", type=int, default=None, help="polish steps at most")
    parser.add_argument(
        "--past-stop",
        action="store_true",
        help="run on past the step where tabascal run would stop",
    )
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def _placed(scenario: str, steps: int | None, config_path: Path | None):
    """The scenario simulated and its model placed as ``tabascal run`` places it on one
    device; the fit configuration, the run plan and the noise-scaled source (its truth read by
    the scores)."""
    import dataclasses

    from tabascal import fitting
    from tabascal.config import load_yaml, merge
    from tabascal.fitting import run_config as rc
    from tabascal.model import joint
    from tabascal.parallel import blockwise, routes
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    with tempfile.TemporaryDirectory() as where:
        store = Path(where) / "obs.zarr"
        simulate(simulation_config("demo", load_yaml(SCENARIOS / f"{scenario}.yaml")), store)
        obs = read_observation(store)
    overrides = load_yaml(config_path) if config_path else {}
    fit = {"checkpoint_every": 0} if steps is None else {"steps": steps, "checkpoint_every": 0}
    config = rc.load(merge(overrides, {"fit": fit}))
    plan = fitting.plan_run(config, shard_axis="none", reuse_plan=False)
    route = routes.route("none", False)
    source = blockwise.MemoryRows(obs)
    init = joint.resolve_init(plan.init, source.meta, 1, by_block=False)
    plan = dataclasses.replace(plan, init=init)
    source = fitting.noise_source(
        source, noise=plan.data.noise, noise_per_channel=plan.data.noise_per_channel
    )
    placed = fitting.placed_model(route, source, plan, False)
    return route, placed, plan.fit, plan, source


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    import jax
    import numpy as np

    from tabascal import fitting

    jax.config.update("jax_enable_x64", False)
    route, placed, fit, plan, source = _placed(options.scenario, options.steps, options.config)

    def scores(params) -> dict:
        out = fitting.predict_outputs(route, placed, params)
        truth = fitting.truth_metrics(
            out.fitted_blocks, out.gains, source.read_truth, source.meta, out.noise_mean
        )
        return {"rfi_over_noise": truth["rfi"]["rmse_over_noise"],
                "sky_over_noise": truth["apparent_sky"]["rmse_over_noise"],
                "gains_over_spread": np.nan if truth["gains"]["over_spread"] is None
                else truth["gains"]["over_spread"]}  # fmt: skip

    switch = fit.polish_start
    total = fit.total_steps
    if options.polish_limit is not None:
        total = min(total, switch + options.polish_limit)
    print(f"{options.scenario}: init {plan.init}; {fit.steps} + "
          f"{fit.second_phase_steps} gradient steps, {fit.polish_steps} {fit.polish} "
          "steps")  # fmt: skip
    inputs = (placed.constants, placed.data)
    optimizer = fitting.make_optimizer(fit)
    state = fitting.init_state(placed.params, optimizer)
    step = fitting.route_step(route, placed.spec, fit, optimizer)
    step = step.lower(state, inputs).compile()
    rows, losses, start, scoring = [], [], time.perf_counter(), 0.0
    record = {**_common.provenance(["benchmarks/fit_trace.py", *(argv or sys.argv[1:])]),
              "scenario": options.scenario, "init": plan.init,
              "schedule": {"steps": fit.steps, "second_phase_steps": fit.second_phase_steps,
                           "polish": fit.polish, "polish_steps": fit.polish_steps,
                           "polish_cg_steps": fit.polish_cg_steps,
                           "polish_tolerance": fit.polish_tolerance},
              "n_points": int(placed.data.n_points), "complete": False, "rows": rows}  # fmt: skip
    path = options.json
    if path is None:
        path = _common.RESULTS / f"fit_trace_{options.scenario}_{_common.utc_stamp()}.json"
    n_points = float(placed.data.n_points)
    print(f"{'step':>6} {'phase':>8} {'chi2':>10} {'rfi':>6} {'sky':>6} {'gains':>6} "
          f"{'seconds':>8} {'length':>9} {'bent':>5} {'cg':>4} radius")  # fmt: skip
    for n in range(total):
        state, loss, aux = step(state, inputs)
        losses.append(float(loss))
        stop = fitting.settled(losses, fit) or fitting.polish_settled(losses, fit, n_points)
        polish = n >= switch
        if not polish and n % options.every and n != switch - 1 and not stop:
            continue
        row = {"step": n, "phase": fit.polish if polish else "gradient",
               "chi2": float(aux["chi2"]), "loss": float(loss),
               "seconds": time.perf_counter() - start - scoring, "stop": stop}  # fmt: skip
        newton = state.opt_state.polish if polish else None
        if isinstance(newton, fitting.NewtonState | fitting.TrustRegionState):
            row.update(step_length=float(newton.step_size),
                       negative_curvature=bool(newton.negative_curvature),
                       cg_iterations=int(newton.cg_iterations))  # fmt: skip
        if isinstance(newton, fitting.TrustRegionState):
            row["radius"] = float(newton.radius)  # the next step's
        scored = time.perf_counter()
        row.update(scores(state.params))
        scoring += time.perf_counter() - scored
        rows.append(row)
        print(f"{n:6d} {row['phase']:>8} {row['chi2']:10.4f} {row['rfi_over_noise']:6.3f} "
              f"{row['sky_over_noise']:6.3f} {row['gains_over_spread']:6.2f} {row['seconds']:8.0f} "
              f"{row.get('step_length', np.nan):9.2e} {row.get('negative_curvature', '')!s:>5} "
              f"{row.get('cg_iterations', ''):>4} {row.get('radius', '')}"
              f"{'  <- tabascal run stops here' if stop else ''}", flush=True)  # fmt: skip
        if polish:
            _common.write_json([record], path, "fit_trace")
        if stop and not options.past_stop:
            break
    taken = len(losses)
    final = float(jax.jit(partial(route.loss, spec=placed.spec))(state.params, inputs)[1]["chi2"])
    print(f"final chi-squared {final:.4f} after {taken} steps")
    record.update(steps_taken=taken, chi2_final=final, complete=True)
    path = _common.write_json([record], path, "fit_trace")
    print(f"wrote {path}")
    return [record]


if __name__ == "__main__":
    main()
