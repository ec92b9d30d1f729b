"""The analytic operator's elementwise work by the layout of its elements: one flat axis
against (rows, 128) tiles (`ri_kernels._phase_moments.element_layout`).

    python benchmarks/moment_layout.py                  # 2^17 elements, this machine
    python benchmarks/moment_layout.py --elements 1048576   # an accelerator

On a TPU a (8, 128) tile of a vector register holds the last two axes of an array, so an
array whose second-to-last axis is short (the pieces, the moments in the loops' stacked
outputs), or whose last is (the block's 7 frequency samples) leaves most of each tile empty.
Cases, each compiled, run once, then the best of ``--rounds`` runs, per element, float32:

- the phase moments' curvature expansion (13 moments, navigation-satellite phases: no
  element at or above the switch) by pieces and cubic terms, flat and in tiles;
- the whole moments (`_flat`: the expansion, then the curved elements' patch, which runs only
  where some element is curved) flat and in tiles, and `jnp.nonzero` over the elements alone,
  which is what finding the curved ones cost on every block before the patch was made
  conditional;
- the operator's products (7 x 7 coefficients against 13 moments, complex64) in a block's
  (n, B, 1, 32 satellites, 7 samples) layout and in tiles.

The inputs are placed on the device before timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

OPTIONS = ("2,3", "2,1", "1,3", "1,1")  # pieces, cubic terms
N_MOMENTS, TERMS, N_RFI, N_SAMPLES, N_COEF = 13, 6, 32, 7, 7


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=2**17, help="rounded up to 7168s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--options", nargs="+", default=list(OPTIONS), metavar="PIECES,CUBIC_TERMS",
        help="the expansion's cases",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default results/)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    options = _arguments(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ri_kernels import _phase_moments as P
    from ri_kernels._analytic import _products

    lanes = P._LANES
    block = N_RFI * N_SAMPLES * P._SUBLANES * lanes // 32  # whole tiles and (32, 7) blocks
    n = -(-options.elements // block) * block
    rng = np.random.default_rng(0)
    f32 = np.float32
    zeros = np.zeros(n, f32)
    cubic = P.TurnsCubic(
        rng.uniform(-0.5, 0.5, n).astype(f32), zeros,
        rng.normal(0, 0.3, n).astype(f32), zeros,
        rng.normal(0, 0.005, n).astype(f32), rng.normal(0, 1e-6, n).astype(f32),
    )  # fmt: skip
    layouts = {"flat": lambda v: v, "tiled": lambda v: v.reshape(-1, lanes)}
    rows = []

    def timed(case, layout, fn, *args, elements=n, **labels):
        args = jax.device_put(args)
        compiled = jax.jit(fn).lower(*args).compile()
        jax.block_until_ready(compiled(*args))
        times = []
        for _ in range(options.rounds):
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - start)
        ns = min(times) / elements * 1e9
        rows.append({"case": case, "layout": layout, **labels, "times_s": times, "ns": ns})
        print(f"{case:12s} {layout:6s} {labels!s:36s} {ns:9.2f} ns per element", flush=True)

    for pieces, cubic_terms in (tuple(int(v) for v in o.split(",")) for o in options.options):
        moment_options = P._MomentOptions(N_MOMENTS, pieces, TERMS, cubic_terms)
        for name, lay in layouts.items():
            timed(
                "expansion", name,
                lambda c, o=moment_options: P._evaluate(c, o, with_curved=False)[0],
                jax.tree.map(lay, cubic), pieces=pieces, cubic_terms=cubic_terms,
            )  # fmt: skip
    for name, lay in layouts.items():
        timed(
            "moments", name, lambda c: P._flat(c, N_MOMENTS, 2, TERMS, 1),
            jax.tree.map(lay, cubic), pieces=2, cubic_terms=1,
        )  # fmt: skip
    timed("nonzero", "flat", lambda v: jnp.nonzero(v > 10, size=v.size, fill_value=v.size)[0],
          cubic.b)  # fmt: skip

    def random(shape):
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)

    n_rows = n // (N_RFI * N_SAMPLES)
    for name, shape in (("block", (n_rows, 1, N_RFI, N_SAMPLES)), ("tiled", (n // lanes, lanes))):
        timed(
            "products", name, _products,
            random((N_COEF, *shape)), random((N_COEF, *shape)), random((N_MOMENTS, *shape)),
        )  # fmt: skip
    record = {
        **_common.provenance(["benchmarks/moment_layout.py", *(argv or sys.argv[1:])]),
        "platform": jax.devices()[0].platform,
        "elements": n,
        "rounds": options.rounds,
        "results": rows,
    }
    print(f"wrote {_common.write_json(record, options.out, 'moment_layout')}")


if __name__ == "__main__":
    main()
