"""Shared fixtures: small simulated observations, made once per test session."""

import jax
import pytest

from tabascal.simulate import simulate, simulation_config


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    # Several tests fit the same small model; a session-wide compilation cache lets the second
    # and later ones skip XLA compilation, which dominates their run time on a CPU.
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("xla_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


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


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("obs") / "demo.zarr"
    simulate(simulation_config("demo"), path)
    return path
