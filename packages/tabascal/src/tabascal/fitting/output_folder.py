"""The output folder of ``tabascal run``: its lock, and outputs that appear whole or not at all.

One run at a time writes into a folder: it holds the folder's lock (``OutputLock``,
``.tabascal.lock``, taken with ``flock`` by process 0) from start to end. Every output is
written under a hidden temporary name and renamed into place (``replacing``,
``write_atomically``), so a run killed at any moment never leaves a half-written output under a
final name. ``prepare_output`` takes the lock and readies the folder for a new, resumed or
overwriting run, clearing what a killed run left (see docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tabascal import TabascalError
from tabascal.config import ConfigError
from tabascal.fitting.checkpoint import CHECKPOINT_NAME
from tabascal.store.writer import kill_point, why_unwritable

logger = logging.getLogger(__name__)

RESULTS = "results.zarr"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
TILES = "tiles"  # a tiled run's folder of tiles, each a run's output folder of its own
LOCK = ".tabascal.lock"
# In the order they are removed: summary.json first (it says the others are there and whole),
# then the checkpoint and the tiles (what --resume would continue), so that a kill meanwhile
# leaves neither a summary of missing outputs nor an old fit to resume.
OUTPUT_NAMES = (
    SUMMARY, CHECKPOINTS, TILES, RESULTS, "config.yaml", "loss.png", "baselines.png",
)  # fmt: skip
# flock's answers on a file system that keeps no locks (some network file systems).
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class OutputExistsError(TabascalError, FileExistsError):
    """The output folder holds earlier results and neither resume nor overwrite was asked."""


class NoCheckpointError(TabascalError, FileNotFoundError):
    """--resume was asked, but the output folder holds no checkpoint to resume from."""


class OutputInUseError(TabascalError, RuntimeError):
    """Another run is writing into the output folder (it holds the folder's lock)."""


class OutputError(TabascalError, OSError):
    """The output folder cannot be written: read-only, forbidden, or its disk is full."""


def _holder_text(holder: dict) -> str:
    return (
        f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
        f"{holder.get('started_utc', '?')}: {holder.get('command', '?')}"
    )


def _read_holder(fd: int) -> dict | None:
    """What a lock file says of its holder; None when it is empty."""
    text = os.pread(fd, 65536, 0).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        return dict(json.loads(text))
    except (ValueError, TypeError):
        return {"command": text[:200]}


class OutputLock:
    """The lock of an output folder, held by the run writing into it (process 0 of a
    multi-process run) from its start to its end.

    ``OUT/.tabascal.lock`` says who holds it (pid, host, start time, command); the lock
    itself is the kernel's (``fcntl.flock``), which ends with the process however the process
    ends, so a killed run never blocks the next one. ``previous``: what the file said when it
    was taken over from a run that ended without releasing it (a killed run), else None. Use
    as a context manager, or ``release()``.
    """

    def __init__(self, out_dir: Path, fd: int, previous: dict | None):
        self.path = Path(out_dir) / LOCK
        self.previous = previous
        self._fd = fd

    @classmethod
    def take(cls, out_dir: Path) -> OutputLock:
        """Take ``out_dir``'s lock, or raise ``OutputInUseError`` naming the run holding it."""
        path = Path(out_dir) / LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd) or {}
                os.close(fd)
                raise OutputInUseError(
                    f"{out_dir} is in use by another run ({_holder_text(holder)}); wait for it "
                    "to finish, or write to another output folder"
                ) from None
            except OSError as err:
                if err.errno not in _NO_LOCKS:
                    os.close(fd)
                    raise
                logger.warning(
                    "%s: the file system keeps no locks (%s); a second run into this folder "
                    "at the same time would not be refused",
                    out_dir,
                    err,
                )
            # A holder that ended between our open and our flock unlinked the file we opened.
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        previous = _read_holder(fd)
        if previous is not None:
            logger.warning(
                "%s: an earlier run into this folder did not finish (%s); taking over its lock",
                out_dir,
                _holder_text(previous),
            )
        mine = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(mine) + "\n").encode(), 0)
        return cls(out_dir, fd, previous)

    def release(self) -> None:
        """Remove the lock file, then let the lock go (in this order, so that a run waiting
        on the old file sees it was removed and takes a fresh one)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def give_back(self) -> None:
        """Let the lock go leaving the file as the run it was taken over from left it, so
        that the next run still sees that an interrupted run was there."""
        if self.previous is None:
            self.release()
            return
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (json.dumps(self.previous) + "\n").encode(), 0)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _partial(path: Path) -> Path:
    """The hidden name ``path`` is written under before it is renamed into place (a plot keeps
    its extension: matplotlib picks the format from it)."""
    if path.suffix == ".png":
        return path.with_name(f".{path.stem}.partial.png")
    return path.with_name(f".{path.name}.partial")


def _old(path: Path) -> Path:
    """The hidden name an output is moved to before it is removed."""
    return path.with_name(f".{path.name}.old")


def _temporaries(out_dir: Path) -> list[Path]:
    """Every temporary name a run writes under in ``out_dir`` (``results.write_results`` and
    ``checkpoint.save_checkpoint`` use the same)."""
    outputs = [out_dir / name for name in OUTPUT_NAMES]
    checkpoint = out_dir / CHECKPOINTS / CHECKPOINT_NAME
    return [*map(_partial, outputs), *map(_old, outputs), _partial(checkpoint)]


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _remove_outputs(out_dir: Path) -> list[str]:
    """Remove the run's outputs from ``out_dir`` in the order of ``OUTPUT_NAMES``; each is
    renamed to a temporary name before it is removed, so that a kill meanwhile never leaves
    part of one under its own name."""
    removed = []
    for name in OUTPUT_NAMES:
        path = out_dir / name
        if path.exists():
            os.replace(path, _old(path))
            _remove(_old(path))
            removed.append(name)
    return removed


def _checkpoint_step(path: Path) -> int:
    with np.load(path) as saved:
        return int(saved["history_loss"].size)


def prepare_output(
    out_dir: Path, *, resume: bool, overwrite: bool, tiled: bool = False
) -> OutputLock:
    """Claim ``out_dir`` for a run and return its lock, held (the caller releases it).

    Creates the folder and takes its lock (``OutputLock``: another run writing there is
    refused), removes the temporary files of an interrupted run, and refuses a folder holding
    anything else unless resuming or overwriting (which replaces this command's outputs and
    nothing else). A run that was killed (its lock left behind) before its first checkpoint
    left nothing to resume: its outputs are removed, with a warning, and the run starts
    afresh; one that left a checkpoint is refused with the step to resume from. A folder that
    cannot be written is an ``OutputError`` naming it. ``tiled``: the run fits tiles, each in
    its own folder under ``tiles/``, and resumes from them rather than from a checkpoint of
    its own.
    """
    out_dir = Path(out_dir)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other; choose one")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir} exists and is not a folder")
    checkpoint = out_dir / CHECKPOINTS / CHECKPOINT_NAME
    if resume and tiled and not _tiles_begun(out_dir):
        raise NoCheckpointError(
            f"--resume: {out_dir / TILES} holds no tile to continue; run without --resume to "
            "start a new fit"
        )
    if resume and not tiled and not checkpoint.is_file():
        raise NoCheckpointError(
            f"--resume: {checkpoint} does not exist; run without --resume to start a new fit"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lock = OutputLock.take(out_dir)
    except OSError as err:
        if why_unwritable(err) is None:
            raise
        raise OutputError(
            f"cannot write into the output folder {out_dir}: {why_unwritable(err)} ({err}); "
            "choose another with -o"
        ) from err
    try:
        _clear_output(out_dir, resume, overwrite, lock.previous)
    except BaseException:
        lock.give_back()
        raise
    return lock


def _tiles_begun(out_dir: Path) -> bool:
    """Whether a tiled run into ``out_dir`` finished a tile or checkpointed one."""
    tiles = out_dir / TILES
    return tiles.is_dir() and any(
        (tile / SUMMARY).is_file() or (tile / CHECKPOINTS / CHECKPOINT_NAME).is_file()
        for tile in tiles.iterdir()
    )


def _clear_output(out_dir: Path, resume: bool, overwrite: bool, interrupted: dict | None):
    """``prepare_output`` once the lock is held; ``interrupted``: the killed holder before."""
    left = [path for path in _temporaries(out_dir) if path.exists()]
    for path in left:
        _remove(path)
    if left:
        names = ", ".join(str(path.relative_to(out_dir)) for path in left)
        logger.warning("%s: removed %s, left by an interrupted run", out_dir, names)
    entries = {path.name for path in out_dir.iterdir()} - {LOCK}
    if resume or not entries:
        return
    if overwrite:
        _remove_outputs(out_dir)
        return
    checkpoint = out_dir / CHECKPOINTS / CHECKPOINT_NAME
    finished = (out_dir / SUMMARY).exists()
    if interrupted is not None and not finished:
        if checkpoint.is_file():
            raise OutputExistsError(
                f"{out_dir} holds the checkpoint of a run that was interrupted after step "
                f"{_checkpoint_step(checkpoint)} ({_holder_text(interrupted)}); pass --resume "
                "to continue it, or --overwrite to start again"
            )
        if _tiles_begun(out_dir):
            raise OutputExistsError(
                f"{out_dir} holds the tiles of a run that was interrupted "
                f"({_holder_text(interrupted)}); pass --resume to continue it from its "
                "finished and checkpointed tiles, or --overwrite to start again"
            )
        if entries <= set(OUTPUT_NAMES):
            removed = _remove_outputs(out_dir)
            logger.warning(
                "%s: removed %s, left by a run that was interrupted before its first "
                "checkpoint (%s); starting afresh",
                out_dir,
                ", ".join(removed),
                _holder_text(interrupted),
            )
            return
    raise OutputExistsError(
        f"{out_dir} is not empty; pass --overwrite to replace its results or --resume "
        "to continue its fit"
    )


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """The temporary name to write ``path`` under, renamed into place after the block."""
    partial_path = _partial(path)
    yield partial_path
    kill_point("output-file")
    os.replace(partial_path, path)


def write_atomically(path: Path, text: str) -> None:
    with replacing(path) as partial_path, open(partial_path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
