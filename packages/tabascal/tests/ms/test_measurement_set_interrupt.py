"""``tabascal simulate -o X.ms`` killed while it writes the Measurement Set: nothing under the
final name, and the next write clears what the killed one left (docs/reliability.md). The
kills are exact: ``TABASCAL_KILL_AT=store-publish:2`` kills the command as the MS, its second
folder (after the intermediate store), is complete but not yet renamed into place."""

import os
import subprocess
import sys

from casacore.tables import table

from tabascal.store.writer import KILL_AT_ENV

TINY = "array: {n_stations: 5}\nobservation: {n_time: 3, n_freq: 2}\nsky: {n_sources: 2}\n"


def _simulate(folder, kill_at=None, *extra):
    env = dict(os.environ)
    env.pop(KILL_AT_ENV, None)
    if kill_at:
        env[KILL_AT_ENV] = kill_at
    args = ["simulate", "--preset", "demo", "-c", "tiny.yaml", "-o", "x.ms", "-q", *extra]
    return subprocess.run(
        [sys.executable, "-m", "tabascal", *args], cwd=folder, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".x.ms."))


def test_a_killed_ms_write_leaves_nothing_under_its_name_and_the_rerun_clears_it(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    killed = _simulate(tmp_path, "store-publish:2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "x.ms").exists()
    left = _leftovers(tmp_path)
    assert any(name.startswith(".x.ms.partial-") for name in left), left  # the whole MS, unnamed

    again = _simulate(tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "left by an interrupted write of x.ms" in again.stderr
    assert _leftovers(tmp_path) == []
    with table(str(tmp_path / "x.ms"), ack=False) as ms:
        assert ms.nrows() == 10 * 3  # 10 baselines x 3 integrations


def test_a_killed_ms_overwrite_gives_the_old_ms_back_to_the_next_write(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    assert _simulate(tmp_path).returncode == 0
    with table(str(tmp_path / "x.ms"), ack=False) as ms:
        before = ms.getcol("DATA")
    # Killed between the two renames of the replace: the old MS is aside, the new one unnamed.
    killed = _simulate(tmp_path, "store-replace:1", "--overwrite")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "x.ms").exists()
    assert any(name.startswith(".x.ms.replaced-") for name in _leftovers(tmp_path))

    # A write without --overwrite first puts the old MS back, then refuses to replace it.
    refused = _simulate(tmp_path)
    assert refused.returncode != 0 and "already exists" in refused.stderr, refused.stderr
    with table(str(tmp_path / "x.ms"), ack=False) as ms:
        assert (ms.getcol("DATA") == before).all()
    assert _leftovers(tmp_path) == []
