"""Interruptions, a second run into a folder in use, read-only folders and a full disk.

A killed ``tabascal simulate`` or ``tabascal run`` leaves each output whole or absent, and the
same command (or ``--resume``) run again succeeds. The kills are exact: the command runs in a
subprocess with ``TABASCAL_KILL_AT=POINT:N``, which makes it SIGKILL itself the N-th time it
reaches POINT (``tabascal.store.writer.kill_point``). benchmarks/kill_loop.py kills the same
commands at random times instead.

The store is the one of test_store_faults.py: 15 baselines in chunks of 4 rows (4 blocks), 2
channels, 3 integrations, per-baseline noise; the fit takes 6 steps, a checkpoint every 2.
"""

import dataclasses
import errno
import json
import os
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
import zarr

from tabascal.cli import main
from tabascal.config import dump_yaml
from tabascal.fitting import job
from tabascal.simulate import simulate, simulation, simulation_config
from tabascal.store import (
    ObservationWriter,
    StoreError,
    read_observation,
    verify_store,
    write_observation,
)
from tabascal.store.writer import KILL_AT_ENV, temporary_sibling

TINY = {
    "array": {"n_stations": 6},
    "observation": {"n_time": 3, "n_freq": 2, "flag_fraction": 0.1, "sefd_spread": 0.2},
    "sky": {"n_sources": 2},
    "simulation": {"chunk_rows": 4},
}
FIT = {
    "fit": {"steps": 6, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 2},
    "output": {"plots": False},
}
CLEAN_OUTPUT = ["checkpoints", "config.yaml", "results.zarr", "summary.json"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The simulation's and the fit's YAML files, and the store they simulate (seed 7)."""
    folder = tmp_path_factory.mktemp("faults_interrupt")
    (folder / "tiny.yaml").write_text(dump_yaml(TINY))
    (folder / "fit.yaml").write_text(dump_yaml(FIT))
    simulate(simulation_config("demo", TINY, seed=7), folder / "intact.zarr")
    return folder


def _simulate_args(files, output, seed=7, *extra):
    return ["simulate", "--preset", "demo", "-c", str(files / "tiny.yaml"), "--seed", str(seed),
            "-o", str(output), "-q", *extra]  # fmt: skip


def _run_args(files, output, *extra):
    return ["run", "-c", str(files / "fit.yaml"), "--data", str(files / "intact.zarr"),
            "-o", str(output), "-q", *extra]  # fmt: skip


def _killed(args, point: str) -> subprocess.CompletedProcess:
    """``tabascal ARGS`` in a subprocess that kills itself at ``point``; it must have died so."""
    env = dict(os.environ, **{KILL_AT_ENV: point})
    # The session's compilation cache spares each subprocess the compilation of the fit.
    env["JAX_COMPILATION_CACHE_DIR"] = str(jax.config.jax_compilation_cache_dir)
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    done = subprocess.run(
        [sys.executable, "-m", "tabascal", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done


def _siblings(path) -> list[str]:
    """The hidden names beside a store: what its writers keep there while they work."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


def test_simulate_killed_mid_write_leaves_no_store_and_the_rerun_clears_what_it_left(
    files, tmp_path, caplog
):
    path = tmp_path / "obs.zarr"
    _killed(_simulate_args(files, path), "store-rows:2")  # 2 of 4 blocks written
    assert not path.exists()
    left = _siblings(path)
    assert [name.split("-")[0] for name in left] == [".obs.zarr.partial", ".obs.zarr.scratch"]
    # A live writer's temporary folder (this process's) is never taken for a leftover.
    live = temporary_sibling(path, "partial")
    live.mkdir()
    assert main(_simulate_args(files, path)) == 0
    assert _siblings(path) == [live.name]
    assert caplog.text.count("left by an interrupted write") == 2
    assert verify_store(path).damage == ()
    np.testing.assert_array_equal(
        read_observation(path).vis, read_observation(files / "intact.zarr").vis
    )


def test_simulate_killed_while_replacing_a_store_puts_the_old_one_back(files, tmp_path, capsys):
    path = tmp_path / "obs.zarr"
    shutil.copytree(files / "intact.zarr", path)
    _killed(_simulate_args(files, path, 8, "--overwrite"), "store-replace")
    assert not path.exists()  # the old store moved aside, the new one not yet in place
    assert any(name.startswith(".obs.zarr.replaced-") for name in _siblings(path))
    # Run again without --overwrite: the old store (seed 7) is back, and is not replaced.
    assert main(_simulate_args(files, path, 8)) == 2
    assert "already exists" in capsys.readouterr().err
    intact = read_observation(files / "intact.zarr").vis
    np.testing.assert_array_equal(read_observation(path).vis, intact)
    assert _siblings(path) == []
    assert main(_simulate_args(files, path, 8, "--overwrite")) == 0
    assert not np.array_equal(read_observation(path).vis, intact)
    assert _siblings(path) == []


def test_a_store_written_meanwhile_under_the_same_name_is_never_replaced(files, tmp_path):
    obs = read_observation(files / "intact.zarr")
    path = tmp_path / "obs.zarr"
    other = dataclasses.replace(obs, vis=obs.vis * 2)
    with pytest.raises(FileExistsError, match="appeared while this store was being written"):
        with ObservationWriter(path, obs.meta, chunk_rows=4) as writer:
            writer.write_rows(0, vis=obs.vis, flags=obs.flags, noise=obs.noise)
            write_observation(path, other)  # another writer of the same name finishes first
    np.testing.assert_array_equal(read_observation(path).vis, other.vis)
    assert _siblings(path) == []


def _checkpoint_steps(out) -> int:
    with np.load(out / "checkpoints" / "checkpoint.npz") as saved:
        assert int(saved["leaf_names"].size) > 0
        return int(saved["history_loss"].size)


@pytest.mark.slow
def test_run_killed_while_checkpointing_keeps_the_previous_checkpoint_and_resumes(
    files, tmp_path, capsys
):
    out = tmp_path / "out"
    _killed(_run_args(files, out), "checkpoint:2")  # the step-4 checkpoint written, not renamed
    assert _checkpoint_steps(out) == 2
    assert not (out / "results.zarr").exists() and not (out / "summary.json").exists()
    # The same command again is refused, saying what there is to resume.
    assert main(_run_args(files, out)) == 2
    err = capsys.readouterr().err
    assert "interrupted after step 2" in err and "--resume" in err, err
    assert main(_run_args(files, out, "--resume")) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    assert sorted(os.listdir(out)) == CLEAN_OUTPUT
    assert os.listdir(out / "checkpoints") == ["checkpoint.npz"]


@pytest.mark.slow
def test_run_killed_while_writing_results_leaves_none_and_resume_writes_them(files, tmp_path):
    out = tmp_path / "out"
    _killed(_run_args(files, out), "results-block:1")
    assert (out / ".results.zarr.partial").is_dir()
    assert not (out / "results.zarr").exists() and not (out / "summary.json").exists()
    assert _checkpoint_steps(out) == 6
    assert main(_run_args(files, out, "--resume")) == 0
    results = zarr.open_group(str(out / "results.zarr"), mode="r")
    assert results["model_vis"][...].shape == (15, 2, 3)
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    assert sorted(os.listdir(out)) == CLEAN_OUTPUT


@pytest.mark.slow
def test_run_killed_before_its_first_checkpoint_is_run_again_afresh(files, tmp_path, caplog):
    out = tmp_path / "out"
    _killed(_run_args(files, out), "checkpoint:1")
    assert sorted(os.listdir(out)) == [".tabascal.lock", "checkpoints", "config.yaml"]
    assert main(_run_args(files, out)) == 0
    assert "interrupted before its first checkpoint" in caplog.text
    assert "taking over its lock" in caplog.text
    assert sorted(os.listdir(out)) == CLEAN_OUTPUT


HOLD_LOCK = (
    "import sys, time; from tabascal.fitting import job; "
    "lock = job.OutputLock.take(sys.argv[1]); print('held', flush=True); time.sleep(120)"
)


@pytest.mark.slow
def test_a_second_run_into_a_folder_in_use_is_refused_and_a_killed_holder_is_taken_over(
    files, tmp_path, capsys, caplog
):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(_run_args(files, out)) == 2
        err = capsys.readouterr().err
        assert f"{out} is in use by another run (process {holder.pid} on " in err, err
        assert json.loads((out / ".tabascal.lock").read_text())["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    with job.prepare_output(out, resume=False, overwrite=False) as lock:
        assert lock.previous["pid"] == holder.pid
        assert json.loads((out / ".tabascal.lock").read_text())["pid"] == os.getpid()
    assert f"did not finish (process {holder.pid} on " in caplog.text
    assert os.listdir(out) == []


def _writable(folder) -> bool:
    try:
        (folder / "probe").mkdir()
    except OSError:
        return False
    (folder / "probe").rmdir()
    return True


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nothing can be created in: mode 555, and immutable where that does not stop
    the user (root)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = _writable(folder)
    if immutable:
        subprocess.run(["chattr", "+i", str(folder)], check=False, capture_output=True)
    try:
        if _writable(folder):
            pytest.fail(f"{folder} stays writable after chmod 555 and chattr +i")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)
        folder.chmod(0o755)


def test_simulate_and_run_into_a_read_only_folder_fail_before_any_work_naming_it(
    files, read_only_folder, monkeypatch, capsys
):
    started = []
    monkeypatch.setattr(simulation, "_pass_one", lambda *args: started.append("simulation"))
    monkeypatch.setattr(job, "placed_model", lambda *args: started.append("fit"))
    with pytest.raises(StoreError, match=f"into {read_only_folder}: .*choose an output"):
        simulate(simulation_config("demo", TINY, seed=7), read_only_folder / "obs.zarr")
    assert main(_run_args(files, read_only_folder / "out")) == 2
    err = capsys.readouterr().err
    assert f"cannot write into the output folder {read_only_folder / 'out'}: " in err, err
    assert started == []


def test_a_full_disk_leaves_no_store_and_says_no_space_is_left(
    files, tmp_path, monkeypatch, capsys
):
    """The disk fills up as the second vis chunk is written."""
    local = zarr.storage._local
    put, written = local._put, []

    def full_disk(path, value, *args, **kwargs):
        if "/vis/c/" in path.as_posix():  # a chunk of vis (not of truth/sky_vis)
            written.append(path)
            if len(written) > 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return put(path, value, *args, **kwargs)

    monkeypatch.setattr(local, "_put", full_disk)
    path = tmp_path / "obs.zarr"
    assert main(_simulate_args(files, path)) == 2
    err = capsys.readouterr().err
    assert f"{path}: no space left on device in {tmp_path}" in err, err
    assert len(written) == 2 and not path.exists() and _siblings(path) == []


def test_a_full_disk_during_a_fit_says_no_space_is_left(files, tmp_path, monkeypatch, capsys):
    def full_disk(file, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", full_disk)  # the first checkpoint
    out = tmp_path / "out"
    assert main(_run_args(files, out)) == 2
    err = capsys.readouterr().err
    assert f"{out}: no space left on device while writing the run's outputs" in err, err
    assert not (out / "checkpoints" / "checkpoint.npz").exists()
