"""Splitting a fit over devices and processes.

A fit takes its layout from one registry (``route``, in ``routes``): one device, the source
axis (``source_axis``) or the baseline axis, whose rows ``row_placement`` places and
``baseline_axis`` evaluates. ``blockwise`` builds the baseline axis's model block by block from
the rows each process reads (``StoreRows``, ``MemoryRows``); ``processes`` runs one fit over
several processes.

The names below load their module on first use: ``initialize`` must start jax's distributed
runtime before jax does anything else, and the command line imports jax only once it has set
the device count, so importing this package imports no jax.
"""

from tabascal._lazy_face import lazy_face

#: Each module of the face and the names it gives.
_FACE = {
    "routes": ("ROUTES", "SHARD_AXES", "Route", "keep_phase_moments", "route"),
    "row_placement": ("ShardedModel", "ShardedSpec"),
    "blockwise": ("MemoryRows", "RowSource", "StoreRows"),
    "processes": ("Launch", "LaunchError", "PeerFailure", "initialize", "is_writer", "launch_from"),
    "backends": ("float64_device",),
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _FACE)
