"""The user documentation lists what the code accepts."""

from pathlib import Path

from tabascal.config import Section, run_config

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
