"""Tiles fitted by Dask workers (tiles.workers, tiles.scheduler; --workers, --scheduler)
against tiles fitted one after another: the same results array for array, a worker killed
mid-tile, --resume, and the errors that refuse workers before any work."""

import dataclasses
import json
import sys

import dask
import distributed
import jax
import numpy as np
import pytest
import zarr

from tabascal.cli import main
from tabascal.config import ConfigError, dump_yaml
from tabascal.fitting import job, run_config, tile_workers, tiled
from tabascal.fitting.run_plan import plan_run
from tabascal.parallel.blockwise import StoreRows
from tabascal.store import read_meta, read_observation
from tabascal.store.writer import KILL_AT_ENV, KILL_MARKER_ENV

# test_tiles.py's gradient-only fit of two tiles in time, in fewer steps: 60 a tile, a
# checkpoint every 20.
FIT = {
    "fit": {"steps": 60, "second_phase_steps": 0, "polish_steps": 0, "checkpoint_every": 20},
    "output": {"plots": False},
}
TWO_IN_TIME = {"time": 2, "overlap_s": 4.0}
TILE_NAMES = ["0-t0_17-f0_2", "1-t13_30-f0_2"]
# What every results.zarr compared holds, at least.
ARRAYS = {"sky_vis", "rfi_vis", "model_vis", "residual", "flags", "gains", "noise"}


def _config(**tiles) -> dict:
    return run_config.load({**FIT, "tiles": {**TWO_IN_TIME, **tiles}})


def _rows(store) -> StoreRows:
    return StoreRows(store, read_meta(store))


def _assert_same_results(a, b) -> None:
    """Every array of results.zarr ``a`` equals ``b``'s bit for bit."""
    first, second = (zarr.open_group(str(path), mode="r") for path in (a, b))
    assert sorted(first.array_keys()) == sorted(second.array_keys())
    assert ARRAYS <= set(first.array_keys()), sorted(first.array_keys())
    for name in first.array_keys():
        np.testing.assert_array_equal(first[name][...], second[name][...], err_msg=f"{a}: {name}")


def _assert_same_tiles(a, b) -> None:
    """Each tile's results.zarr and the stitched results.zarr of the output folders ``a``
    and ``b`` equal bit for bit."""
    for name in TILE_NAMES:
        _assert_same_results(
            a / "tiles" / name / "results.zarr", b / "tiles" / name / "results.zarr"
        )
    _assert_same_results(a / "results.zarr", b / "results.zarr")


@pytest.fixture(scope="module")
def in_sequence(small_store, tmp_path_factory):
    """The two tiles fitted one after another in this process."""
    out = tmp_path_factory.mktemp("sequence") / "fit"
    job.run(_rows(small_store), out, _config(), progress=False)
    return out


@pytest.fixture(scope="module")
def over_workers(small_store, tmp_path_factory):
    """The two tiles fitted by two local Dask worker processes (tabascal run --workers 2)."""
    folder = tmp_path_factory.mktemp("workers")
    (folder / "fit.yaml").write_text(dump_yaml({**FIT, "tiles": TWO_IN_TIME}))
    out = folder / "fit"
    code = main(["run", "--data", str(small_store), "-o", str(out), "-q", "--workers", "2",
                 "-c", str(folder / "fit.yaml")])  # fmt: skip
    assert code == 0
    return out


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_tiles_over_two_workers_equal_tiles_in_sequence_bit_for_bit(in_sequence, over_workers):
    _assert_same_tiles(in_sequence, over_workers)
    summary = _summary(over_workers)
    assert [t["fitted"] for t in summary["tiles"]] == ["now", "now"]
    assert summary["steps"] == 120
    assert _summary(in_sequence)["chi2_final"] == summary["chi2_final"]


def test_a_tile_whose_worker_is_killed_is_fitted_again_and_ends_as_if_never_killed(
    in_sequence, small_store, tmp_path, monkeypatch
):
    """A worker SIGKILLs itself as it writes a tile's second checkpoint (step 40; the first,
    step 20, is in place); the scheduler gives the tile to a worker again, which resumes it
    from its checkpoint. Run through a cluster of the test's own (--scheduler), whose workers
    start with the kill's variables."""
    marker = tmp_path / "kill-once"
    marker.touch()
    monkeypatch.setenv(KILL_AT_ENV, "checkpoint:2")
    monkeypatch.setenv(KILL_MARKER_ENV, str(marker))
    out = tmp_path / "fit"
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        monkeypatch.delenv(KILL_AT_ENV)  # this process fits nothing; the workers have it
        config = _config(scheduler=cluster.scheduler_address)
        summary = job.run(_rows(small_store), out, config, progress=False)
    # The marker is removed by the process that killed itself, and by nothing else.
    assert not marker.exists()
    assert [t["fitted"] for t in summary["tiles"]] == ["now", "now"]
    _assert_same_tiles(in_sequence, out)


def test_a_tile_whose_worker_dies_for_good_fails_after_the_others_and_resume_ends_it(
    in_sequence, small_store, tmp_path, monkeypatch
):
    """With no second chance for a dying worker's tile (the scheduler's allowed-failures 0),
    the tile whose worker is killed fails the run, by name, once the other tile is finished;
    --resume then fits that tile alone, from its checkpoint, to the uninterrupted results."""
    marker = tmp_path / "kill-once"
    marker.touch()
    monkeypatch.setenv(KILL_AT_ENV, "checkpoint:2")
    monkeypatch.setenv(KILL_MARKER_ENV, str(marker))
    out = tmp_path / "fit"
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
    ):
        monkeypatch.delenv(KILL_AT_ENV)
        config = _config(scheduler=cluster.scheduler_address)
        with pytest.raises(tile_workers.TileWorkerError) as err:
            job.run(_rows(small_store), out, config, progress=False)
        assert not marker.exists()
        (killed,) = [
            name for name in TILE_NAMES if f"tile {name}: its worker died" in str(err.value)
        ]
        (other,) = set(TILE_NAMES) - {killed}
        assert "run again with --resume" in str(err.value)
        assert (out / "tiles" / other / "summary.json").is_file()
        assert (out / "tiles" / killed / "checkpoints" / "checkpoint.npz").is_file()
        assert not (out / "summary.json").exists()
        summary = job.run(_rows(small_store), out, config, resume=True, progress=False)
    assert {t["name"]: t["fitted"] for t in summary["tiles"]} == {killed: "now", other: "earlier"}
    _assert_same_tiles(in_sequence, out)


def test_resume_over_workers_keeps_the_finished_tiles(in_sequence, over_workers, small_store):
    """Every tile finished: --resume fits none (and starts no worker) and stitches again."""
    stamps = {
        name: (over_workers / "tiles" / name / "results.zarr").stat().st_mtime_ns
        for name in TILE_NAMES
    }
    summary = job.run(_rows(small_store), over_workers, _config(workers=2), resume=True,
                      progress=False)  # fmt: skip
    assert [t["fitted"] for t in summary["tiles"]] == ["earlier", "earlier"]
    assert {
        name: (over_workers / "tiles" / name / "results.zarr").stat().st_mtime_ns
        for name in TILE_NAMES
    } == stamps
    _assert_same_tiles(in_sequence, over_workers)


def test_a_tile_plan_passed_to_a_worker_as_a_config_is_the_same_plan(small_store):
    plan = plan_run(_config(workers=2), shard_axis="none")
    grid = plan.tiles.grid(read_meta(small_store))
    tile_plan = dataclasses.replace(plan, tiles=tiled.ONE_TILE)
    again = plan_run(
        run_config.load(tile_plan.as_config()),
        shard_axis=tile_plan.sharding.axis,
        reuse_plan=tile_plan.sharding.reuse_plan,
        row_blocks=tile_plan.sharding.row_blocks,
    )
    assert again == tile_plan and len(grid) == 2


# --- errors, before any work ---------------------------------------------------------------


def _run_cli(capsys, store, out, *flags) -> str:
    code = main(["run", "--data", str(store), "-o", str(out), "-q", *flags])
    assert code == 2
    return capsys.readouterr().err


def test_workers_and_scheduler_together_are_refused(small_store, tmp_path, capsys):
    err = _run_cli(capsys, small_store, tmp_path / "out", "--workers", "2", "--scheduler",
                   "tcp://localhost:8786")  # fmt: skip
    assert (
        "--workers = 2 and --scheduler = 'tcp://localhost:8786' both say where the tiles are "
        "fitted: give --workers to start local workers, or --scheduler to use a running "
        "cluster's, not both" in err
    )
    with pytest.raises(ConfigError, match=r"'tiles.workers' = 2 and config key 'tiles.sched"):
        plan_run(_config(workers=2, scheduler="tcp://localhost:8786"))
    assert not (tmp_path / "out").exists()


def test_workers_for_a_run_of_one_tile_are_refused(small_store, tmp_path, capsys):
    err = _run_cli(capsys, small_store, tmp_path / "out", "--workers", "2")
    assert (
        "tiles.workers = 2 (--workers): the run has one tile, which one process fits; set "
        "tiles.time or tiles.freq above 1 to fit tiles over workers, or drop the option" in err
    )
    config = run_config.load({**FIT, "tiles": {"scheduler": "tcp://localhost:8786"}})
    with pytest.raises(ConfigError, match=r"tiles.scheduler = 'tcp://localhost:8786' \(--sch"):
        job.run(_rows(small_store), tmp_path / "out", config, progress=False)
    assert not (tmp_path / "out").exists()


def test_workers_without_the_distributed_extra_are_refused(small_store, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # its import now fails
    with pytest.raises(ConfigError) as err:
        job.run(_rows(small_store), tmp_path / "out", _config(workers=2), progress=False)
    assert "needs Dask distributed, which is not installed" in str(err.value)
    assert 'install it with pip install "tabascal[distributed]"' in str(err.value)
    assert not (tmp_path / "out").exists()


def test_workers_for_an_observation_in_memory_are_refused(small_store, tmp_path):
    with pytest.raises(ConfigError, match=r"held in memory \(MemoryRows\); write it to a store"):
        job.run(read_observation(small_store), tmp_path / "out", _config(workers=2),
                progress=False)  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_a_worker_takes_on_the_planning_process_x64_mode_and_precision_for_the_fit(small_store):
    tile = plan_run(_config()).tiles.grid(read_meta(small_store))[0]
    with jax.enable_x64(True), jax.default_matmul_precision("highest"):
        settings = tile_workers.JaxSettings.here()
    assert settings.x64 and settings.matmul_precision == "highest"
    with settings.taken_on(tile):
        assert jax.config.jax_enable_x64
        assert jax.config.jax_default_matmul_precision == "highest"
        assert jax.numpy.zeros(1).dtype == np.float64
    assert not jax.config.jax_enable_x64
    assert jax.config.jax_default_matmul_precision is None


def test_a_worker_on_other_devices_is_refused(small_store):
    here = tile_workers.JaxSettings.here()
    elsewhere = dataclasses.replace(here, n_devices=here.n_devices + 3)
    tile = plan_run(_config()).tiles.grid(read_meta(small_store))[0]
    with pytest.raises(tile_workers.TileWorkerError) as err, elsewhere.taken_on(tile):
        pass
    planned = f"the run was planned on {here.n_devices + 3} {here.platform} device(s)"
    assert planned in str(err.value)
    assert "start the workers with the devices of the process running tabascal run" in str(
        err.value
    )
