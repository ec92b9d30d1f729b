"""The grid of (time x frequency) tiles an observation is fitted as (config section ``tiles``).

Pure host arithmetic over the observation's sizes: no data, no jax. Each tile is fitted as an
observation of its own over its *fitted* ranges (its *core*, the cells it owns, widened by the
overlap on each side and clipped to the observation); the cores partition the observation's
(channel, time) cells exactly, and the stitched results take every cell from the tile whose core
holds it (``fitting.tiled``). Cores are as even as possible: along an axis of n cells cut into k,
the first ``n % k`` cores hold ``n // k + 1`` cells and the rest ``n // k``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from tabascal.config import ConfigError

#: A tile count that the run settles itself. For now it is one tile along that axis; it is
#: to come from the memory plan (the largest tile whose fit fits on the devices).
AUTO = "auto"
#: The fewest integrations and channels a tile's core may hold: a core of one integration
#: leaves nothing to tell the RFI's time behaviour from the sky's.
MIN_CORE_INTEGRATIONS = 2
MIN_CORE_CHANNELS = 1
#: Seconds of an overlap that are taken as a whole integration less: ``overlap_s`` of exactly k
#: integrations, as typed, is k integrations and not k + 1 after rounding.
_OVERLAP_RTOL = 1e-9


class Tile(NamedTuple):
    """One tile of the grid: ranges [start, stop) of integrations (``time``) and channels
    (``freq``) of the observation. time, freq: the fitted ranges (core and overlap, clipped to
    the observation); core_time, core_freq: the core, the cells the tile owns. index: its place
    in the grid, time-major (tile ``i_time * n_freq_tiles + i_freq``)."""

    index: int
    time: tuple[int, int]
    freq: tuple[int, int]
    core_time: tuple[int, int]
    core_freq: tuple[int, int]

    @property
    def name(self) -> str:
        """The tile's folder name under ``tiles/``: its index and fitted ranges, stops
        exclusive (``3-t15_30-f0_2``)."""
        return f"{self.index}-t{self.time[0]}_{self.time[1]}-f{self.freq[0]}_{self.freq[1]}"

    def core_within(self) -> tuple[slice, slice]:
        """(channels, integrations) of the core, counted within the tile's fitted ranges."""
        return (
            slice(self.core_freq[0] - self.freq[0], self.core_freq[1] - self.freq[0]),
            slice(self.core_time[0] - self.time[0], self.core_time[1] - self.time[0]),
        )

    def as_dict(self) -> dict:
        """The ranges as summary.json holds them, [start, stop) each."""
        return {
            "index": self.index,
            "name": self.name,
            "time": list(self.time),
            "freq": list(self.freq),
            "core_time": list(self.core_time),
            "core_freq": list(self.core_freq),
        }


def resolve_count(count: int | str) -> int:
    """A ``tiles.time`` or ``tiles.freq`` value as a number of tiles (``AUTO``: one)."""
    return 1 if count == AUTO else int(count)


def cores(n: int, k: int) -> list[tuple[int, int]]:
    """[start, stop) of k cores as even as possible covering range(n) in order."""
    size, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        stop = start + size + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def overlap_integrations(overlap_s: float, int_time: float) -> int:
    """``tiles.overlap_s`` as whole integrations of ``int_time`` s, rounded up."""
    return max(0, math.ceil(overlap_s / int_time - _OVERLAP_RTOL))


def _counted(n: int, cell: str) -> str:
    return f"{n} {cell}" + ("" if n == 1 else "s")


def _checked_count(key: str, count, n: int, least: int, cell: str) -> int:
    """The number of tiles ``count`` (``AUTO`` or an int) along an axis of ``n`` cells (each
    named ``cell``), refused where a core would hold fewer than ``least`` of them."""
    if count != AUTO and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ConfigError(
            f"config key '{key}' = {count!r}: give a whole number of tiles, 1 or more, or '{AUTO}'"
        )
    k = resolve_count(count)
    if n // k < least:
        most = max(1, n // least)
        raise ConfigError(
            f"config key '{key}' = {k} cuts {_counted(n, cell)} into cores as small as "
            f"{_counted(n // k, cell)}; each tile's core needs at least "
            f"{_counted(least, cell)}: set {key} to {most} or fewer"
        )
    return k


def plan_tiles(
    n_time: int,
    n_freq: int,
    int_time: float,
    *,
    time: int | str = AUTO,
    freq: int | str = AUTO,
    overlap_s: float = 0.0,
    overlap_channels: int = 0,
) -> list[Tile]:
    """The tiles of an observation of ``n_time`` integrations of ``int_time`` s and ``n_freq``
    channels, time-major.

    time, freq: tiles along each axis (``tiles.time``, ``tiles.freq``: a count >= 1 or
    ``AUTO``). overlap_s: seconds each tile's fitted range reaches past its core on each side
    in time (``tiles.overlap_s``, rounded up to whole integrations); overlap_channels: channels
    it reaches past it on each side (``tiles.overlap_channels``). Raises ConfigError naming the
    key for a count or overlap out of range, or a count that leaves a core fewer than
    ``MIN_CORE_INTEGRATIONS`` integrations or ``MIN_CORE_CHANNELS`` channels.
    """
    if not (isinstance(overlap_s, int | float) and overlap_s >= 0 and math.isfinite(overlap_s)):
        raise ConfigError(
            f"config key 'tiles.overlap_s' = {overlap_s!r}: give the overlap in seconds, 0 or more"
        )
    whole = isinstance(overlap_channels, int) and not isinstance(overlap_channels, bool)
    if not whole or overlap_channels < 0:
        raise ConfigError(
            f"config key 'tiles.overlap_channels' = {overlap_channels!r}: give a whole number "
            "of channels, 0 or more"
        )
    k_time = _checked_count("tiles.time", time, n_time, MIN_CORE_INTEGRATIONS, "integration")
    k_freq = _checked_count("tiles.freq", freq, n_freq, MIN_CORE_CHANNELS, "channel")
    pad_time = overlap_integrations(overlap_s, int_time)
    tiles = []
    for core_time in cores(n_time, k_time):
        for core_freq in cores(n_freq, k_freq):
            tiles.append(
                Tile(
                    index=len(tiles),
                    time=(max(0, core_time[0] - pad_time), min(n_time, core_time[1] + pad_time)),
                    freq=(
                        max(0, core_freq[0] - overlap_channels),
                        min(n_freq, core_freq[1] + overlap_channels),
                    ),
                    core_time=core_time,
                    core_freq=core_freq,
                )
            )
    return tiles
