"""What a blind fit of the demo recovers, with the shipped defaults, against the truth.

The full scenario table is ``benchmarks/science.py`` (docs/science.md); this keeps the demo's
figures from slipping. Single precision, as shipped.
"""

import json

import pytest

from tabascal.fitting import job, run_config
from tabascal.store import read_observation

# Whole fits of the demo store, minutes on a CPU: not run by ``nox -s fast``.
pytestmark = pytest.mark.slow


def test_demo_fit_with_the_defaults_leaves_an_eighth_of_the_noise_and_learns_the_gains(
    demo_store, tmp_path
):
    """The shipped defaults: one signal per satellite, 7-point time stencils, the weighed
    fringe start, 200 gradient steps, then Levenberg-Marquardt steps until converged (at
    most 60)."""
    obs = read_observation(demo_store)
    config = run_config.load({"fit": {"checkpoint_every": 0}, "output": {"plots": False}})
    summary = job.run(obs, tmp_path / "fit", config, progress=False)
    # The solver converged before its ceiling: measured after 11 of its steps (211 in all,
    # 778 passes, 2026-12-07).
    fit = json.loads((tmp_path / "fit" / "summary.json").read_text())["fit"]
    assert fit["stopped"] == "converged" and 200 < fit["steps"] < 230
    truth = summary["truth"]
    print(f"chi2 {summary['chi2_init']:.1f} -> {summary['chi2_final']:.4f}; RFI residual "
          f"{truth['rfi']['rmse_over_noise']:.3f}, sky {truth['sky']['rmse_over_noise']:.3f} "
          f"of the noise; gains {truth['gains']['over_spread']:.3f} of their spread")  # fmt: skip
    # Measured on this store (2026-12-07): the RFI as it appears in the data, fitted against
    # true, 0.111 of the noise (0.112 under the trust-region polish after 1200 gradient
    # steps; the goal is 0.2; 0.232 with the per-antenna signal below).
    # The bound leaves room for another machine's float32 rounding to take the fit another
    # way.
    assert truth["rfi"]["rmse_over_noise"] < 0.14
    # measured 0.30, at the goal's edge (0.3), where the linearised MAP is 0.036
    # (benchmarks/gains_bound.py): the gradient steps carry the gains along the trade between
    # the gains and the RFI, where the loss is nearly flat and the Gauss-Newton steps barely
    # move them (0.044 under the trust-region polish, 0.06 with fit.hold_gains).
    assert truth["gains"]["over_spread"] < 0.35
    # measured 0.9913, the goal's range (0.930 while the sky's fixed 200 kHz bandwidth and
    # one-cycle time floor let it take up noise)
    assert 0.97 < summary["chi2_final"] < 1.03
    # The sky itself, before the gains: measured 0.236 (0.142 under the trust-region polish,
    # 0.378 before the sky's bounds), against 59.0 for the raw data. The gains' error moves
    # into it; the apparent sky, g_p V_sky conj(g_q), is 0.143 (benchmarks/science.py).
    assert truth["sky"]["rmse_over_noise"] < 0.3 < truth["raw_data"]["rmse_over_noise"] / 100


def test_held_gains_are_learned_to_a_tenth_of_their_spread_on_the_demo(demo_store, tmp_path):
    """fit.hold_gains: the gradient steps leave the gains at 1, the Levenberg-Marquardt steps
    fit them from there."""
    obs = read_observation(demo_store)
    config = run_config.load(
        {"fit": {"checkpoint_every": 0, "hold_gains": True}, "output": {"plots": False}}
    )
    truth = job.run(obs, tmp_path / "fit", config, progress=False)["truth"]
    # measured 0.062 (2026-12-07; 0.30 unheld, the linearised MAP 0.036), the RFI 0.111 of
    # the noise as unheld
    assert truth["gains"]["over_spread"] < 0.1
    assert truth["rfi"]["rmse_over_noise"] < 0.14


def test_per_antenna_signal_from_the_data_start_leaves_a_quarter_of_the_noise(demo_store, tmp_path):
    """The per-antenna option with the data start and 400 gradient steps (the defaults until
    2026-12-02)."""
    obs = read_observation(demo_store)
    config = run_config.load(
        {
            "rfi": {"signal": "per_antenna", "time_stencil": 3},
            "fit": {"init": "data", "steps": 400, "second_phase_steps": 0, "polish_steps": 0,
                    "checkpoint_every": 0},
            "output": {"plots": False},
        }
    )  # fmt: skip
    summary = job.run(obs, tmp_path / "fit", config, progress=False)
    truth = summary["truth"]
    print(f"chi2 {summary['chi2_final']:.4f}; RFI residual {truth['rfi']['rmse_over_noise']:.3f}"
          f", sky {truth['sky']['rmse_over_noise']:.3f} of the noise; gains "
          f"{truth['gains']['over_spread']:.3f} of their spread")  # fmt: skip
    # measured 0.232 (the goal is 0.2; 0.347 before the sky's bounds from the field)
    assert truth["rfi"]["rmse_over_noise"] < 0.30
    # measured 1.001 (0.923 before the sky's bounds)
    assert 0.97 < summary["chi2_final"] < 1.05
    # measured 1.011 (1.20 before the sky's bounds from the field), against 59.0 for the raw
    # data
    assert truth["sky"]["rmse_over_noise"] < 1.2 < truth["raw_data"]["rmse_over_noise"] / 40
