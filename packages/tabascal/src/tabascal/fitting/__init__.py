"""Fitting: the ``tabascal run`` job (``job``, ``run``) and the optimiser it runs.

- ``optimiser``: the fit's settings (``FitConfig``), the optimiser they make, its jitted step
  and the loop that takes the steps (``optimiser.run``).
- ``phases``: the gradient phases and the polish as one transformation, the fit's state
  (``FitState``) and its polish's form.
- ``solvers``: the Newton polishes (a line search, a trust region) and the state each keeps;
  ``levenberg_marquardt``: Levenberg-Marquardt steps by preconditioned conjugate gradients.
- ``checkpoint``: the checkpoint written as the fit goes and read to resume it, with the
  fit's history (``FitHistory``).
- ``run_config``: the run's configuration schema (defaults read from the components'
  settings) and ``run_plan``: a validated configuration resolved once into a ``RunPlan``.
- ``job``, its output folder (``output_folder``), the results written block by block and the
  truth metrics (``results``), the noise the fit uses (``data_noise``), the per-satellite
  outputs (``satellites``) and ``plots``.

The names below are what callers outside ``fitting`` (the command, benchmarks) use.
"""

from tabascal._lazy_face import lazy_face

#: Each module of the face and the names it gives; a name loads its module on first use, so
#: that importing one module of ``fitting`` (``results``, say, from ``parallel.blockwise``)
#: does not import the job, which imports ``parallel``.
_FACE = {
    "checkpoint": ("FitHistory", "load_checkpoint", "save_checkpoint"),
    "data_noise": ("noise_source",),
    "job": (
        "RunSummary",
        "placed_model",
        "precision_scope",
        "predict_outputs",
        "route_step",
        "run",
    ),
    "optimiser": (
        "MODE_AXES",
        "FitConfig",
        "compile_step",
        "init_state",
        "make_optimizer",
        "make_step",
        "polish_settled",
        "settled",
    ),
    "levenberg_marquardt": ("LevenbergMarquardtState",),
    "phases": ("FitState", "polish_form"),
    "results": ("truth_metrics",),
    "run_plan": ("RunPlan", "Sharding", "plan_run"),
    "solvers": ("NewtonState", "TrustRegionState"),
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _FACE)
