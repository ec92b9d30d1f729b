"""The user documentation lists what the code accepts."""

from pathlib import Path

from tabascal.config import Section
from tabascal.fitting import run_config

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _keys(section: Section, path: str = ""):
    for name, entry in section.options.items():
        key = f"{path}.{name}" if path else name
        if isinstance(entry, Section):
            yield from _keys(entry, key)
        else:
            yield key, entry


def test_config_doc_lists_every_run_key_with_its_default():
    text = (DOCS / "config.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")
    }
    for key, option in _keys(run_config.SCHEMA):
        assert key in rows, f"docs/config.md does not document {key}"
        default = "null" if option.default is None else str(option.default).lower()
        assert f"`{default}`" in rows[key].lower(), (
            f"docs/config.md gives a wrong default for {key}"
        )


def _python_blocks():
    """(file, first line, source) of every ```python block of the docs and package READMEs;
    indented blocks (inside a list item) are dedented."""
    import textwrap

    root = DOCS.parent
    files = sorted(DOCS.glob("*.md")) + sorted(root.glob("packages/*/README.md"))
    for path in files:
        lines = path.read_text().splitlines()
        start = None
        for i, line in enumerate(lines):
            fence = line.strip()
            if start is None and fence == "```python":
                start, indent = i + 1, len(line) - len(line.lstrip())
            elif start is not None and fence == "```":
                body = "\n".join(x[indent:] if len(x) >= indent else x for x in lines[start:i])
                yield path.relative_to(root), start + 1, textwrap.dedent(body)
                start = None


def test_every_python_block_in_the_docs_parses_and_imports_what_exists():
    """The docs' code names the modules and functions as they are: each block parses, and
    every ``from X import Y`` / ``import X`` of it resolves (a moved or renamed module fails
    here, not in a user's hands)."""
    import ast
    import importlib

    blocks = list(_python_blocks())
    assert len(blocks) >= 10, blocks  # 12 blocks when written
    for path, line, source in blocks:
        tree = ast.parse(source, filename=f"{path}:{line}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or importlib.util.find_spec(
                        f"{node.module}.{alias.name}"
                    ), f"{path}:{line}: {node.module} has no {alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
