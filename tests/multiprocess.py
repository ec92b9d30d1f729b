"""Start several processes of one run on 127.0.0.1 and collect what each printed."""

import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(argv_of, n: int, *, timeout_s: float = 240, cwd=None) -> list[tuple[int, str]]:
    """Run ``argv_of(process_id, coordinator)`` for each process; (exit code, output) each.

    A process still running after ``timeout_s`` is killed and reported with exit code None.
    """
    coordinator = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    procs = [
        subprocess.Popen(
            [sys.executable, *map(str, argv_of(i, coordinator))],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd or Path(__file__).parent,
        )
        for i in range(n)
    ]
    out = []
    for proc in procs:
        try:
            text, _ = proc.communicate(timeout=timeout_s)
            out.append((proc.returncode, text))
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
            out.append((None, text))
    return out
