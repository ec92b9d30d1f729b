"""Shared fixtures: small simulated observations, made once per test session, and jax's
64-bit mode for the tests that need it.

The mode is off, as it is for a user who has not asked for it, so that the single-precision
tests run as shipped; a test of float64 arithmetic opts in with the ``x64`` fixture, which
scopes the mode to that test.
"""

import jax
import pytest

from tabascal.simulate import simulate, simulation_config


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    # Several tests fit the same small model; a compilation cache lets the second and later
    # ones skip XLA compilation, which dominates their run time on a CPU. nox gives every
    # session one cache (JAX_COMPILATION_CACHE_DIR, which jax reads at import); run otherwise,
    # the tests get one of their own.
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("xla_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


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


# The demo preset shrunk to 8 stations (28 baselines), 2 channels and 30 integrations: the
# same physics (two GNSS satellites far above the noise, a point-source sky, gain drifts) at a
# size that fits in seconds.
SMALL = {
    "array": {"n_stations": 8},
    "observation": {"n_time": 30, "n_freq": 2},
}


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("obs") / "small.zarr"
    simulate(simulation_config("demo", SMALL), path)
    return path


#: A Starlink-like LEO below the horizon for the first minute of four, seen by 5 stations in
#: one channel: a pass rising during the observation.
RISING = {
    "array": {"n_stations": 5},
    "observation": {"n_time": 120, "n_freq": 1},
    "satellites": {
        "count": 0,
        "orbits": [
            {"name": "LEO-RISING", "altitude_m": 550e3, "inclination_deg": 53.0,
             "raan_deg": 196.27, "arg_lat_deg": 301.24, "eirp_dbw_hz": -45.0}
        ],
    },
}  # fmt: skip


@pytest.fixture(scope="session")
def rising_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("obs") / "rising.zarr"
    simulate(simulation_config("demo", RISING), path)
    return path


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("obs") / "demo.zarr"
    simulate(simulation_config("demo"), path)
    return path
