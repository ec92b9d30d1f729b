"""Shared test setup.

jax's 64-bit mode is off, as it is for a user who has not asked for it: the float32 tests run
as shipped. A test of the complex128 operators or with float64 references built in jax opts in
with the ``x64`` fixture, which scopes the mode to that test. The test problems are
tiny, so XLA compilation dominates the suite's time; compiling without LLVM optimisation
halved it (analytic and derivative tests: 48 s -> 25 s on a shared 2-core machine) and
changes no arithmetic. XLA reads the flag when the backend starts, so it is set before jax is
imported; an existing XLA_FLAGS is kept. (It applies to the whole pytest process: run this
package's tests on their own, as the nox session does.)
"""

import os

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

import hypothesis
import jax  # after XLA_FLAGS is set
import pytest

X64_LEFT_ON = (
    "jax's 64-bit mode is on outside a test that asked for it; scope it to the test with the "
    "x64 fixture (or jax.enable_x64(True) as a context manager) instead of "
    "jax.config.update, and leave JAX_ENABLE_X64 unset"
)


@pytest.fixture(autouse=True)
def x64_off_between_tests():
    """Every test starts and ends with jax's 64-bit mode off, so that none runs in a precision
    another one left behind."""
    assert not jax.config.jax_enable_x64, X64_LEFT_ON
    yield
    assert not jax.config.jax_enable_x64, X64_LEFT_ON


@pytest.fixture
def x64():
    """jax's 64-bit mode for one test, restored after it."""
    with jax.enable_x64(True):
        yield


# Property tests draw the same examples on every run unless HYPOTHESIS_PROFILE says otherwise,
# so that a CI failure reproduces anywhere with the same command; "explore" draws fresh ones.
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis.settings.register_profile("explore", derandomize=False, print_blob=True)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
hypothesis.settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config):
    current = hypothesis.settings()
    return (
        f"hypothesis profile {HYPOTHESIS_PROFILE!r}: derandomize={current.derandomize}, "
        f"max_examples={current.max_examples} (HYPOTHESIS_PROFILE=explore for fresh examples)"
    )
