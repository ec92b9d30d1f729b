"""How well any fit of the model could know the gains, scenario by scenario: the gains' error
from the curvature of the posterior at the truth, against what the fits reach.

    python benchmarks/gains_bound.py                                # every scenario but the shell
    python benchmarks/gains_bound.py --scenarios rfi-near-noise leo-rising

Each scenario (``benchmarks/scenarios/*.yaml``, as ``science.py`` simulates it) is built with
the run's default model at the truth (``init: truth``), in float64. With theta the flattened
parameters (sky, RFI and gains modes, all whitened), r(theta) the unflagged residuals over the
noise (real and imaginary parts) and the prior |theta|^2 / 2, the negative log posterior's
Gauss-Newton curvature is

    H = J^T J + I,    J = dr / dtheta at the truth,

and the posterior covariance of the parameters, to first order, is H^-1. The gains
g(theta) (n_ant, n_freq, n_time) vary with their own modes only; with G = dg / dtheta (real and
imaginary parts), the expected squared error of the posterior mean over the gains' cells is

    E |g - g_true|^2 = trace(G H^-1 G^T),

which no estimator of this model can beat on average (the Bayesian Cramer-Rao bound: H
holds the data's information and the prior's, and nothing else knows the gains). It is
reported as ``gains_bound_over_spread``, the rms error over the rms of the true gains'
departure from 1, the figure ``science.py`` calls ``gains_over_spread``. The same with the
RFI's parameters held at the truth (``..._rfi_known``) says what the sky alone leaves to the
gains when the RFI is not in doubt; with no data (prior only) the figure is what the prior
alone knows.

Beside the bound: the linearised MAP from the truth for this very noise, one Gauss-Newton
step ``theta - H^-1 (J^T r + theta)`` (``gains_map_over_spread``), that step's gains error from
each of its parts taken alone (``gains_map_{misfit,noise,prior}_over_spread``: what the model
at the truth start leaves of the noiseless data, the noise, the prior's pull), and its
expectation over the noise at this truth, the pull and H^-1 - H^-2 together
(``gains_expected_over_spread``, which takes the misfit as zero). The misfit's reduced
chi-squared is reported whole (``misfit_chi2``) and by component
(``misfit_chi2_by_component``: the model's sky, RFI or gains at the truth start with the other
two the simulator's).

H is formed column block by column block from the linearised residual and its transpose
(``jax.linearize``, ``jax.linear_transpose``), never holding J. Prints a table and writes JSON
under benchmarks/results/, with each scenario's latest ``science.py`` figure beside the bound.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
#: Left out by default: the largest scenario (eight satellites), its H the largest to form.
DEFAULT_SKIP = ("leo-shell",)


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", help="names in benchmarks/scenarios/")
    parser.add_argument("--block", type=int, default=128, help="columns of H formed at once")
    parser.add_argument("--json", type=Path, help="output path (default results/)")
    return parser.parse_args(argv)


def _curvature(residual, theta, block: int):
    """H = J^T J + I of ``residual`` at ``theta`` (P,), P x P float64, by column blocks."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    _, jvp = jax.linearize(residual, theta)
    vjp = jax.linear_transpose(jvp, theta)
    normal = jax.jit(jax.vmap(lambda e: vjp(jvp(e))[0]))
    n = theta.shape[0]
    h = np.empty((n, n))
    for start in range(0, n, block):
        stop = min(start + block, n)
        h[:, start:stop] = np.asarray(normal(jnp.eye(n)[start:stop])).T
    return 0.5 * (h + h.T) + np.eye(n)


def _rms(x) -> float:
    import numpy as np

    return float(np.sqrt(np.mean(np.abs(x) ** 2)))


def bound(name: str, simulation: dict, where: Path, block: int) -> dict:
    """The gains' error bounds of scenario ``name`` (see the module docstring)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree

    from tabascal.fitting import run_config
    from tabascal.model import gains, joint
    from tabascal.simulate import simulate, simulation_config
    from tabascal.store import read_observation

    simulate(simulation_config("demo", simulation), where / f"{name}.zarr")
    obs = read_observation(where / f"{name}.zarr")
    config = run_config.model_config(run_config.load({"precision": "double"}))
    model = joint.build(obs, config, init="truth")
    theta0, unravel = ravel_pytree(model.params)
    data = model.data
    noise = jnp.asarray(data.noise)
    noise = noise[:, None, None] if noise.ndim == 1 else noise[:, :, None]
    keep = ~np.asarray(data.flags)

    def residual_of(vis):
        r = ((vis - data.vis) / noise)[keep]
        return jnp.concatenate([r.real, r.imag])

    def residual(theta):
        return residual_of(joint.predict(unravel(theta), model.constants, model.spec).model)

    data_a1, data_a2 = model.constants.a1, model.constants.a2

    def gains_of(theta):
        g = gains.forward(unravel(theta).gains, model.constants.gains).ravel()
        return jnp.concatenate([g.real, g.imag])

    g_true = np.asarray(obs.truth.gains)
    h = _curvature(residual, theta0, block)
    g_jac = np.asarray(jax.jacfwd(gains_of)(theta0))  # (2 n_cells, P)
    n_cells = g_jac.shape[0] // 2
    spread = _rms(g_true - 1)

    def over_spread(curvature, columns):
        cols = np.asarray(columns)
        sub = g_jac[:, cols]
        trace = np.trace(sub @ np.linalg.solve(curvature[np.ix_(cols, cols)], sub.T))
        return float(np.sqrt(trace / n_cells) / spread)

    every = np.arange(theta0.shape[0])
    sizes = {k: ravel_pytree(getattr(model.params, k))[0].shape[0] for k in ("sky", "rfi", "gains")}
    # ravel_pytree follows ModelParams' fields: sky, rfi, gains (then any orbit corrections).
    not_rfi = np.setdiff1d(every, sizes["sky"] + np.arange(sizes["rfi"]))
    at_truth = np.asarray(gains_of(theta0))
    g0 = at_truth[:n_cells] + 1j * at_truth[n_cells:]
    # The linearised MAP from the truth, for this noise: one Gauss-Newton step down the
    # gradient J^T r + theta, and its expectation over the noise at this truth: the prior's
    # pull -H^-1 theta (a bias) and the noise's spread H^-1 J^T J H^-1 (= H^-1 - H^-2).
    # r = misfit - noise: what the model at the truth start leaves of the noiseless data
    # (the simulator's g_p (V_sky + V_rfi) conj(g_q)), less the noise; each part's step apart.
    _, pullback = jax.vjp(residual, theta0)
    t = obs.truth
    noiseless = gains.apply(
        jnp.asarray(t.sky_vis + t.rfi_vis), jnp.asarray(g_true), data_a1, data_a2
    )
    r0 = np.asarray(residual(theta0))
    noise_part = np.asarray(residual_of(noiseless))  # -noise / its std
    parts = {"misfit": r0 - noise_part, "noise": noise_part}
    # The misfit by component: the model's sky, RFI or gains at the truth start, the other two
    # exact (the simulator's).
    start = joint.predict(model.params, model.constants, model.spec)
    exact = {"sky": jnp.asarray(t.sky_vis), "rfi": jnp.asarray(t.rfi_vis), "gains": g_true}
    by_component = {}
    for part in exact:
        mixed = {**exact, part: getattr(start, part)}
        g = jnp.asarray(mixed["gains"])
        vis = gains.apply(mixed["sky"] + mixed["rfi"], g, data_a1, data_a2)
        by_component[part] = float(np.mean((np.asarray(residual_of(vis)) - noise_part) ** 2))

    def gains_step(gradient):
        return g_jac @ np.linalg.solve(h, gradient)

    gradient = np.asarray(pullback(r0)[0]) + np.asarray(theta0)
    g_map = np.asarray(gains_of(theta0 - np.linalg.solve(h, gradient)))
    g_map = g_map[:n_cells] + 1j * g_map[n_cells:]
    by_part = {k: gains_step(np.asarray(pullback(v)[0])) for k, v in parts.items()}
    by_part["prior"] = bias = gains_step(np.asarray(theta0))
    solved = np.linalg.solve(h, g_jac.T)  # H^-1 G^T
    spread_sq = np.trace(g_jac @ solved) - np.sum(solved**2)
    return {
        "scenario": name,
        "n_params": {k: int(v) for k, v in sizes.items()},
        "n_residuals": int(2 * keep.sum()),
        "gains_spread": spread,
        # How far the model's gains at the truth start are from the simulated ones: what
        # its basis and reference phase cannot follow.
        "gains_floor_over_spread": _rms(g0 - g_true.ravel()) / spread,
        "gains_bound_over_spread": over_spread(h, every),
        "gains_bound_over_spread_rfi_known": over_spread(h, not_rfi),
        "gains_prior_over_spread": over_spread(np.eye(theta0.shape[0]), every),
        "gains_map_over_spread": _rms(g_map - g_true.ravel()) / spread,
        "gains_expected_over_spread": float(
            np.sqrt((np.sum(bias**2) + spread_sq) / n_cells) / spread
        ),
        # The linearised MAP's gains error from each part of its step: the model's misfit at
        # the truth start, the noise, the prior's pull (their sum is the step).
        **{
            f"gains_map_{k}_over_spread": float(np.sqrt(np.sum(v**2) / n_cells) / spread)
            for k, v in by_part.items()
        },
        # Reduced chi-squared of the misfit alone (0: the truth start reproduces the noiseless
        # data), and of the noise (near 1).
        "misfit_chi2": float(np.mean(parts["misfit"] ** 2)),
        "misfit_chi2_by_component": by_component,
        "noise_chi2": float(np.mean(parts["noise"] ** 2)),
    }


def _fitted(name: str) -> tuple[float | None, str | None]:
    """The latest ``science.py`` gains figure of ``name`` under benchmarks/results/ (by the
    record's date) fitted with the run's defaults (no ``--config``), with its file's name."""
    found = []
    for path in glob.glob(str(_common.RESULTS / "science_*.json")):
        records = json.loads(Path(path).read_text())
        for record in records if isinstance(records, list) else [records]:
            defaults = record.get("run_config") == {} and "--steps" not in record.get("command", "")
            if record.get("scenario") == name and defaults and record.get("gains_over_spread"):
                found.append((record.get("date", ""), record["gains_over_spread"], Path(path).name))
    if not found:
        return None, None
    _, value, file = max(found)
    return value, file


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    names = options.scenarios or sorted(
        p.stem for p in SCENARIOS.glob("*.yaml") if p.stem not in DEFAULT_SKIP
    )
    import yaml

    records = []
    columns = ("bound", "rfi known", "prior", "expected", "map", "misfit", "noise", "pull", "fit")
    kinds = ("bound", "prior", "expected", "map", "map_misfit", "map_noise", "map_prior")
    keys = [f"gains_{k}_over_spread" for k in kinds]
    keys.insert(1, "gains_bound_over_spread_rfi_known")
    print(f"{'scenario':<16} {'params':>7} " + " ".join(f"{c:>9}" for c in columns))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            simulation = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
            record = bound(name, simulation, Path(tmp), options.block)
            record["fit_gains_over_spread"], record["fit_file"] = _fitted(name)
            records.append(_common.provenance(sys.argv) | record)
            figures = [record[k] for k in (*keys, "fit_gains_over_spread")]
            print(
                f"{name:<16} {sum(record['n_params'].values()):>7} "
                + " ".join(f"{x:>9.3f}" if x is not None else f"{'-':>9}" for x in figures),
                flush=True,
            )
    path = _common.write_json(records, options.json, "gains_bound")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
