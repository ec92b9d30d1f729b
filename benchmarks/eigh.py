"""The Levenberg-Marquardt solver's block eigendecompositions on the CPU: the Jacobi method it
uses there (``fitting.jacobi``) against jax's LAPACK ``jnp.linalg.eigh``, which deadlocks
when several run at once (the module's note), timed here one at a time.

    python benchmarks/eigh.py

For each batch of random symmetric blocks (the shapes the solver meets: the demo's and
HERA-19's leaves, and larger), in float32 and float64: seconds per decomposition (the best
of ``--repeats``, compiled beforehand), the Jacobi sweeps taken, and the largest eigenvalue
error against numpy's float64 LAPACK relative to the largest entry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _common

#: (rows, n): the demo's RFI (2, 50) and sky (64, 5); HERA-19's RFI at the per-antenna signal
#: (38, 110) and sky (1216, 5); and a larger RFI block.
SHAPES = [(2, 50), (64, 5), (38, 110), (1216, 5), (4, 300)]


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def measure(rows: int, n: int, dtype: str, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tabascal.fitting import jacobi

    a = np.random.default_rng(0).normal(size=(rows, n, n))
    a = (a + np.swapaxes(a, 1, 2)).astype(dtype)
    want = np.linalg.eigvalsh(a.astype(np.float64))
    with jax.enable_x64(dtype == "float64"):
        ours = jax.jit(jacobi.jacobi_sweeps)
        values, _, sweeps = ours(a)
        error = np.max(np.abs(np.sort(np.asarray(values, np.float64), axis=1) - want))
        return {
            "rows": rows,
            "n": n,
            "dtype": dtype,
            "jacobi_s": min(_common.warm_seconds(ours, a, repeats=repeats)),
            "lapack_s": min(_common.warm_seconds(jax.jit(jnp.linalg.eigh), a, repeats=repeats)),
            "sweeps": int(sweeps),
            "error": float(error / np.max(np.abs(a))),
        }


def main(argv=None) -> int:
    options = _arguments(argv)
    base = _common.provenance(["benchmarks/eigh.py", *(argv or sys.argv[1:])])
    records = []
    print(f"{'rows x n x n':>14} {'dtype':>8} {'jacobi ms':>10} {'lapack ms':>10} "
          f"{'sweeps':>6} {'error':>8}")  # fmt: skip
    for dtype in ("float32", "float64"):
        for rows, n in SHAPES:
            record = measure(rows, n, dtype, options.repeats)
            records.append({**base, **record})
            print(f"{f'{rows} x {n} x {n}':>14} {dtype:>8} {1e3 * record['jacobi_s']:>10.2f} "
                  f"{1e3 * record['lapack_s']:>10.2f} {record['sweeps']:>6} "
                  f"{record['error']:>8.1e}")  # fmt: skip
    print(f"wrote {_common.write_json(records, options.json, 'eigh')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
