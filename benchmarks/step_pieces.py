"""What one device's optimisation step is made of: the memory of its pieces compiled alone,
and how many of the sky's modes its parameters hold against what each baseline uses.

    python benchmarks/step_pieces.py --preset bench-512 --channels 64
    python benchmarks/step_pieces.py --preset bench-512 --channels 64 --stations 256

Pieces, each lowered and compiled from abstract shapes on one CPU device (as
``benchmarks/memory.py`` compiles the stages): the loss; its value and gradient; a
Hessian-vector product (forward over reverse, as the Newton and trust-region polishes take
it); a Gauss-Newton product (``joint.gauss_newton``: the model's tangent, then its cotangent;
the Hessian without the residuals' curvature); the gradient phases' step; the polish's step
(``--polish``'s, with ``--curvature``'s products). Each is reported in bytes and in
visibility cubes (n_bl x n_freq x n_time complex64): everything visibility-shaped scales
with the cube, everything parameter-shaped with the sky's modes.

The sky's modes: one box of modes (n_kf, n_kt) for every baseline, sized by the baseline
with the largest fringe rate and delay, against what each baseline's own spectrum keeps (the
modes above the cutoff) and what the sky holds in groups with their own boxes
(``tabascal.model.sky``: at most ``sky.groups`` of them in the model, 4 by default), for at
most 1..``--groups`` groups. The pieces are compiled for the model's own groups.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

PIECES = ("loss", "value_and_grad", "hvp", "gauss_newton", "gradient_step", "polish_step")


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bench-512")
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--stations", type=int, default=None, help="override n_stations")
    parser.add_argument("--rfi", default="hybrid", choices=sorted(_common.RFI_ROUTES))
    parser.add_argument("--pieces", nargs="+", default=list(PIECES), choices=PIECES)
    parser.add_argument("--groups", type=int, default=6, help="most sky groups to consider")
    parser.add_argument(
        "--polish",
        default=None,
        help="fit.polish of the polish's step (default: the fit's own, levenberg-marquardt)",
    )
    parser.add_argument(
        "--curvature",
        default=None,
        choices=("hessian", "gauss-newton"),
        help="fit.polish_curvature of the polish's step (default: the fit's own, hessian)",
    )
    parser.add_argument("--json", type=Path, default=None, help="output path (default results/)")
    return parser.parse_args(argv)


def sky_modes(meta, model_config, geometry, max_groups: int) -> dict:
    """The sky's one box for every baseline against each baseline's own, and in groups with
    their own boxes (``sky.group_boxes``, at most 1..max_groups; the model's own is
    ``sky.groups``); geometry: ``frame.observation_geometry``'s."""
    from dataclasses import replace

    from tabascal.model import sky

    rate, delay = geometry.sky_fringe_rate_hz, geometry.sky_delay_s
    one_box = replace(model_config.sky, groups=1)
    grid = sky.make_grid(
        one_box, rate, meta.n_freq, meta.n_time, meta.chan_width, meta.int_time, delay_s=delay
    )
    (group,) = sky.make_constants(one_box, grid, rate, delay_s=delay, dtype=np.float32).groups
    n_kf = (np.asarray(group.weight_freq) > 0).sum(axis=1)
    n_kt = (np.asarray(group.weight_time) > 0).sum(axis=1)
    half_f, half_t = (n_kf - 1) // 2, (n_kt - 1) // 2
    box = (2 * grid.half_freq + 1) * (2 * grid.half_time + 1)
    grouped = []
    for most in range(1, max_groups + 1):
        boxes = sky.group_boxes(half_f, half_t, most)
        counts = np.bincount(sky.group_labels(boxes, half_f, half_t), minlength=len(boxes))
        sizes = [(int(c), 2 * f + 1, 2 * t + 1) for c, (f, t) in zip(counts, boxes, strict=True)]
        grouped.append({
            "most_groups": most,
            "groups": len(boxes),
            "modes": int(sum(c * f * t for c, f, t in sizes)),
            "boxes": sizes,
        })  # fmt: skip
    return {
        "box": [2 * grid.half_freq + 1, 2 * grid.half_time + 1],
        "cells": [meta.n_freq, meta.n_time],
        "shared_modes": int(meta.n_bl * box),
        "own_modes": int(np.sum(n_kf * n_kt)),
        "own_median": [float(np.median(n_kf)), float(np.median(n_kt))],
        "nyquist_fractions": {
            "fringe_rate_max": float(np.max(rate) * 2 * meta.int_time),
            "fringe_rate_p99": float(np.quantile(rate, 0.99) * 2 * meta.int_time),
            "delay_max": float(np.max(delay) * 2 * meta.chan_width),
            "delay_p99": float(np.quantile(delay, 0.99) * 2 * meta.chan_width),
        },
        "grouped": grouped,
        "model_groups": model_config.sky.groups,
    }


def measure_pieces(model, fit_config, pieces) -> dict:
    """Compile each piece for ``model`` (abstract) on one device; return its memory figures."""
    import dataclasses
    from functools import partial

    import jax

    from tabascal import fitting, parallel, planning
    from tabascal.fitting import optimiser, phases

    placed = planning.place_abstract(model, "none", None)
    constants, data, params = planning.abstract_arrays(
        (placed.constants, placed.data, placed.params)
    )
    loss_fn = partial(parallel.route("none").loss, spec=placed.spec)
    inputs = (constants, data)

    def value(p, i):
        return loss_fn(p, i)[0]

    def hvp(p, v, i):
        return jax.jvp(lambda q: jax.grad(value)(q, i), (p,), (v,))[1]

    def gauss_newton(p, v, i):
        return parallel.route("none").gauss_newton(p, v, i, placed.spec)

    polished = dataclasses.replace(fit_config, polish_steps=max(fit_config.polish_steps, 1))
    optimizer = optimiser.make_optimizer(polished)
    step = fitting.route_step(parallel.route("none"), placed.spec, polished, optimizer)
    state = jax.eval_shape(partial(optimiser.init_state, optimizer=optimizer), params)
    programs = {
        "loss": lambda: jax.jit(value).lower(params, inputs),
        "value_and_grad": lambda: jax.jit(jax.value_and_grad(value)).lower(params, inputs),
        "hvp": lambda: jax.jit(hvp).lower(params, params, inputs),
        "gauss_newton": lambda: jax.jit(gauss_newton).lower(params, params, inputs),
        "gradient_step": lambda: step.lower(state, inputs),
        "polish_step": lambda: step.jitted.lower(phases.polish_form(state, optimizer), inputs),
    }
    out = {}
    for name in pieces:
        start = time.perf_counter()
        compiled = programs[name]().compile()
        out[name] = {
            **planning.stage_memory(compiled).as_dict(),
            "seconds_compile": time.perf_counter() - start,
        }
        print(f"  {name} compiled in {out[name]['seconds_compile']:.0f} s", flush=True)
    return out


def main(argv=None) -> dict:
    options = _arguments(argv)
    _common.use_cpu_devices(1)
    import jax

    from tabascal.fitting import run_config
    from tabascal.model import frame, joint
    from tabascal.simulate import presets

    jax.config.update("jax_enable_x64", False)
    record = _common.provenance(["benchmarks/step_pieces.py", *(argv or sys.argv[1:])])
    extra = {"array": {"n_stations": options.stations}} if options.stations else None
    scene = presets.observation_scene(
        options.preset, _common.preset_overrides(options.channels, extra)
    )
    meta = scene.meta
    # --polish before the fit's defaults resolve: those that follow the polish follow it
    polish = {"fit": {"polish": options.polish}} if options.polish else None
    config = _common.run_config(options.rfi, extra=polish)
    model_config = run_config.model_config(config)
    start = time.perf_counter()
    geometry = frame.observation_geometry(meta, model_config)
    model = joint.abstract_model(meta, model_config, snr=presets.expected_snr(scene), geom=geometry)
    cube = meta.n_bl * meta.n_freq * meta.n_time * 8
    params = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(model.params))
    print(
        f"{options.preset}, {options.channels} channels, {meta.n_ant} stations, {meta.n_bl} "
        f"baselines: cube {_common.gb(cube)} GB, parameters {_common.gb(params)} GB "
        f"(sky modes {model.info['sky_modes']}; model in {time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    record.update(
        preset=options.preset, channels=options.channels, n_ant=meta.n_ant, n_bl=meta.n_bl,
        n_time=meta.n_time, rfi=options.rfi, cube_bytes=cube, parameter_bytes=params,
        rfi_groups=model.info["rfi_groups"],
    )  # fmt: skip
    record["sky"] = sky_modes(meta, model_config, geometry, options.groups)
    fit_config = run_config.fit_config(config)
    if options.curvature is not None:
        fit_config = dataclasses.replace(fit_config, polish_curvature=options.curvature)
    record["polish"] = fit_config.polish
    record["polish_curvature"] = fit_config.polish_curvature
    record["pieces"] = measure_pieces(model, fit_config, options.pieces)

    print(f"{'piece':>15} {'arguments GB':>13} {'temporaries GB':>15} {'cubes':>7} {'params':>7}")
    for name, piece in record["pieces"].items():
        temps = piece["temporaries"]
        print(
            f"{name:>15} {_common.gb(piece['arguments']):>13} {_common.gb(temps):>15} "
            f"{temps / cube:7.2f} {temps / params:7.2f}"
        )
    sky = record["sky"]
    print(
        f"sky box {sky['box']} for {sky['cells']} cells; each baseline's own modes: "
        f"{sky['own_modes'] / sky['shared_modes']:.3f} of the shared box's (median "
        f"{sky['own_median']})"
    )
    for row in sky["grouped"]:
        share = row["modes"] / sky["shared_modes"]
        print(f"  at most {row['most_groups']} ({row['groups']}): {share:.3f}  {row['boxes']}")
    path = _common.write_json([record], options.json, "step_pieces")
    print(f"wrote {path}")
    return record


if __name__ == "__main__":
    main()
