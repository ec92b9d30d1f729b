"""Planning a fit before it runs: compiled programs' memory and collectives (``memory``) and
every stage of a fit compiled from shapes alone (``stages``).

The names below load their module on first use, as ``tabascal.parallel``'s do: the stages
compile the routes' programs, and the routes read device memory from ``memory``.
"""

import importlib

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
_HOME = {name: module for module, names in _FACE.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
