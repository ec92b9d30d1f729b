"""Development sessions for the three packages.

``nox`` runs lint and every test session; ``nox -s demo`` runs the main job. Each package's
tests run in an environment holding only that package, its local sibling dependencies and its
test extras, so a missing declared dependency shows up as a failure here. ``nox -s
tests_all_pythons`` runs the package tests on every supported interpreter (all must be
installed).
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

# Tests that shard across devices get four virtual CPU devices; XLA reads this at jax import.
FOUR_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}

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


def _run_tests(session: nox.Session, package: str) -> None:
    _install_local(session, package, "[test]")
    session.run(
        "pytest",
        str(ROOT / "packages" / package / "tests"),
        "--rootdir",
        str(ROOT / "packages" / package),
        # Measurement Set tests need the 'ms' extra, which is not installed here: session ms
        "--ignore",
        str(ROOT / "packages" / package / "tests" / "ms"),
        *session.posargs,
    )


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    _run_tests(session, package)


@nox.session(python=PYTHONS)
@nox.parametrize("package", list(PACKAGES))
def tests_all_pythons(session: nox.Session, package: str) -> None:
    """Session tests on each interpreter of PYTHONS, which must all be installed (nox looks on
    PATH: a pyenv version that is not active needs its bin folder there)."""
    _run_tests(session, package)


@nox.session(venv_backend="uv")
@nox.parametrize("package", list(PACKAGES))
def lowest(session: nox.Session, package: str) -> None:
    """Part of each package's tests (LOWEST_TESTS) with its direct dependencies, local siblings
    and test extras included, at the lowest versions its pyproject.toml allows, so that a floor
    the code has outgrown fails here: uv's lowest-direct resolution, their own dependencies
    newest. The three took 2 min 37 s on the 2-core development machine under light load
    (3.5 to 6 min while other jobs kept both cores busy)."""
    _install_local(session, package, "[test]", "--resolution", "lowest-direct")
    with session.chdir(ROOT / "packages" / package):
        session.run("pytest", *LOWEST_TESTS[package], *session.posargs)
    if package == "tabascal":
        session.run(
            "pytest", str(ROOT / LOWEST_CROSS_PACKAGE_TEST), *session.posargs, env=FOUR_CPU_DEVICES
        )


@nox.session
def ms(session: nox.Session) -> None:
    """tabascal's Measurement Set tests, with the 'ms' extra (python-casacore) installed; they
    import casacore unconditionally, so a missing extra fails here instead of skipping."""
    _install_local(session, "tabascal", "[ms,test]")
    session.run(
        "pytest",
        str(ROOT / "packages" / "tabascal" / "tests" / "ms"),
        "--rootdir",
        str(ROOT / "packages" / "tabascal"),
        *session.posargs,
    )


@nox.session
def integration(session: nox.Session) -> None:
    """Cross-package tests: multi-device equivalence, memory, multi-process and the command
    line, less the cases marked heavy (session integration_heavy)."""
    _install_local(session, "tabascal", "[test]")
    session.run(
        "pytest", str(ROOT / "tests"), "-m", "not heavy", *session.posargs, env=FOUR_CPU_DEVICES
    )


@nox.session
def integration_heavy(session: nox.Session) -> None:
    """The slower multi-device equivalence cases (pytest mark ``heavy``): more device counts
    and RFI routes, 20-step fits and single precision, for every sharding route."""
    _install_local(session, "tabascal", "[test]")
    session.run(
        "pytest", str(ROOT / "tests"), "-m", "heavy", *session.posargs, env=FOUR_CPU_DEVICES
    )


@nox.session
def demo(session: nox.Session) -> None:
    _install_local(session, "tabascal")
    session.run("tabascal", "demo", *session.posargs)
