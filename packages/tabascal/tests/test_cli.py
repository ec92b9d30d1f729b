import subprocess
import sys

import jax

from tabascal.cli import main


def test_demo_lists_versions_and_devices(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert f"jax                  {jax.__version__}" in out
    assert f"{len(jax.devices())} JAX device(s)" in out


def test_no_command_prints_usage_and_fails():
    result = subprocess.run([sys.executable, "-m", "tabascal"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: tabascal" in result.stderr
