import subprocess
import sys


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "tabascal_partition", *args], capture_output=True, text=True
    )


def test_command_prints_blocks_padding_ghosts_and_widths():
    result = run("--n-ant", "40", "--devices", "4", "--reuse", "--groups", "3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "40 antennas, 780 baselines" in out
    assert "block size B = 195" in out
    assert "width 24" in out and "lower bound 24" in out  # ceil(3 * 40 / 5)
    assert "ghost" in out
    assert out.count("\n") >= 12  # three group lines among the rest


def test_command_without_reuse_reports_contiguous_widths():
    result = run("--n-ant", "16", "--devices", "3")
    assert result.returncode == 0, result.stderr
    assert "the widest device's rows touch 16 real antennas" in result.stdout


def test_spread_order_computes_no_padding_where_the_groups_divide():
    # 780 baselines in 3 length groups of 260 on 4 devices: 65 of each per device. In the data's
    # order the groups are padded to 75, 69 and 84 (228 rows computed for 195 owned).
    plain, spread = (
        run("--n-ant", "40", "--devices", "4", "--groups", "3"),
        run("--n-ant", "40", "--devices", "4", "--groups", "3", "--spread"),
    )
    assert plain.returncode == spread.returncode == 0, plain.stderr + spread.stderr
    assert "rows computed per device: 228 for 195 owned" in plain.stdout
    assert "rows computed per device: 195 for 195 owned" in spread.stdout
    both = run("--n-ant", "40", "--spread", "--reuse")
    assert both.returncode == 2 and "pass one of them" in both.stderr


def test_help_and_bad_arguments():
    assert "--reuse" in run("-h").stdout
    result = run("--devices", "0")
    assert result.returncode == 2
    assert "must be at least 1" in result.stderr


def test_width_table_lists_every_device_count_from_2_to_16():
    result = run("--n-ant", "30", "--width-table")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "complete graph on 30 antennas (435 baselines)"
    rows = [line.split() for line in lines[2:]]
    assert [int(row[0]) for row in rows] == list(range(2, 17))
    # width >= lower bound on every line
    assert all(int(row[1]) >= int(row[3]) for row in rows)
