"""One fit over several processes: one per host, or one per GPU.

Every process runs the same command. ``launch_from`` works out how many processes there are and
which one this is (explicit flags, a torchrun-style launcher, SLURM or Open MPI);
``initialize`` starts jax's distributed runtime, which must happen before jax does anything
else; ``stage`` makes a failure in any one process stop every process with a message that names
it, instead of leaving the others waiting in a collective. Process 0 alone writes outputs and
prints (``is_writer``); ``host_rows`` brings a block of rows of a baseline-sharded array to
every process so that process 0 can write it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from tabascal import TabascalError

logger = logging.getLogger(__name__)

#: Bytes of a failure message carried to the other processes (longer ones are cut).
MESSAGE_BYTES = 1024


class LaunchError(TabascalError, ValueError):
    """The process count, this process's index or the coordinator address is missing or wrong."""


class PeerFailure(TabascalError, RuntimeError):
    """Another process failed; this one stops too rather than wait for it."""


@dataclass(frozen=True)
class Launch:
    """How this process fits into a multi-process run.

    coordinator: "host:port" of process 0's coordination service; None lets jax find it itself
    (SLURM and Open MPI). source: where the figures came from, for messages.
    """

    num_processes: int
    process_id: int
    coordinator: str | None
    source: str


def _integer(env: Mapping[str, str], name: str) -> int:
    text = env[name]
    try:
        return int(text)
    except ValueError:
        raise LaunchError(f"${name}={text!r} is not an integer") from None


def _checked(launch: Launch) -> Launch:
    if launch.num_processes < 1:
        raise LaunchError(f"{launch.source}: the process count {launch.num_processes} is not >= 1")
    if not 0 <= launch.process_id < launch.num_processes:
        raise LaunchError(
            f"{launch.source}: process id {launch.process_id} is outside 0..."
            f"{launch.num_processes - 1}"
        )
    if launch.coordinator is not None and not re.fullmatch(r"[^\s:]+:\d{1,5}", launch.coordinator):
        raise LaunchError(
            f"{launch.source}: coordinator {launch.coordinator!r} is not HOST:PORT "
            "(e.g. 10.0.0.1:12355)"
        )
    return launch


def launch_from(
    env: Mapping[str, str] | None = None,
    *,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> Launch | None:
    """The launch described by explicit values or, failing those, by the launcher's variables.

    In order: the three explicit values (all or none); torchrun-style ``MASTER_ADDR``,
    ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``; SLURM (``SLURM_NTASKS``, ``SLURM_PROCID``);
    Open MPI (``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK``). None for a single process.
    """
    env = os.environ if env is None else env
    explicit = {
        "--coordinator": coordinator,
        "--num-processes": num_processes,
        "--process-id": process_id,
    }
    given = [name for name, value in explicit.items() if value is not None]
    if given:
        missing = [name for name, value in explicit.items() if value is None]
        if missing:
            raise LaunchError(
                f"{', '.join(given)} given without {', '.join(missing)}: a multi-process run "
                "needs all three (or none, to take them from the launcher)"
            )
        launch = Launch(num_processes, process_id, coordinator, "command line")
    elif "WORLD_SIZE" in env:
        needed = ("MASTER_ADDR", "MASTER_PORT", "RANK")
        missing = [f"${name}" for name in needed if name not in env]
        if missing:
            raise LaunchError(f"$WORLD_SIZE is set but {', '.join(missing)} are not")
        launch = Launch(
            _integer(env, "WORLD_SIZE"),
            _integer(env, "RANK"),
            f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
            "torchrun-style variables",
        )
    elif "SLURM_NTASKS" in env and "SLURM_PROCID" in env:
        launch = Launch(_integer(env, "SLURM_NTASKS"), _integer(env, "SLURM_PROCID"), None, "SLURM")
    elif "OMPI_COMM_WORLD_SIZE" in env and "OMPI_COMM_WORLD_RANK" in env:
        launch = Launch(
            _integer(env, "OMPI_COMM_WORLD_SIZE"),
            _integer(env, "OMPI_COMM_WORLD_RANK"),
            None,
            "Open MPI",
        )
    else:
        return None
    launch = _checked(launch)
    return launch if launch.num_processes > 1 else None


def initialize(launch: Launch | None, *, timeout_s: int = 300, heartbeat_s: int = 60) -> None:
    """Start jax's distributed runtime for ``launch`` (nothing for a single process).

    Call before any other use of jax. A process that dies is noticed by the others within
    ``heartbeat_s`` seconds, and they stop.
    """
    if launch is None:
        return
    import jax

    logger.info(
        "process %d of %d (%s), coordinator %s",
        launch.process_id,
        launch.num_processes,
        launch.source,
        launch.coordinator or "detected",
    )
    try:
        jax.distributed.initialize(
            coordinator_address=launch.coordinator,
            num_processes=launch.num_processes,
            process_id=launch.process_id,
            initialization_timeout=timeout_s,
            heartbeat_timeout_seconds=heartbeat_s,
        )
    except RuntimeError as err:
        raise LaunchError(
            f"process {launch.process_id} of {launch.num_processes} could not join the run "
            f"(coordinator {launch.coordinator or 'detected by jax'}): {err}"
        ) from err


def process_count() -> int:
    import jax

    return jax.process_count()


def is_writer() -> bool:
    """True in the process that writes outputs and prints: process 0 (or the only one)."""
    import jax

    return jax.process_index() == 0


def _encode(message: str) -> np.ndarray:
    raw = message.encode("utf-8", "replace")[:MESSAGE_BYTES]
    out = np.zeros(MESSAGE_BYTES + 1, np.uint8)
    out[0] = 1
    out[1 : 1 + len(raw)] = np.frombuffer(raw, np.uint8)
    return out


def _decode(row: np.ndarray) -> str:
    return bytes(row[1:]).rstrip(b"\0").decode("utf-8", "replace")


def gather_exact(values: np.ndarray) -> np.ndarray:
    """``values`` of every process, stacked on a new leading axis (n_processes, ...), bit for
    bit: sent as bytes, so no dtype is narrowed on the way (jax's default is 32 bits)."""
    import jax

    values = np.ascontiguousarray(values)
    if jax.process_count() == 1:
        return values[None]
    from jax.experimental import multihost_utils

    raw = np.frombuffer(values.tobytes(), np.uint8)
    rows = np.asarray(multihost_utils.process_allgather(raw))
    return np.stack(
        [np.frombuffer(row.tobytes(), values.dtype).reshape(values.shape) for row in rows]
    )


def agree(error: BaseException | None, what: str) -> None:
    """Every process reports whether ``what`` succeeded; if any failed, every process raises.

    The failing process re-raises its own error; the others raise ``PeerFailure`` naming the
    first failed process and its message. With one process, ``error`` is simply re-raised.
    """
    import jax

    if jax.process_count() == 1:
        if error is not None:
            raise error
        return
    from jax.experimental import multihost_utils

    local = np.zeros(MESSAGE_BYTES + 1, np.uint8)
    if error is not None:
        local = _encode(f"{type(error).__name__}: {error}")
    rows = np.asarray(multihost_utils.process_allgather(local))
    failed = np.flatnonzero(rows[:, 0])
    if error is not None:
        raise error
    if failed.size:
        first = int(failed[0])
        raise PeerFailure(
            f"{what} failed in process {first} of {rows.shape[0]} ({_decode(rows[first])}); "
            f"process {jax.process_index()} stops too"
        )


@contextlib.contextmanager
def stage(what: str) -> Iterator[None]:
    """Run the block in every process, then ``agree`` on whether it succeeded everywhere."""
    try:
        yield
    except Exception as err:  # every failure must reach the other processes
        agree(err, what)  # re-raises err here, after the other processes have heard of it
    else:
        agree(None, what)


def host_rows(array, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of an array split along its first axis, as numpy, in every process.

    Every process must call it with the same rows (it is a collective when the rows live in
    several processes). Each process sends only its own rows of the block.
    """
    import jax

    if jax.process_count() == 1 or array.is_fully_addressable:
        return np.asarray(array[start:stop])
    from jax.experimental import multihost_utils

    block = np.zeros((stop - start, *array.shape[1:]), array.dtype)
    held = np.zeros(stop - start, bool)
    for shard in array.addressable_shards:
        rows = shard.index[0] if shard.index else slice(None)
        first, last, _ = rows.indices(array.shape[0])
        lo, hi = max(first, start), min(last, stop)
        if lo < hi:
            block[lo - start : hi - start] = np.asarray(shard.data[lo - first : hi - first])
            held[lo - start : hi - start] = True
    blocks, helds = multihost_utils.process_allgather((block, held))
    owner = np.argmax(np.asarray(helds), axis=0)
    held_by_any = np.asarray(helds).any(axis=0)
    if not held_by_any.all():
        missing = start + np.flatnonzero(~held_by_any)
        raise ValueError(
            f"rows {start}..{stop} of an array of {array.shape[0]} rows are not all held by "
            f"some process (rows {missing[0]}..{missing[-1] + 1} are held by none)"
        )
    return np.asarray(blocks)[owner, np.arange(stop - start)]
