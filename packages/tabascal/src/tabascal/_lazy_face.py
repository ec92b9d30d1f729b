"""A subpackage's public face whose names load their module on first use."""

import importlib
import sys
from collections.abc import Callable


def lazy_face(
    package: str, face: dict[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """(``__all__``, ``__getattr__``, ``__dir__``) for the package named ``package``, whose
    public names ``face`` maps from each of its modules. A name's module is imported when the
    name is first read, and the name kept in the package's namespace after."""
    home = {name: module for module, names in face.items() for name in names}
    public = sorted(home)

    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public})

    return public, __getattr__, __dir__
