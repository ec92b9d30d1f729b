"""The tiles of a tiled run fitted by Dask workers (config keys ``tiles.workers`` and
``tiles.scheduler``; ``tabascal run --workers N`` or ``--scheduler ADDRESS``).

Each tile is one Dask task: a worker process fits it into ``tiles/<name>/`` by the code that
fits tiles one after another (``tiled.fit_tile`` with the untiled ``job.run``), so that a
tile's results do not depend on the process that fits it. A task carries plain data: the
store's path, the observation's metadata as this process read it (its emitters already
replaced from the configuration's files, which the workers then need not read), the tile's
plan as a configuration with its settled sharding, the tile's ranges, and this process's jax
settings (``JaxSettings``), which the worker takes on, and checks its backend and devices
against, before it fits. The tiles are stitched here, once every one is done.

Dask because the field's pipelines run on it (dask-ms, QuartiCal): a cluster started for them,
on one machine or on a batch system with dask-jobqueue, runs tabascal's tiles too. It is an
optional extra, ``distributed``, imported here alone.

A worker that dies mid-tile has its tile rescheduled on another by the scheduler (up to its
``distributed.scheduler.allowed-failures`` times), and a tile that raises is tried again up to
``RETRIES`` times. Either way the tile's folder may hold what the failed attempt left: a
checkpoint, which the next attempt resumes from, or a fit begun before its first checkpoint,
which it clears and starts afresh (``tiled.fit_tile``), so that the tile ends as a fit that
was never interrupted. A tile that still fails does not stop the others: its error is raised
once they are done, before stitching, and ``--resume`` then fits only the tiles not finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from pathlib import Path

from tabascal import TabascalError
from tabascal.config import ConfigError
from tabascal.fitting import tiled
from tabascal.fitting.output_folder import SUMMARY
from tabascal.fitting.run_plan import RunPlan, Tiling
from tabascal.fitting.tiles import Tile
from tabascal.parallel import blockwise

logger = logging.getLogger(__name__)

EXTRA = 'pip install "tabascal[distributed]"'
#: Attempts after the first for a tile whose fit raises (a worker's death is the scheduler's
#: to retry): each resumes from the tile's checkpoint, so a retry costs at most the steps
#: since it.
RETRIES = 2


class TileWorkerError(TabascalError, RuntimeError):
    """A tile could not be fitted by the Dask workers (its workers died too often, or a
    worker's jax differs from this process's)."""


def _where(tiling: Tiling) -> str:
    """The flag or key that asked for workers, as the messages name it."""
    if tiling.workers is not None:
        return f"tiles.workers = {tiling.workers} (--workers)"
    return f"tiles.scheduler = {tiling.scheduler!r} (--scheduler)"


def _distributed(tiling: Tiling):
    """The ``distributed`` module, or a ConfigError naming the extra that installs it."""
    try:
        import distributed
    except ImportError as err:
        raise ConfigError(
            f"{_where(tiling)}: fitting tiles over Dask workers needs Dask distributed, which "
            f"is not installed ({err}); install it with {EXTRA}, or drop the option to fit the "
            "tiles one after another in this process"
        ) from err
    return distributed


def check(tiling: Tiling, n_tiles: int, source) -> None:
    """Refuse, before any work, workers that cannot be used: for a run of one tile, without
    the distributed extra, or for rows that are not a store's (``source``, a
    ``blockwise.RowSource``: an observation in memory, or a Measurement Set read whole, which
    the workers could not read)."""
    if not tiling.over_workers:
        return
    if n_tiles == 1:
        raise ConfigError(
            f"{_where(tiling)}: the run has one tile, which one process fits; set tiles.time "
            "or tiles.freq above 1 to fit tiles over workers, or drop the option"
        )
    _distributed(tiling)
    if not isinstance(source, blockwise.StoreRows):
        raise ConfigError(
            f"{_where(tiling)}: the workers read the observation from a store, and this one "
            f"is held in memory ({type(source).__name__}); write it to a store "
            "(tabascal.store.write_observation, or tabascal import-ms for a Measurement Set) "
            "and fit that (--data STORE, or blockwise.StoreRows)"
        )


@dataclasses.dataclass(frozen=True)
class JaxSettings:
    """The jax settings a tile's fit depends on, as the process that plans the run has them.

    x64: jax's 64-bit mode; matmul_precision: ``jax_default_matmul_precision`` (None: jax's
    default); platform, n_devices: the backend and the count of its devices a tile is fitted
    on; cache_dir: the persistent compilation cache's folder (None: no cache), with its
    thresholds cache_min_compile_s and cache_min_entry_bytes, so that a worker reads back the
    programs this process or another worker compiled.
    """

    x64: bool
    matmul_precision: str | None
    platform: str
    n_devices: int
    cache_dir: str | None
    cache_min_compile_s: float
    cache_min_entry_bytes: int

    @classmethod
    def here(cls) -> JaxSettings:
        import jax

        cache = jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir
        return cls(
            x64=bool(jax.config.jax_enable_x64),
            matmul_precision=jax.config.jax_default_matmul_precision,
            platform=jax.default_backend(),
            n_devices=jax.device_count(),
            cache_dir=str(cache) if cache else None,
            cache_min_compile_s=jax.config.jax_persistent_cache_min_compile_time_secs,
            cache_min_entry_bytes=jax.config.jax_persistent_cache_min_entry_size_bytes,
        )

    @contextlib.contextmanager
    def taken_on(self, tile: Tile):
        """On a worker: take on these settings for the fit of ``tile`` (x64 and the matmul
        precision scoped to the block, the device count and the cache before jax's backend
        and first compilation); refuse a worker whose backend or device count still differs,
        whose fit would differ from this process's."""
        import jax

        if self.cache_dir and not jax.config.jax_compilation_cache_dir:
            jax.config.update("jax_compilation_cache_dir", self.cache_dir)
            jax.config.update(
                "jax_persistent_cache_min_compile_time_secs", self.cache_min_compile_s
            )
            jax.config.update(
                "jax_persistent_cache_min_entry_size_bytes", self.cache_min_entry_bytes
            )
        if self.platform == "cpu":
            # Too late once the worker's backend has started: then it is checked below.
            with contextlib.suppress(RuntimeError):
                jax.config.update("jax_num_cpu_devices", self.n_devices)
        found = (jax.default_backend(), jax.device_count())
        if found != (self.platform, self.n_devices):
            raise TileWorkerError(
                f"tile {tile.name}: this worker's jax runs on {found[1]} {found[0]} device(s), "
                f"the run was planned on {self.n_devices} {self.platform} device(s), and a "
                "tile's fit depends on its devices; start the workers with the devices of the "
                "process running tabascal run (the same JAX_PLATFORMS, CUDA_VISIBLE_DEVICES "
                "and XLA_FLAGS), or run tabascal run where the workers' devices are"
            )
        with (
            jax.enable_x64(self.x64),
            jax.default_matmul_precision(self.matmul_precision),
        ):
            yield


def fit_tile(
    store: str,
    allow_missing: bool,
    meta,
    config: dict,
    sharding: dict,
    tile: Tile,
    n_tiles: int,
    tiles_dir: str,
    settings: JaxSettings,
) -> dict:
    """One task, run on a worker: fit ``tile`` of the observation in ``store`` (its metadata
    ``meta``, its missing chunks flagged with ``allow_missing``) into ``tiles_dir/<name>`` with
    the tile's plan (``config``, a ``RunPlan.as_config``, and ``sharding``, its settled
    ``Sharding`` as a dict) under ``settings``; return the tile's summary."""
    from tabascal.fitting import job, run_config, tiled
    from tabascal.fitting.run_plan import plan_run

    plan = plan_run(
        run_config.load(config),
        shard_axis=sharding["axis"],
        reuse_plan=sharding["reuse_plan"],
        row_blocks=sharding["row_blocks"],
    )
    source = blockwise.StoreRows(Path(store), meta, allow_missing=allow_missing)
    with settings.taken_on(tile):
        return tiled.fit_tile(job.run, source, Path(tiles_dir), plan, tile, n_tiles)


@contextlib.contextmanager
def _client(tiling: Tiling):
    """A Dask client of ``tiling.workers`` local worker processes of one thread each (closed
    with the block), or of the running scheduler at ``tiling.scheduler``."""
    distributed = _distributed(tiling)
    if tiling.scheduler is not None:
        with distributed.Client(tiling.scheduler) as client:
            yield client
        return
    # No dashboard: its port could clash with another run's; a cluster of one's own, started
    # with one, is used through --scheduler.
    with (
        distributed.LocalCluster(
            n_workers=tiling.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def fit_tiles(
    source: blockwise.StoreRows,
    tiles_dir: Path,
    plan: RunPlan,
    grid: list[Tile],
    tiling: Tiling,
    *,
    resume: bool,
) -> list[tuple[Tile, dict, bool]]:
    """Fit the tiles ``grid`` of the store ``source`` over the Dask workers ``tiling`` names,
    a tile a task, each with ``plan`` (a tile's) into ``tiles_dir/<name>``; with ``resume``, a
    tile whose summary.json exists is left as it is. Return (tile, its summary, whether it
    was fitted now) for each tile, in the grid's order."""
    finished = {}
    for tile in grid:
        summary = tiled.finished_tile(tiles_dir, tile, len(grid)) if resume else None
        if summary is not None:
            finished[tile.index] = (tile, summary, False)
    todo = [tile for tile in grid if tile.index not in finished]
    if not todo:
        return [finished[tile.index] for tile in grid]
    config = plan.as_config()
    sharding = dataclasses.asdict(plan.sharding)
    settings = JaxSettings.here()
    store = str(Path(source.path).resolve())
    run = uuid.uuid4().hex[:8]
    with _client(tiling) as client:
        distributed = _distributed(tiling)
        futures = {
            client.submit(
                fit_tile,
                store,
                source.allow_missing,
                source.meta,
                config,
                sharding,
                tile,
                len(grid),
                str(Path(tiles_dir).resolve()),
                settings,
                key=f"tabascal-tile-{tile.name}-{run}",
                retries=RETRIES,
                pure=False,
            ): tile
            for tile in todo
        }
        logger.info("%d tiles submitted to %s", len(todo), client.scheduler.address)
        failed = {}
        try:
            for future in distributed.as_completed(futures):
                tile = futures[future]
                try:
                    finished[tile.index] = (tile, _result(future, tile, tiles_dir), True)
                except Exception as err:
                    # The other tiles are fitted on, so that --resume fits only the failed.
                    logger.error("tile %s: failed: %s", tile.name, err)
                    failed[tile.name] = err
                    continue
                logger.info("tile %s: fitted (%d of %d)", tile.name, len(finished), len(grid))
        finally:
            client.cancel(list(futures))
    _raise_failed(failed, tiles_dir)
    return [finished[tile.index] for tile in grid]


def _raise_failed(failed: dict[str, Exception], tiles_dir: Path) -> None:
    """Raise the error of the one failed tile as it is, or a TileWorkerError naming each of
    several; nothing where none failed."""
    if len(failed) == 1:
        raise next(iter(failed.values()))
    if failed:
        first, err = next(iter(failed.items()))
        raise TileWorkerError(
            f"tiles {', '.join(failed)} failed (the others are finished in {tiles_dir}); "
            f"{first}: {err}; see the log for the others' errors, then run again with "
            "--resume, which fits only the tiles not finished"
        ) from err


def _result(future, tile: Tile, tiles_dir: Path) -> dict:
    """The tile's summary from its finished ``future``; a tile whose workers kept dying is a
    TileWorkerError that says how to go on."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as err:
        raise TileWorkerError(
            f"tile {tile.name}: its worker died each time it was fitted ({err}); look in the "
            "workers' logs for why (often memory: fewer workers, or tiles.time and tiles.freq "
            "higher, give each tile more of it), then run again with --resume, which keeps "
            f"the tiles finished in {tiles_dir} (each with its {SUMMARY}) and resumes this one "
            "from its checkpoint"
        ) from err
