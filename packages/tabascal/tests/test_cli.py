import subprocess
import sys

from tabascal.cli import build_parser, main


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


def test_demo_memory_table_gives_each_axis_against_one_device():
    from tabascal.cli.fit import _memory_lines

    one = {"arguments": 4 * 2**20, "outputs": 2**20, "temporaries": 8 * 2**20, "aliased": 2**20}
    four = {"arguments": 2**20, "outputs": 2**19, "temporaries": 2 * 2**20, "aliased": 2**19}
    lines = _memory_lines({"none": (1, one), "baseline": (4, four)})
    assert lines[-2].split() == ["none", "1", "4.00", "1.00", "8.00", "1.00", "12.00", "1.00"]
    assert lines[-1].split() == ["baseline", "4", "1.00", "0.25", "2.00", "0.25", "3.00", "0.25"]


def test_devices_can_still_be_set_after_jax_is_imported_but_not_started():
    # The simulator's modules import jax while the parser is built; the device count must
    # still take effect (a fresh interpreter, since this one has started jax).
    import os
    import subprocess
    import sys

    code = (
        "from tabascal.cli import build_parser\n"
        "from tabascal.cli.fit import use_devices\n"
        "import sys\n"
        "build_parser()\n"
        "assert 'jax' in sys.modules\n"
        "assert use_devices(3) is None\n"
        "import jax\n"
        "print(jax.device_count())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split()[-1] == "3"


def test_every_error_class_of_tabascal_derives_from_tabascal_error_and_its_builtin():
    from tabascal import TabascalError
    from tabascal.config import ConfigError
    from tabascal.fitting.job import OutputExistsError
    from tabascal.measurement_set import MissingExtraError, MsError
    from tabascal.observation.tle import TleError
    from tabascal.parallel.processes import LaunchError, PeerFailure
    from tabascal.simulate import SimulationError
    from tabascal.store import StoreError

    expected = {
        ConfigError: ValueError, StoreError: ValueError, MsError: ValueError,
        TleError: ValueError, SimulationError: ValueError, LaunchError: ValueError,
        MissingExtraError: ImportError, OutputExistsError: FileExistsError,
        PeerFailure: RuntimeError,
    }  # fmt: skip
    for cls, builtin in expected.items():
        assert issubclass(cls, TabascalError) and issubclass(cls, builtin), cls


def test_a_store_error_is_reported_by_the_command_with_exit_status_2(tmp_path, capsys):
    missing = tmp_path / "missing.zarr"
    assert main(["inspect", str(missing)]) == 2
    assert "tabascal inspect: error:" in capsys.readouterr().err
