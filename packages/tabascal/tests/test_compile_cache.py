"""The ``tabascal`` command's persistent compilation cache: its folder, a second run of the same
shapes that compiles nothing, and ``--no-compile-cache``.

A second run in this process would find its programs in jax's in-memory cache and compile
nothing whatever the persistent cache did, so the runs go in subprocesses, each a fresh jax.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tabascal.fitting.compile_cache import cache_folder

TINY_FIT = "fit:\n  steps: 2\n  second_phase_steps: 0\n  polish_steps: 0\noutput:\n  plots: false\n"


def test_cache_folder_follows_xdg_and_yields_to_the_users():
    home = {"HOME": "/home/ada"}
    assert cache_folder(home) == Path("/home/ada/.cache/tabascal/jax")
    assert cache_folder({**home, "XDG_CACHE_HOME": "/scratch/c"}) == Path("/scratch/c/tabascal/jax")
    # The specification ignores a relative XDG_CACHE_HOME.
    assert cache_folder({**home, "XDG_CACHE_HOME": "c"}) == Path("/home/ada/.cache/tabascal/jax")
    users = {**home, "XDG_CACHE_HOME": "/scratch/c", "JAX_COMPILATION_CACHE_DIR": "/mine"}
    assert cache_folder(users) == Path("/mine")
    # jax configured already (from the environment at import, or by the caller) wins over all.
    assert cache_folder(users, configured="/set/in/jax") == Path("/set/in/jax")


def _run(store, config, out, cache_home, *flags) -> dict:
    """``tabascal run`` in a fresh process with $XDG_CACHE_HOME at ``cache_home``; its
    summary.json."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["XDG_CACHE_HOME"] = str(cache_home)
    done = subprocess.run(
        [sys.executable, "-m", "tabascal", "run", "-c", config, "--data", store, "-o", out,
         "-q", *flags],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads((Path(out) / "summary.json").read_text())["compile"]


@pytest.mark.slow
def test_second_run_of_the_same_shapes_compiles_nothing(small_store, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(TINY_FIT)
    cache_home = tmp_path / "xdg"
    first = _run(small_store, config, tmp_path / "first", cache_home)
    assert first["cache"] == str(cache_home / "tabascal" / "jax")
    # (A program the run builds twice, in the same shapes, may be read back the second time.)
    assert first["compiled"] > 0
    assert any((cache_home / "tabascal" / "jax").iterdir())
    second = _run(small_store, config, tmp_path / "second", cache_home)
    assert second["cache"] == first["cache"]
    assert second["compiled"] == 0, second
    assert second["cache_hits"] >= first["compiled"]


@pytest.mark.slow
def test_no_compile_cache_compiles_without_writing_a_cache(small_store, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(TINY_FIT)
    cache_home = tmp_path / "xdg"
    compiled = _run(small_store, config, tmp_path / "out", cache_home, "--no-compile-cache")
    assert compiled["cache"] is None
    assert compiled["compiled"] > 0 and compiled["cache_hits"] == 0
    assert not cache_home.exists()


def test_an_unwritable_cache_folder_warns_once_and_leaves_the_cache_off(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(not_a_folder)
    done = subprocess.run(
        [sys.executable, "-c", "import jax, jax.numpy as jnp\n"
         "from tabascal.fitting.compile_cache import use_cache\n"
         "print(use_cache(), jax.config.jax_compilation_cache_dir, int(jnp.ones(2).sum()))"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None", "2"]
    assert done.stderr.count("running without a compilation cache") == 1, done.stderr
