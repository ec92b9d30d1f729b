"""Fixtures shared by the multi-device tests: the device check, float64, and one small store.

These tests run on virtual CPU devices (nox sets XLA_FLAGS before jax is imported). A test that
cannot get its devices fails; it never skips.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from tabascal.simulate import simulate, simulation_config

N_DEVICES = 4
#: 8 stations (28 baselines, which 3 and 4 devices do not divide into whole blocks of rows with
#: both RFI groups filled), 2 channels, 30 integrations: small enough to compile quickly.
SMALL = {"array": {"n_stations": 8}, "observation": {"n_time": 30, "n_freq": 2}}
#: The hybrid route in float64, cheap to compile: a quadrature and an analytic group on the
#: ``SMALL`` store (two groups at most, a short analytic expansion, the midpoint rule).
HYBRID_DOUBLE = {
    "precision": "double",
    "rfi": {
        "quadrature_limit": 8,
        "max_groups": 2,
        "segments": 1,
        "terms": 3,
        "cubic_terms": 1,
        "sampling": "midpoint",
    },
}


ROOT = Path(__file__).resolve().parent.parent
#: LLVM's optimisation level 0 for the XLA CPU programs of a benchmark that only compiles
#: (benchmarks/memory.py, step_time.py --cost-only): it changes the machine code alone, not
#: the HLO passes, the buffer assignment or the cost analysis whose figures they report
#: (benchmarks/memory.py's records for tests/test_benchmarks.py measured equal, key for key,
#: at levels 0 and 2), and compiles in about two thirds of the time.
COMPILE_ONLY_XLA_FLAG = "--xla_backend_optimization_level=0"


def run_benchmark(script: str, *arguments: str, compile_only: bool = False) -> None:
    """benchmarks/``script`` with ``arguments``, in its own process; it must succeed. With
    ``compile_only`` (a benchmark that runs no program) XLA's CPU backend skips LLVM's
    optimisations (``COMPILE_ONLY_XLA_FLAG``)."""
    env = dict(os.environ)
    if compile_only:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {COMPILE_ONLY_XLA_FLAG}".strip()
    command = [sys.executable, str(ROOT / "benchmarks" / script), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


def host_memory_bytes() -> int:
    """The host's physical memory as /proc/meminfo's MemTotal gives it (kB there), apart from
    the page count tabascal reads."""
    with open("/proc/meminfo") as meminfo:
        line = next(line for line in meminfo if line.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def require_devices(n: int = N_DEVICES) -> None:
    assert jax.device_count() >= n, (
        f"these tests need {n} devices but {jax.device_count()} are visible; set "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before jax is imported"
    )


@pytest.fixture(scope="module")
def double_precision():
    """jax's 64-bit mode for one test module (restored after it), on enough devices."""
    require_devices()
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    """The path of the ``SMALL`` demo-preset store, simulated once per session (read only)."""
    path = tmp_path_factory.mktemp("small_store") / "obs.zarr"
    simulate(simulation_config("demo", SMALL), path)
    return path


def single_device_reference(store, config: dict):
    """(model, loss, gradient) of the one-device model of ``store`` under the run ``config``,
    at the prior draw (init "prior"): what a sharded route's loss and gradient must equal."""
    import numpy as np

    from tabascal.fitting import run_config
    from tabascal.model import joint
    from tabascal.store import read_observation

    obs = read_observation(store)
    model = joint.build(obs, run_config.model_config(run_config.load(config)), init="prior")
    inputs = (model.constants, model.data)
    value, grad = jax.jit(jax.value_and_grad(lambda p: joint.loss(p, inputs, model.spec)[0]))(
        model.params
    )
    return model, float(value), jax.tree.map(np.asarray, grad)


def run_summary(store, out, axis: str, config, *extra: str) -> dict:
    """``tabascal run`` of ``store`` into ``out`` under the run ``config`` (a YAML file) on
    N_DEVICES virtual devices along the shard axis ``axis``, with ``extra`` arguments; it
    must succeed. Returns its summary.json."""
    import json

    from tabascal.cli import main

    argv = ["run", "-c", str(config), "--data", str(store), "-o", str(out), "-q", *extra]
    assert main([*argv, "--devices", str(N_DEVICES), "--shard-axis", axis]) == 0
    return json.loads((Path(out) / "summary.json").read_text())


def fit_step(model, axis: str, n_dev: int = N_DEVICES):
    """(optimisation step, initial state, inputs) of ``model`` (a ``joint.Model``) on the axis
    "none" (one device), "baseline" or "reuse" (the baseline axis with the antenna-reuse plan)
    over ``n_dev`` devices, with the default fit (a Levenberg-Marquardt polish after 200
    gradient steps). Each phase's program compiles when the step first runs in it, so a test
    that takes fewer steps than the gradient phases never compiles the polish's."""
    from tabascal import fitting, parallel
    from tabascal.fitting import optimiser
    from tabascal.parallel import baseline_axis

    fit = optimiser.FitConfig()
    optimizer = optimiser.make_optimizer(fit)
    route = parallel.route("none" if axis == "none" else "baseline", reuse_plan=axis == "reuse")
    if axis == "none":
        params, inputs, spec = model.params, (model.constants, model.data), model.spec
    else:
        mesh = baseline_axis.make_mesh(n_dev)
        sharded = baseline_axis.shard_model(model, mesh, reuse=axis == "reuse")
        params, inputs = sharded.params, (sharded.constants, sharded.data)
        spec = sharded.spec
    params = jax.tree.map(lambda x: x.copy(), params)  # the step donates its state
    state = optimiser.init_state(params, optimizer)
    return fitting.route_step(route, spec, fit, optimizer), state, inputs


def compiled_step(model, axis: str, n_dev: int = N_DEVICES) -> dict:
    """The compiled programs of ``fit_step``'s step by phase ("gradient", "polish"), both
    compiled ahead."""
    from tabascal.fitting import optimiser

    step, state, inputs = fit_step(model, axis, n_dev)
    _, programs = optimiser.compile_step(step, state, inputs)
    return programs


def assert_no_cube_crosses_devices(step, n_ant: int):
    """Check a compiled step's collectives: only all-reduces, each of scalars or of per-antenna
    arrays (leading axis ``n_ant``: the gradients of the replicated RFI modes and the gains; or
    1: the shared signal's modes, which have no antenna axis); never a visibility-shaped array.
    Returns what was found, for the test to print."""
    from tabascal.planning import memory

    moved = memory.collective_shapes(step)
    # A sharded step always sums its loss across devices: finding nothing means the HLO
    # pattern no longer matches, and the check below would pass without looking.
    assert any(name == "all-reduce" for name, _ in moved), (
        "no all-reduce found in a sharded step: memory.collective_shapes no longer reads this "
        "HLO, so nothing was checked"
    )
    for name, arrays in moved:
        assert name == "all-reduce", moved
        for dtype, shape in arrays:
            assert shape == () or shape[0] in (n_ant, 1), (name, dtype, shape, moved)
    return moved


def assert_steps_gather_nothing(steps: dict, n_ant: int, label: str):
    """Check each compiled step of ``steps`` (phase -> program, e.g. a fit's gradient and
    polish steps): no all-gather, collective-permute or all-to-all, at least one all-reduce
    (the scalar sums), and no visibility-shaped array moved (``assert_no_cube_crosses_devices``)."""
    from tabascal.planning import memory

    for phase, step in steps.items():
        found = memory.count_collectives(step)
        print(f"collectives in the compiled {label} {phase} step: {found}")
        for name in ("all-gather", "collective-permute", "all-to-all"):
            assert found.get(name, 0) == 0, (phase, name, found)
        assert found.get("all-reduce", 0) >= 1, found  # the scalar sums at least
        print(f"arrays they move: {assert_no_cube_crosses_devices(step, n_ant)}")
