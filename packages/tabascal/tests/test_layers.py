"""The packages' folders import one way: what docs/architecture.md draws as low imports
nothing drawn above it."""

import ast
from pathlib import Path

import tabascal

SOURCE = Path(tabascal.__file__).parent

# Each folder, and the folders of tabascal it may never import.
NEVER_IMPORTS = {
    "config": ("fitting", "model", "parallel", "planning", "cli", "simulate"),
}


def _imported_modules(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def test_config_imports_nothing_drawn_above_it():
    for folder, above in NEVER_IMPORTS.items():
        files = sorted((SOURCE / folder).rglob("*.py"))
        assert files, f"no sources under {SOURCE / folder}"
        wrong = [
            f"{path.relative_to(SOURCE)}:{line} imports {module}"
            for path in files
            for line, module in _imported_modules(path)
            if module.split(".")[:2] in (["tabascal", name] for name in above)
        ]
        assert not wrong, f"{folder}/ must not import {', '.join(above)}: " + "; ".join(wrong)
