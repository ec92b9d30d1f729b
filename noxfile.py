"""Development sessions for the three packages.

``nox`` runs lint and every test session; ``nox -s demo`` runs the main job. Each package's
tests run in an environment holding only that package, its local sibling dependencies and its
test extras, so a missing declared dependency shows up as a failure here.
"""

from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests", "integration", "integration_heavy", "ms"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent

# Each package and the local packages it depends on.
PACKAGES = {
    "ri_kernels": (),
    "tabascal_partition": (),
    "tabascal": ("ri_kernels", "tabascal_partition"),
}

# Tests that shard across devices get four virtual CPU devices; XLA reads this at jax import.
FOUR_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}


def _install_local(session: nox.Session, package: str, extras: str = "") -> None:
    paths = [str(ROOT / "packages" / dep) for dep in PACKAGES[package]]
    session.install(*paths, f"{ROOT / 'packages' / package}{extras}")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
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
