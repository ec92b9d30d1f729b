import subprocess
import sys

from tabascal.cli import build_parser


def test_no_command_prints_usage_and_fails():
    result = subprocess.run([sys.executable, "-m", "tabascal"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: tabascal" in result.stderr


def test_every_command_has_help():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"demo", "simulate", "inspect", "run", "plan"} <= set(commands)
    for name, sub in commands.items():
        assert sub.format_help().startswith(f"usage: tabascal {name}"), name
