"""Development sessions for the three packages.

``nox`` runs lint and every test session (what CI runs); ``nox -s fast`` runs lint and the
package tests not marked slow, for the edit-test loop; ``nox -s demo`` runs the main job. Each
package's tests run in an environment holding only that package, its local sibling
dependencies and its test extras, so a missing declared dependency shows up as a failure here.
``nox -s tests_all_pythons`` runs the package tests on every supported interpreter (all must
be installed). docs/development.md gives each session's time.

Every session shares one jax persistent compilation cache under .nox (removed with it): the
tests compile many of the same small programs, session after session and in the command-line
runs they start as subprocesses, which inherit the cache's variables.
"""

from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests", "lowest", "integration", "integration_heavy", "ms"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent

# Each package and the local packages it depends on.
PACKAGES = {
    "ri_kernels": (),
    "tabascal_partition": (),
    "tabascal": ("ri_kernels", "tabascal_partition"),
}

# The interpreters the classifiers of each pyproject.toml name, all run by tests_all_pythons.
# Not a default session: nox fails on a missing interpreter, and a machine may have only one.
PYTHONS = ["3.11", "3.12", "3.13"]

# jax's persistent compilation cache, shared by every session and the processes they start:
# jax reads these variables at import. A program is cached whatever its compile time or size.
COMPILATION_CACHE = {
    "JAX_COMPILATION_CACHE_DIR": str(ROOT / ".nox" / "xla-cache"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}

# Tests that shard across devices get four virtual CPU devices; XLA reads this at jax import.
FOUR_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

# Every pytest run lists its slowest tests, so that where the time goes stays visible in CI's
# log.
PYTEST_OPTIONS = ["--durations=30"]

# Two pytest-xdist workers where they measurably help (docs/development.md): the tabascal and
# cross-package tests, whose fits, command-line subprocesses and host work leave a core idle
# (tabascal's tests: 1520 s in one process, 766 s over two). Not ri_kernels', whose large
# programs XLA already compiles and runs on both cores (293 s in one process, 386 s over two).
# ``--dist loadfile`` keeps a file on one worker, so its module fixtures are built once.
TWO_WORKERS = ["-n", "2", "--dist", "loadfile"]
ONE_WORKER = ["-n", "0"]
WORKERS = {"ri_kernels": ONE_WORKER, "tabascal_partition": ONE_WORKER, "tabascal": TWO_WORKERS}
XDIST = "pytest-xdist>=3.6"

# What session lowest runs at the dependency floors, as pytest arguments from each package's
# folder: the whole suites of ri_kernels and tabascal_partition, and one tabascal module per
# direct dependency it reaches (pyyaml: config; optax, scipy: model_joint; zarr, matplotlib,
# tqdm: run; jax_num_cpu_devices: cli; sgp4: tle).
LOWEST_TESTS = {
    "ri_kernels": ["tests"],
    "tabascal_partition": ["tests"],
    "tabascal": [
        "tests/test_config.py",
        "tests/test_model_joint.py",
        "tests/test_run.py",
        "tests/test_cli.py",
        "tests/test_tle.py",
    ],
}
# and, for tabascal, the baseline axis's step on four devices (jax.shard_map, jax.lax.pcast),
# which no test of the package alone reaches
LOWEST_CROSS_PACKAGE_TEST = (
    "tests/test_sharding_baseline.py::test_compiled_step_on_four_devices_has_no_gather_or_permute"
)


def _install_local(session: nox.Session, package: str, extras: str = "", *options: str) -> None:
    paths = [str(ROOT / "packages" / dep) for dep in PACKAGES[package]]
    session.install(*options, *paths, f"{ROOT / 'packages' / package}{extras}")
    session.install(XDIST)


def _pytest(session: nox.Session, workers: list[str], *args: str, env: dict | None = None) -> None:
    """pytest with PYTEST_OPTIONS, ``workers`` and the shared compilation cache; ``args`` and
    the command line's own arguments (after ``--``) come after, so that they win."""
    env = {**COMPILATION_CACHE, **(env or {})}
    session.run("pytest", *PYTEST_OPTIONS, *workers, *args, *session.posargs, env=env)


def _package_tests(session: nox.Session, package: str, *args: str) -> None:
    _pytest(
        session,
        WORKERS[package],
        str(ROOT / "packages" / package / "tests"),
        "--rootdir",
        str(ROOT / "packages" / package),
        # Measurement Set tests need the 'ms' extra, which is not installed here: session ms
        "--ignore",
        str(ROOT / "packages" / package / "tests" / "ms"),
        *args,
    )


def _run_tests(session: nox.Session, package: str) -> None:
    _install_local(session, package, "[test]")
    _package_tests(session, package)


def _lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def lint(session: nox.Session) -> None:
    """CI: ruff's lint and format checks over the repository."""
    _lint(session)


@nox.session(default=False)
def fast(session: nox.Session) -> None:
    """Edit-test loop, not CI: lint and the package tests not marked slow, in minutes.

    One environment holds the three packages (session tests checks each package's declared
    dependencies alone). The compilation cache under .nox outlives the run, so a second run
    recompiles only what changed."""
    _lint(session)
    session.install(*(f"{ROOT / 'packages' / package}[test]" for package in PACKAGES), XDIST)
    for package in PACKAGES:
        _package_tests(session, package, "-m", "not slow")


@nox.session
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """CI: one package's tests, with only that package and what it declares installed."""
    _run_tests(session, package)


@nox.session(python=PYTHONS)
@nox.parametrize("package", list(PACKAGES))
def tests_all_pythons(session: nox.Session, package: str) -> None:
    """By hand: session tests on each interpreter of PYTHONS, which must all be installed.

    nox looks on PATH: a pyenv version that is not active needs its bin folder there."""
    _run_tests(session, package)


@nox.session(venv_backend="uv")
@nox.parametrize("package", list(PACKAGES))
def lowest(session: nox.Session, package: str) -> None:
    """CI: part of each package's tests at the lowest dependency versions it declares.

    LOWEST_TESTS, with the package's direct dependencies, local siblings and test extras at the
    lowest versions its pyproject.toml allows (uv's lowest-direct resolution, their own
    dependencies newest), so that a floor the code has outgrown fails here. The tests marked
    slow are left out: the others of the same modules reach the same dependencies (a fit, its
    results and plots, the command line), and session tests runs them all at the newest
    versions."""
    _install_local(session, package, "[test]", "--resolution", "lowest-direct")
    with session.chdir(ROOT / "packages" / package):
        _pytest(session, WORKERS[package], *LOWEST_TESTS[package], "-m", "not slow")
    if package == "tabascal":
        _pytest(session, ONE_WORKER, str(ROOT / LOWEST_CROSS_PACKAGE_TEST), env=FOUR_CPU_DEVICES)


@nox.session
def ms(session: nox.Session) -> None:
    """CI: tabascal's Measurement Set tests, with the 'ms' extra (python-casacore).

    They import casacore unconditionally, so a missing extra fails here instead of skipping."""
    _install_local(session, "tabascal", "[ms,test]")
    _pytest(
        session,
        TWO_WORKERS,
        str(ROOT / "packages" / "tabascal" / "tests" / "ms"),
        "--rootdir",
        str(ROOT / "packages" / "tabascal"),
    )


@nox.session
def integration(session: nox.Session) -> None:
    """CI: cross-package tests on four virtual CPU devices, less those marked heavy.

    Multi-device equivalence, memory, multi-process runs and the command line."""
    _install_local(session, "tabascal", "[test]")
    _pytest(session, TWO_WORKERS, str(ROOT / "tests"), "-m", "not heavy", env=FOUR_CPU_DEVICES)


@nox.session
def integration_heavy(session: nox.Session) -> None:
    """CI: the cross-package cases marked heavy, on four virtual CPU devices.

    More device counts and RFI routes, 20-step fits and single precision, for every sharding
    route."""
    _install_local(session, "tabascal", "[test]")
    _pytest(session, TWO_WORKERS, str(ROOT / "tests"), "-m", "heavy", env=FOUR_CPU_DEVICES)


@nox.session
def demo(session: nox.Session) -> None:
    """By hand: the README's main job, ``tabascal demo``."""
    _install_local(session, "tabascal")
    session.run("tabascal", "demo", *session.posargs)
