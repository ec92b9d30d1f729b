"""Fitting: the ``tabascal run`` job (``job``, ``run``) and the optimiser it runs.

- ``optimiser``: the fit's settings (``FitConfig``), the optimiser they make, its jitted step
  and the loop that takes the steps (``optimiser.run``).
- ``phases``: the gradient phases and the polish as one transformation, the fit's state
  (``FitState``) and its polish's form.
- ``solvers``: the Newton polishes (a line search, a trust region) and the state each keeps.
- ``checkpoint``: the checkpoint written as the fit goes and read to resume it, with the
  fit's history (``FitHistory``).
- ``run_config``: the run's configuration schema (defaults read from the components'
  settings) and ``run_plan``: a validated configuration resolved once into a ``RunPlan``.
- ``job``, its output folder (``output_folder``), the results written block by block and the
  truth metrics (``results``), the noise the fit uses (``data_noise``), the per-satellite
  outputs (``satellites``) and ``plots``.

The names below are what callers outside ``fitting`` (the command, benchmarks) use.
"""

from tabascal.fitting.checkpoint import FitHistory, load_checkpoint, save_checkpoint
from tabascal.fitting.data_noise import noise_source
from tabascal.fitting.job import RunSummary, placed_model, precision_scope, predict_outputs, run
from tabascal.fitting.optimiser import (
    FitConfig,
    compile_step,
    init_state,
    make_optimizer,
    make_step,
    polish_settled,
    settled,
)
from tabascal.fitting.phases import FitState, polish_form
from tabascal.fitting.results import truth_metrics
from tabascal.fitting.run_plan import RunPlan, Sharding, plan_run
from tabascal.fitting.solvers import NewtonState, TrustRegionState

__all__ = [
    "FitConfig",
    "FitHistory",
    "FitState",
    "NewtonState",
    "RunPlan",
    "RunSummary",
    "Sharding",
    "TrustRegionState",
    "compile_step",
    "init_state",
    "load_checkpoint",
    "make_optimizer",
    "make_step",
    "noise_source",
    "placed_model",
    "plan_run",
    "polish_form",
    "polish_settled",
    "precision_scope",
    "predict_outputs",
    "run",
    "save_checkpoint",
    "settled",
    "truth_metrics",
]
