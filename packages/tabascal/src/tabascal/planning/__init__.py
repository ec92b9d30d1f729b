"""Planning a fit before it runs: compiled programs' memory and collectives (``memory``) and
every stage of a fit compiled from shapes alone (``stages``).

The names below load their module on first use, as ``tabascal.parallel``'s do: the stages
compile the routes' programs, and the routes read device memory from ``memory``.
"""

from tabascal._lazy_face import lazy_face

#: Each module of the face and the names it gives.
_FACE = {
    "stages": (
        "StageReport",
        "abstract_arrays",
        "bytes_per_device",
        "compile_stages",
        "limiting_step",
        "place_abstract",
        "plan_stages",
    ),
    "memory": (
        "DeviceMemoryError",
        "StageMemory",
        "allocator_peak_bytes",
        "check_programs_fit",
        "count_collectives",
        "device_memory_bytes",
        "peak_bytes_per_device",
        "stage_memory",
    ),
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _FACE)
