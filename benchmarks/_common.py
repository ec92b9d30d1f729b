"""What the tabascal benchmarks share: virtual CPU devices, the preset models, the record's
provenance (date, commit, machine, jax version) and where results go."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
RFI_ROUTES = {"analytic": 0, "hybrid": None}  # quadrature_limit; None keeps the default


def use_cpu_devices(n: int) -> None:
    """Ask XLA for ``n`` virtual CPU devices; must run before jax is imported."""
    if "jax" in sys.modules:
        raise RuntimeError("use_cpu_devices must run before jax is imported")
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


#: XLA CPU schedulers: "concurrency" (XLA's default, ordered for parallel threads, which puts
#: operations that need no input early) and "memory" (XLA's memory-minimising order).
CPU_SCHEDULERS = ("concurrency", "memory")


def use_cpu_scheduler(name: str) -> None:
    """Ask XLA's CPU compiler for one of ``CPU_SCHEDULERS``; must run before jax is imported."""
    if name not in CPU_SCHEDULERS:
        raise ValueError(f"cpu scheduler {name!r} is not known; choose one of {CPU_SCHEDULERS}")
    if "jax" in sys.modules:
        raise RuntimeError("use_cpu_scheduler must run before jax is imported")
    flag = "--xla_cpu_enable_concurrency_optimized_scheduler"
    flags = re.sub(rf"{flag}=\w+", "", os.environ.get("XLA_FLAGS", ""))
    value = "true" if name == "concurrency" else "false"
    os.environ["XLA_FLAGS"] = f"{flags} {flag}={value}".strip()


def run_config(rfi: str, precision: str = "single", extra: dict | None = None) -> dict:
    """The validated run configuration of the benchmarks for an RFI route."""
    from tabascal.config import merge
    from tabascal.fitting import run_config as rc

    if rfi not in RFI_ROUTES:
        raise ValueError(f"rfi {rfi!r} is not known; choose one of {', '.join(RFI_ROUTES)}")
    overrides = {"precision": precision}
    if RFI_ROUTES[rfi] is not None:
        overrides["rfi"] = {"quadrature_limit": RFI_ROUTES[rfi]}
    return rc.load(merge(overrides, extra or {}))


def preset_overrides(channels: int | None, extra: dict | None = None) -> dict:
    from tabascal.config import merge

    base = {} if channels is None else {"observation": {"n_freq": channels}}
    return merge(base, extra or {})


def machine() -> dict:
    import jax

    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "node": platform.node(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "system": platform.platform(),
        "devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
    }


def git_commit() -> str:
    """HEAD, marked +uncommitted when the packages or benchmarks differ from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "packages", "benchmarks"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    tracked_changes = [line for line in dirty.splitlines() if not line.startswith("??")]
    return commit + ("+uncommitted" if tracked_changes else "")


def provenance(command: list[str]) -> dict:
    import jax
    import numpy as np

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "command": " ".join(["python", *command]),
    }


def utc_stamp() -> str:
    """The UTC time now as result files name it: YYYYmmdd_HHMMSS."""
    return f"{datetime.datetime.now(datetime.UTC):%Y%m%d_%H%M%S}"


def write_json(records, path: Path | None, stem: str) -> Path:
    """Write ``records`` to ``path``, or to results/<stem>_<UTC time>.json."""
    if path is None:
        path = RESULTS / f"{stem}_{utc_stamp()}.json"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=2) + "\n")
    return path


def interleaved_rounds(runs: dict, rounds: int, steps: int) -> None:
    """Time ``steps`` steps of every run in turn, ``rounds`` times, so that a change of load on
    a shared machine touches every run alike; each run's per-step seconds are appended to its
    ``per_step``. runs: name -> {"step", "state", "inputs", "per_step"} (state is updated)."""
    import time

    import jax

    for _ in range(rounds):
        for run in runs.values():
            start = time.perf_counter()
            for _ in range(steps):
                run["state"], loss, _aux = run["step"](run["state"], run["inputs"])
            jax.block_until_ready(loss)
            run["per_step"].append((time.perf_counter() - start) / steps)


def warm_seconds(fn, *args, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn(*args)``, waited on, after one call that
    compiles it."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return times


def gb(n_bytes) -> str:
    return f"{n_bytes / 1e9:.3f}"


def preset_model(
    preset: str,
    channels: int | None,
    rfi: str,
    extra: dict | None = None,
    *,
    noise: float = 1.0,
    geom=None,
    config_extra: dict | None = None,
):
    """The abstract model of a preset (metadata only) with prior scales that match data of
    unit noise: the RFI level gives |V| ~ snr noise on the shortest baselines, as the group
    planning assumes; config_extra overrides the run configuration. Returns (abstract model,
    run configuration, geometry)."""
    from tabascal.fitting import run_config as rc
    from tabascal.model import frame, joint
    from tabascal.simulate import presets

    scene = presets.observation_scene(preset, preset_overrides(channels, extra))
    snr = presets.expected_snr(scene)
    config = run_config(rfi, extra=config_extra)
    model_config = rc.model_config(config)
    if geom is None:
        geom = frame.observation_geometry(scene.meta, model_config)
    level = (snr * noise / scene.meta.n_sat) ** 0.5
    model = joint.abstract_model(
        scene.meta, model_config, snr=snr, rfi_level=level, sky_sigma=noise, geom=geom
    )
    return model, config, geom


def synthetic_model(abstract, *, noise: float = 1.0, seed: int = 0, progress=None):
    """A concrete ``joint.Model`` with the structure of ``abstract`` (``joint.abstract_model``)
    and data drawn from the model itself: a prior draw of every component through
    ``joint.predict``, plus Gaussian noise of std ``noise`` on each of the real and imaginary
    parts, nothing flagged. The parameters start at the prior mean. Built on the default
    device, so the visibilities are never made on the host. The draw takes the phase moments
    that ``rfi.phase_cache`` keeps on one device (``parallel.keep_phase_moments``), as a fit does;
    the model returned holds none, for a route to place and keep its own. ``progress``, if
    given, is called with a line after the draw's program is compiled and after it has run."""
    import jax
    import jax.numpy as jnp

    from tabascal import parallel
    from tabascal.model import gains, joint, rfi_signal, sky

    spec, c = abstract.spec, abstract.constants
    real = c.phase.dtype
    cplx = jnp.result_type(real, jnp.complex64)
    constants = c._replace(sky=c.sky._replace(mean=jnp.zeros(c.sky.mean.shape, cplx)))
    keys = jax.random.split(jax.random.key(seed), 4)
    truth = joint.ModelParams(
        sky.init(constants.sky, keys[0]),
        rfi_signal.init(constants.rfi_signal, keys[1]),
        gains.init(constants.gains, keys[2]),
    )

    @jax.jit
    def observe(truth, constants, key):
        model = joint.predict(truth, constants, spec).model
        re, im = jax.random.normal(key, (2, *model.shape), real)
        return model + noise * jax.lax.complex(re, im)

    start = time.perf_counter()
    kept = parallel.keep_phase_moments("none", dataclasses.replace(abstract, constants=constants))
    draw = observe.lower(truth, kept.constants, keys[3]).compile()
    if progress:
        cache = kept.info["rfi_phase_cache"]["kept_mib_per_device"]
        progress(
            f"the data's draw compiled in {time.perf_counter() - start:.1f} s "
            f"(with {cache:.3g} MiB of phase moments kept)"
        )
    start = time.perf_counter()
    vis = jax.block_until_ready(draw(truth, kept.constants, keys[3]))
    del kept
    if progress:
        progress(f"the data drawn in {time.perf_counter() - start:.1f} s")
    data = joint.Data(
        vis=vis,
        flags=jnp.zeros(vis.shape, bool),
        noise=jnp.full((spec.n_bl,), noise, real),
        n_points=jnp.asarray(vis.size, jnp.int32),
    )
    params = joint.ModelParams(sky.init(constants.sky), abstract.params.rfi, abstract.params.gains)
    info = dict(abstract.info, data="synthetic: a prior draw of the model plus noise")
    return joint.Model(spec, constants, data, params, info)
