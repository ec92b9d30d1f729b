"""Per-device memory figures: live arrays, compiled programs, and the allocator's peak.

On a GPU the allocator's ``peak_bytes_in_use`` is the figure to trust. CPU devices keep no
allocator statistics, so there the peak is estimated from what XLA reports: the bytes of
the arrays alive on each device plus the largest working set (outputs and temporaries, less
donated buffers) of the compiled stages that run.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import jax

from tabascal import TabascalError

#: Cross-device operations XLA can place in a compiled program. An asynchronous one appears
#: as a ``-start`` / ``-done`` pair; the ``-start`` is counted, under the plain name.
COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "collective-permute",
    "all-to-all",
    "reduce-scatter",
    "collective-broadcast",
    "ragged-all-to-all",
)
_COLLECTIVE = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


@dataclass(frozen=True)
class StageMemory:
    """What XLA's buffer assignment reports for one compiled program, per device, in bytes."""

    arguments: int
    outputs: int
    temporaries: int
    aliased: int
    peak: int  # XLA's own peak estimate for the program (0 where the backend gives none)

    @property
    def working_set(self) -> int:
        """Bytes the program adds to its arguments while it runs."""
        return self.outputs + self.temporaries - self.aliased

    @property
    def need(self) -> int:
        """Bytes XLA allocates to run the program: its arguments and its working set."""
        return self.arguments + self.working_set

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def stage_memory(compiled: jax.stages.Compiled) -> StageMemory:
    """Per-device memory of a compiled program (SPMD programs are the same on every device)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return StageMemory(0, 0, 0, 0, 0)
    return StageMemory(
        arguments=int(stats.argument_size_in_bytes),
        outputs=int(stats.output_size_in_bytes),
        temporaries=int(stats.temp_size_in_bytes),
        aliased=int(stats.alias_size_in_bytes),
        peak=int(getattr(stats, "peak_memory_in_bytes", 0) or 0),
    )


def count_collectives(compiled: jax.stages.Compiled | str) -> dict[str, int]:
    """Operation name -> count of the collectives in a compiled program's HLO text.

    ``compiled``: a compiled program, or its ``as_text()``. Empty for a program that runs on
    one device or exchanges nothing, e.g. ``{"all-reduce": 2}`` for a baseline-sharded step.
    """
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    return dict(sorted(collections.Counter(_COLLECTIVE.findall(text)).items()))


_RESULT = re.compile(r"=\s*(\([^=]*?\)|\S+)\s+(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
_ARRAY = re.compile(r"([a-z]+\d*)\[([\d,]*)\]")


def collective_shapes(compiled: jax.stages.Compiled | str) -> list[tuple[str, tuple]]:
    """Every collective of a compiled program with the shapes it moves, in program order.

    Returns ``(operation, ((dtype, shape), ...))`` per collective, e.g. ``("all-reduce",
    (("f32", ()), ("c64", (24, 2, 30))))``. An asynchronous one's ``-start`` stands for it (its
    result lists the operands then the outputs, each array once here).
    """
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    found = []
    for result, name in _RESULT.findall(text):
        arrays = []
        for dtype, dims in _ARRAY.findall(result):
            entry = (dtype, tuple(int(d) for d in dims.split(",") if d))
            if entry not in arrays:
                arrays.append(entry)
        found.append((name, tuple(arrays)))
    return found


def live_bytes_per_device(devices: Iterable[jax.Device] | None = None) -> list[int]:
    """Bytes of every live jax array held on each device (the device's shards only).

    A buffer is counted once: a sharded array's per-device pieces, once read through
    ``addressable_shards``, are live arrays of their own over the same buffers.
    """
    devices = list(devices) if devices is not None else jax.devices()
    totals = {d: 0 for d in devices}
    seen = set()
    for array in jax.live_arrays():
        if array.is_deleted():
            continue
        for shard in array.addressable_shards:
            if shard.device not in totals:
                continue
            buffer = shard.data
            key = (shard.device, buffer.unsafe_buffer_pointer(), buffer.nbytes)
            if key in seen:
                continue
            seen.add(key)
            totals[shard.device] += buffer.nbytes
    return [totals[d] for d in devices]


def allocator_peak_bytes(devices: Iterable[jax.Device] | None = None) -> list[int] | None:
    """The allocator's ``peak_bytes_in_use`` per device, or None where it keeps no statistics."""
    devices = list(devices) if devices is not None else jax.devices()
    peaks = []
    for device in devices:
        stats = device.memory_stats()
        if not stats or "peak_bytes_in_use" not in stats:
            return None
        peaks.append(int(stats["peak_bytes_in_use"]))
    return peaks


def device_memory_bytes(device: jax.Device) -> int | None:
    """The memory one device has for a fit's arrays: its allocator's ``bytes_limit`` where it
    keeps statistics (a GPU), else the host's physical memory shared equally by this process's
    devices of that platform (CPU devices, virtual ones included). None where neither is known.
    """
    stats = device.memory_stats()
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    return host // max(len(jax.local_devices(backend=device.platform)), 1)


def _size(n_bytes: int) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    if n_bytes >= 2**30:
        return f"{n_bytes / 2**30:.2f} GiB"
    return f"{n_bytes / 2**20:.2f} MiB"


class DeviceMemoryError(TabascalError, MemoryError):
    """A compiled program needs more memory per device than a device has."""


def check_programs_fit(programs: dict[str, StageMemory], capacity: int | None) -> None:
    """Refuse programs one of which needs more than ``capacity`` bytes per device.

    programs: name -> ``StageMemory`` of a compiled program; its need is its arguments and
    its working set, what XLA allocates to run it (a floor of the device's use: arrays alive
    but not read by the program come on top). capacity: ``device_memory_bytes`` (None: not
    known, nothing refused). A program of the fit's polish would otherwise fail only when the
    polish begins, after every gradient step.
    """
    if not capacity:
        return
    for name, stage in programs.items():
        if stage.need > capacity:
            raise DeviceMemoryError(
                f"the fit's {name} step needs {_size(stage.need)} per device (XLA's figure for its "
                f"compiled program: {_size(stage.arguments)} of arguments and "
                f"{_size(stage.working_set)} of working set) but a device has "
                f"{_size(capacity)}: spread the baselines over more devices "
                "(--devices, --shard-axis baseline --reuse-plan), take each device's baselines "
                "in blocks in turn (--shard-axis baseline --row-blocks N, on one device too), "
                "leave the RFI phase moments "
                "less of the memory (rfi.phase_cache_fraction, or rfi.phase_cache: never), or "
                "fit fewer channels at a time; `tabascal plan` reports every stage's memory"
            )


def peak_bytes_per_device(
    stages: Iterable[StageMemory], devices: Iterable[jax.Device] | None = None
) -> list[int]:
    """Per-device peak: the allocator's where it has one, else live bytes + largest stage."""
    devices = list(devices) if devices is not None else jax.devices()
    measured = allocator_peak_bytes(devices)
    if measured is not None:
        return measured
    largest = max((stage.working_set for stage in stages), default=0)
    return [live + largest for live in live_bytes_per_device(devices)]
