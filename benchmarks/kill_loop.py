"""Kill tabascal commands at random moments and check that what they leave is whole or absent.

Each command runs many times in a subprocess that is sent SIGKILL after a random delay, drawn
uniformly from zero to the time an uninterrupted run takes. After each kill the outputs are
checked: each is absent, or whole and readable (a store passes ``verify_store`` and holds the
same visibilities as an uninterrupted run; summary.json, config.yaml, the checkpoint, the plots
and results.zarr all load). Then the same command is run again (``--resume`` where the fit left
a checkpoint, ``--overwrite`` where the store is already there), which must succeed, reach the
uninterrupted run's outputs and leave no temporary file and no lock behind.

Every other iteration writes over the previous iteration's complete outputs (``--overwrite``),
so that kills also land while an old output is being replaced.

export-ms writes into a Measurement Set of its own (a copy of one simulated beside the store):
after each kill every column the MS had is byte for byte as before, and each TAB_* column is
absent or equal to an uninterrupted export's; the rerun (``--overwrite-columns`` where TAB_*
columns are there) must give the uninterrupted export's columns and leave no temporary column.

    python benchmarks/kill_loop.py --kills 20 --commands simulate run import-ms export-ms
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

COMMANDS = ("simulate", "run", "import-ms", "export-ms")
FIT = "fit:\n  steps: 600\n  checkpoint_every: 20\n"
RUN_OUTPUTS = ("baselines.png", "checkpoints", "config.yaml", "loss.png", "results.zarr",
               "summary.json")  # fmt: skip


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="kills per command")
    parser.add_argument("--commands", nargs="+", default=["simulate", "run"], choices=COMMANDS)
    parser.add_argument("--preset", default="demo", help="simulation preset of the store")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill delays")
    parser.add_argument("--json", type=Path, default=None, help="output path (default results/)")
    return parser.parse_args(argv)


class Runner:
    """``python -m tabascal ARGS`` in ``work``, with a compilation cache shared by every run
    (so that the fit, not its compilation, takes most of each run's time)."""

    def __init__(self, work: Path):
        self.work = work
        self.env = dict(
            os.environ,
            JAX_COMPILATION_CACHE_DIR=str(work / "xla_cache"),
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        )
        self.env.pop("TABASCAL_KILL_AT", None)

    def command(self, args) -> list[str]:
        return [sys.executable, "-m", "tabascal", *map(str, args)]

    def run(self, args) -> tuple[int, str, float]:
        """(exit status, stderr, seconds) of an uninterrupted run."""
        start = time.perf_counter()
        done = subprocess.run(
            self.command(args), cwd=self.work, env=self.env, capture_output=True, text=True
        )
        return done.returncode, done.stderr, time.perf_counter() - start

    def kill_after(self, args, delay_s: float) -> bool:
        """Start the command and SIGKILL it after ``delay_s``; whether it was still running."""
        process = subprocess.Popen(
            self.command(args),
            cwd=self.work,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            process.wait(timeout=delay_s)
            return False
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            return True


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


def _store_state(path: Path, reference) -> str:
    """'absent', 'whole' (verified, the reference's visibilities) or what is wrong."""
    import numpy as np

    from tabascal.store import StoreError, read_observation, verify_store

    if not path.exists():
        return "absent"
    try:
        damage = verify_store(path).damage
        if damage:
            return f"damaged: {damage[:3]}"
        if not np.array_equal(read_observation(path).vis, reference):
            return "whole but not the uninterrupted run's visibilities"
    except (StoreError, OSError, ValueError) as err:
        return f"unreadable: {err}"
    return "whole"


class StoreCommand:
    """A command that writes one store (simulate, import-ms) and what to check of it."""

    def __init__(self, name: str, runner: Runner, args, path: Path):
        self.name, self.runner, self.args, self.path = name, runner, list(args), path
        self.recoveries = {"the same command": 0, "--overwrite": 0}

    def prepare(self, i: int) -> list:
        """The arguments of iteration ``i``: odd ones overwrite the store the last left."""
        if i % 2 == 0:
            shutil.rmtree(self.path, ignore_errors=True)
            return self.args
        return [*self.args, "--overwrite"]

    def reference(self) -> float:
        from tabascal.store import read_observation

        shutil.rmtree(self.path, ignore_errors=True)
        code, err, seconds = self.runner.run(self.args)
        if code != 0:
            raise RuntimeError(f"{self.name}: the uninterrupted run failed: {err[-2000:]}")
        self.vis = read_observation(self.path).vis
        return seconds

    def check(self, killed: list) -> tuple[str, list[str]]:
        """The outcome of a kill of the command ``killed``, then the rerun's problems (empty
        when all is well): the same command where the store is absent, else --overwrite."""
        state = _store_state(self.path, self.vis)
        if state not in ("absent", "whole"):
            return "damaged", [f"after the kill: {state}"]
        again = killed if state == "absent" else [*self.args, "--overwrite"]
        self.recoveries["the same command" if state == "absent" else "--overwrite"] += 1
        code, err, _ = self.runner.run(again)
        problems = [] if code == 0 else [f"rerun exited {code}: {err[-500:]}"]
        after = _store_state(self.path, self.vis)
        if after != "whole":
            problems.append(f"after the rerun: {after}")
        if _siblings(self.path):
            problems.append(f"left beside the store: {_siblings(self.path)}")
        return state, problems


def _run_outputs(out: Path, summary_ref: dict) -> tuple[str, list[str], bool]:
    """('absent' | 'whole', what is wrong, whether a checkpoint is there) of an output folder:
    whole when summary.json says the run finished, and every output there must load."""
    import numpy as np
    import yaml
    import zarr
    from matplotlib.image import imread

    problems = []

    def loads(name, read):
        path = out / name
        if not path.exists():
            return None
        try:
            return read(path)
        except Exception as err:  # any failure to read is what this loop looks for
            problems.append(f"{name} does not load: {type(err).__name__}: {err}")
            return None

    def checkpoint(path):
        with np.load(path) as saved:
            return {name: saved[name] for name in saved.files}

    def results(path):
        group = zarr.open_group(str(path), mode="r")
        return {name: group[name][...] for name in group.array_keys()}

    loads("config.yaml", lambda p: yaml.safe_load(p.read_text()))
    for plot in ("loss.png", "baselines.png"):
        loads(plot, imread)
    saved = loads("checkpoints/checkpoint.npz", checkpoint)
    cubes = loads("results.zarr", results)
    summary = loads("summary.json", lambda p: json.loads(p.read_text()))
    if summary is None:
        return "absent", problems, saved is not None
    if summary.get("steps") != summary_ref["steps"]:
        problems.append(f"summary.json says {summary.get('steps')} steps")
    if cubes is None or saved is None:
        problems.append("summary.json is there but results.zarr or the checkpoint is not")
    return "whole", problems, saved is not None


class RunCommand:
    """``tabascal run`` into one output folder, and what to check of it."""

    name = "run"

    def __init__(self, runner: Runner, args, out: Path):
        self.runner, self.args, self.out = runner, list(args), out
        self.recoveries = {"the same command": 0, "--resume": 0, "none (finished)": 0}

    def prepare(self, i: int) -> list:
        if i % 2 == 0:
            shutil.rmtree(self.out, ignore_errors=True)
            return self.args
        return [*self.args, "--overwrite"]

    def reference(self) -> float:
        shutil.rmtree(self.out, ignore_errors=True)
        code, err, seconds = self.runner.run(self.args)
        if code != 0:
            raise RuntimeError(f"run: the uninterrupted run failed: {err[-2000:]}")
        self.summary = json.loads((self.out / "summary.json").read_text())
        return seconds

    def check(self, killed: list) -> tuple[str, list[str]]:
        """As ``StoreCommand.check``: --resume where a checkpoint is left and the run did not
        finish, else the same command again."""
        state, problems, has_checkpoint = _run_outputs(self.out, self.summary)
        if problems:
            return "damaged", [f"after the kill: {p}" for p in problems]
        # A run killed after it finished (summary.json written) may leave its lock only.
        allowed = {*RUN_OUTPUTS, ".tabascal.lock"} if state == "whole" else set(RUN_OUTPUTS)
        if state == "whole":
            self.recoveries["none (finished)"] += 1
        else:
            how = "--resume" if has_checkpoint else "the same command"
            self.recoveries[how] += 1
            again = [*self.args, "--resume"] if has_checkpoint else killed
            code, err, _ = self.runner.run(again)
            if code != 0:
                problems.append(f"{how} exited {code}: {err[-500:]}")
        state_after, after, _ = _run_outputs(self.out, self.summary)
        problems += [f"after the rerun: {p}" for p in after]
        if state_after != "whole":
            problems.append("after the rerun: no summary.json")
        else:
            chi2 = json.loads((self.out / "summary.json").read_text())["chi2_final"]
            if abs(chi2 - self.summary["chi2_final"]) > 1e-5 * abs(self.summary["chi2_final"]):
                problems.append(f"chi2_final {chi2} against {self.summary['chi2_final']}")
        extra = sorted(set(os.listdir(self.out)) - allowed)
        extra += [f"checkpoints/{n}" for n in os.listdir(self.out / "checkpoints")
                  if n != "checkpoint.npz"]  # fmt: skip
        if extra:
            problems.append(f"left in the output folder: {extra}")
        return state, problems


def _ms_columns(path: Path) -> dict:
    """Every column of the Measurement Set's main table, as numpy; a column whose cells hold
    no array (FLAG_CATEGORY, often) as the string "undefined"."""
    import numpy as np
    from casacore.tables import table

    def read(t, name):
        try:
            return t.getcol(name)
        except RuntimeError:
            return np.array("undefined")

    with table(str(path), ack=False) as t:
        return {name: read(t, name) for name in t.colnames()}


class ExportCommand:
    """``tabascal export-ms`` into a Measurement Set, and what to check of it."""

    name = "export-ms"

    def __init__(self, runner: Runner, args, ms: Path, pristine: Path):
        self.runner, self.args, self.ms, self.pristine = runner, list(args), ms, pristine
        self.recoveries = {"the same command": 0, "--overwrite-columns": 0}
        self.original = _ms_columns(pristine)

    def prepare(self, i: int) -> list:
        """Odd iterations export again over the columns the last one wrote."""
        if i % 2 == 0:
            shutil.rmtree(self.ms, ignore_errors=True)
            shutil.copytree(self.pristine, self.ms)
            return self.args
        return [*self.args, "--overwrite-columns"]

    def reference(self) -> float:
        self.prepare(0)
        code, err, seconds = self.runner.run(self.args)
        if code != 0:
            raise RuntimeError(f"export-ms: the uninterrupted export failed: {err[-2000:]}")
        columns = _ms_columns(self.ms)
        self.written = {n: v for n, v in columns.items() if n not in self.original}
        return seconds

    def _state(self) -> tuple[str, list[str]]:
        """'absent' (no new column), 'whole' (all of them), 'some' (each whole), and what is
        wrong: a column the MS had changed, or a new one unlike the uninterrupted export's."""
        import numpy as np

        columns = _ms_columns(self.ms)
        problems = [
            f"{name} changed"
            for name, value in self.original.items()
            if name not in columns or not np.array_equal(columns[name], value)
        ]
        final = [n for n in columns if n in self.written]
        problems += [
            f"{n} differs" for n in final if not np.array_equal(columns[n], self.written[n])
        ]
        state = "absent" if not final else "whole" if len(final) == len(self.written) else "some"
        return state, problems

    def check(self, killed: list) -> tuple[str, list[str]]:
        state, problems = self._state()
        if problems:
            return "damaged", [f"after the kill: {p}" for p in problems]
        overwrite = state != "absent"
        self.recoveries["--overwrite-columns" if overwrite else "the same command"] += 1
        again = [*self.args, "--overwrite-columns"] if overwrite else self.args
        code, err, _ = self.runner.run(again)
        if code != 0:
            problems.append(f"rerun exited {code}: {err[-500:]}")
        after, wrong = self._state()
        problems += [f"after the rerun: {p}" for p in wrong]
        if after != "whole":
            problems.append(f"after the rerun: {after}")
        left = [n for n in _ms_columns(self.ms) if n.startswith(("TABTMP_", "TABOLD_"))]
        if left:
            problems.append(f"temporary columns left: {left}")
        return state, problems


def _commands(names, runner: Runner, preset: str) -> list:
    work = runner.work
    store = work / "obs.zarr"
    simulate = ["simulate", "--preset", preset, "--seed", 1, "-o", store, "-q"]
    code, err, _ = runner.run(simulate)
    if code != 0:
        raise RuntimeError(f"simulating the store failed: {err[-2000:]}")
    commands = []
    if "simulate" in names:
        path = work / "sim.zarr"
        args = ["simulate", "--preset", preset, "--seed", 1, "-o", path, "-q"]
        commands.append(StoreCommand("simulate", runner, args, path))
    if "run" in names:
        (work / "fit.yaml").write_text(FIT)
        args = ["run", "-c", work / "fit.yaml", "--data", store, "-o", work / "fit", "-q"]
        commands.append(RunCommand(runner, args, work / "fit"))
    if "import-ms" in names:
        ms = work / "obs.ms"
        code, err, _ = runner.run(["simulate", "--preset", preset, "--seed", 1, "-o", ms, "-q"])
        if code != 0:
            raise RuntimeError(f"simulating the Measurement Set failed: {err[-2000:]}")
        path = work / "imported.zarr"
        commands.append(StoreCommand("import-ms", runner, ["import-ms", ms, "-o", path], path))
    if "export-ms" in names:
        pristine, ms = work / "export-pristine.ms", work / "export.ms"
        store_ms = work / "export-obs.zarr"
        steps = ["simulate", "--preset", preset, "--seed", 1, "-o", pristine, "-q"]
        for args in (steps, ["import-ms", pristine, "-o", store_ms]):
            code, err, _ = runner.run(args)
            if code != 0:
                raise RuntimeError(f"{args[0]} for export-ms failed: {err[-2000:]}")
        (work / "export-fit.yaml").write_text("fit:\n  steps: 20\noutput:\n  plots: false\n")
        fit = ["run", "-c", work / "export-fit.yaml", "--data", store_ms, "-o", work / "efit", "-q"]
        code, err, _ = runner.run(fit)
        if code != 0:
            raise RuntimeError(f"the fit for export-ms failed: {err[-2000:]}")
        args = ["export-ms", work / "efit" / "results.zarr", "--ms", ms, "--data", store_ms]
        commands.append(ExportCommand(runner, args, ms, pristine))
    return commands


def _table(records) -> list[str]:
    lines = [
        f"{'command':<10} {'kills':>5} {'ran on':>7} {'absent':>7} {'whole':>6} {'some':>5}"
        f" {'damaged':>8}"
        f" {'failures':>8}  {'uninterrupted':>13}"
    ]
    for r in records:
        o = r["outcomes"]
        lines.append(
            f"{r['command']:<10} {r['kills']:>5} {r['finished_first']:>7} {o['absent']:>7} "
            f"{o['whole']:>6} {o.get('some', 0):>5} {o['damaged']:>8} {len(r['failures']):>8}"
            f"  {r['uninterrupted_s']:>11.1f} s"
        )
    lines.append("ran on: runs that finished before their kill came (counted as whole)")
    lines.append("some: export-ms killed between columns, each column there whole")
    for r in records:
        done = ", ".join(f"{how} {n}" for how, n in r["recoveries"].items())
        lines.append(f"{r['command']} run again with: {done}")
    return lines


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    base = _common.provenance(["benchmarks/kill_loop.py", *(argv or sys.argv[1:])])
    draw = random.Random(options.seed)
    records = []
    with tempfile.TemporaryDirectory(prefix="kill_loop-") as where:
        runner = Runner(Path(where))
        for command in _commands(options.commands, runner, options.preset):
            command.reference()  # fills the compilation cache
            seconds = command.reference()
            outcomes = {"absent": 0, "whole": 0, "some": 0, "damaged": 0}
            failures, delays, finished_first = [], [], 0
            for i in range(options.kills):
                args = command.prepare(i)
                delay = draw.uniform(0, seconds)
                delays.append(round(delay, 3))
                if not runner.kill_after(args, delay):
                    finished_first += 1
                state, problems = command.check(args)
                outcomes[state] += 1
                failures += [f"kill {i} after {delay:.2f} s: {p}" for p in problems]
                print(f"{command.name} kill {i:>3} after {delay:6.2f} s: {state}"
                      + (f"  FAILED {problems}" if problems else ""), flush=True)  # fmt: skip
            records.append(
                {
                    **base,
                    "command": command.name,
                    "argv": [str(a) for a in command.args],
                    "kills": options.kills,
                    "finished_first": finished_first,
                    "outcomes": outcomes,
                    "recoveries": command.recoveries,
                    "failures": failures,
                    "kill_delays_s": delays,
                    "uninterrupted_s": seconds,
                }
            )
    print("\n".join(_table(records)))
    path = _common.write_json(records, options.json, "kill_loop")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
