"""Median optimisation-step time of each sharding axis on virtual CPU devices, interleaved,
and each axis's work per device from XLA's cost analysis.

    python benchmarks/step_time.py --devices 4 --stations 128 --channels 4
    python benchmarks/step_time.py --devices 4 --stations 256 --channels 4 --cost-only

The problem is the bench-96 preset with ``--stations`` stations, ``--channels`` channels,
``--times`` integrations and ``--satellites`` satellites, built from its metadata
(``joint.abstract_model``) with data drawn from the model itself (``_common.synthetic_model``:
a prior draw through ``joint.predict`` plus unit noise; no simulation). Every axis places the
same model on the same ``--devices`` virtual CPU devices ("none": one device) and compiles its
step; then ``--rounds`` rounds each time ``--steps`` steps of every axis in turn, so a change
of load on a shared machine touches every axis alike. Reported: per axis the median over
rounds of the per-step time, and its ratio to the source axis's.

Work per device (``step_cost``): the compiled step's flops, bytes accessed and transcendentals
from XLA's cost analysis, which describes the one program every device of an SPMD computation
runs on its own shards, so its figures are one device's; the total over devices; and the ratio
of that total to the one device's work of "none", the redundant work the split adds. With
``--pieces`` (the default) the flops are split into the RFI term, the sky and the gains, each
compiled on its own as the forward and backward of a sum of squares of that term's output on
the axis's placed arrays; "other" is the step less those (the likelihood, the priors, the
optimiser's update, the sums across devices). The RFI term of each RFI group alone is costed
the same way, beside the rows of that group each device evaluates (``placement``).
``--cost-only`` compiles and reports the costs without timing: fast, and independent of the
machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

# tabascal.parallel.routes.ROUTES, restated because importing it imports jax, which must
# wait until the device count is set.
AXES = ("none", "source", "baseline", "reuse")
#: XLA's cost-analysis keys of the figures reported, by the record's names.
COST_KEYS = {
    "flops": "flops",
    "bytes_accessed": "bytes accessed",
    "transcendentals": "transcendentals",
}
PIECES = ("rfi", "sky", "gains")


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--stations", type=int, default=128)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--times", type=int, default=90)
    parser.add_argument("--satellites", type=int, default=8)
    parser.add_argument("--rfi", default="hybrid", choices=list(_common.RFI_ROUTES))
    parser.add_argument("--axes", nargs="+", default=list(AXES), choices=AXES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per axis per round")
    parser.add_argument(
        "--phase-cache",
        default="auto",
        choices=("auto", "always", "never"),
        help="rfi.phase_cache: the analytic groups' phase moments kept within the budget "
        "(auto, the default), always, or formed at every step (never)",
    )
    parser.add_argument(
        "--cost-only",
        action="store_true",
        help="compile every axis's step and report XLA's cost analysis, without timing",
    )
    parser.add_argument(
        "--pieces",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also compile the RFI term, the sky and the gains apart to split the flops",
    )
    parser.add_argument(
        "--row-blocks",
        type=int,
        nargs="+",
        default=[],
        help="also the baseline axis with its rows in each of these numbers of blocks per "
        "device taken in turn (sharding.row_blocks), as axis 'baseline/K'",
    )
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args(argv)
    if any(k < 2 for k in options.row_blocks):
        parser.error("--row-blocks takes numbers of blocks of 2 or more (1 is 'baseline')")
    for name in ("devices", "stations", "channels", "times", "satellites", "rounds", "steps"):
        if getattr(options, name) < 1:
            parser.error(f"--{name} must be at least 1, not {getattr(options, name)}")
    return options


# XLA's cost analysis counts a while loop's body once, whatever its trip count (a 10-step
# fori_loop of a (256, 256) matmul reports one matmul's 2 * 256**3 flops, jax 0.10.2 on CPU),
# and the RFI operators run their blocks under lax.map: each loop body is costed on its own
# here and counted as many times as the loop runs (its "known_trip_count").
_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) \(", re.M)
_WHILE = re.compile(r" while\(.*condition=%([\w.\-]+), body=%([\w.\-]+)(.*)$", re.M)
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_NAME = re.compile(r"%([\w.\-]+)")
# Computations an instruction runs in its place, other than a loop's body and condition.
_CALLED = re.compile(
    r"(?:calls|to_apply|true_computation|false_computation)=%([\w.\-]+)"
    r"|branch_computations=\{([^}]*)\}"
)


def _drop_attribute(line: str, key: str) -> str:
    """``line`` without ``, key={...}`` (braces matched)."""
    start = line.find(f", {key}={{")
    if start < 0:
        return line
    depth = 0
    for end in range(line.index("{", start), len(line)):
        depth += {"{": 1, "}": -1}.get(line[end], 0)
        if depth == 0:
            return line[:start] + line[end + 1 :]
    raise ValueError(f"unbalanced braces after {key}= in the HLO module's header")


class _LoopCost:
    """The cost of an optimised HLO module (``Compiled.as_text()``) with every while loop's
    body and condition counted as many times as they run."""

    def __init__(self, text: str, client):
        from jax._src.lib import _jax, hlo

        self._analyse = lambda module: _jax.hlo_module_cost_analysis(client, module)
        self._parse = hlo.hlo_module_from_text
        heads = list(_COMPUTATION.finditer(text))
        if not heads:
            raise ValueError("no HLO computation found in the compiled module's text")
        first, rest = text[: heads[0].start()].split("\n", 1)
        # The layout and the aliases (the donated state) are of the old entry's signature; a
        # schedule would name the old entry too.
        for key in ("entry_computation_layout", "input_output_alias", "buffer_donor"):
            first = _drop_attribute(first, key)
        self._header = first.replace(", is_scheduled=true", "") + "\n" + rest
        self.blocks, self.entry = {}, None
        for i, head in enumerate(heads):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            block = text[head.start() : end]
            if head.group(1):
                self.entry, block = head.group(2), block[len("ENTRY ") :]
            self.blocks[head.group(2)] = block
        self._raw, self._full = {}, {}
        self.loops, self.unknown_trips = 0, 0

    def _reachable(self, name: str) -> list[str]:
        seen, todo = {name}, [name]
        while todo:
            for called in _NAME.findall(self.blocks[todo.pop()]):
                if called in self.blocks and called not in seen:
                    seen.add(called)
                    todo.append(called)
        return [n for n in self.blocks if n in seen]  # the module's order: callees first

    def raw(self, name: str) -> dict:
        """XLA's figures of computation ``name`` as an entry: nested loop bodies counted once."""
        if name not in self._raw:
            blocks = [
                ("ENTRY " if n == name else "") + self.blocks[n] for n in self._reachable(name)
            ]
            cost = self._analyse(self._parse(self._header + "".join(blocks)))
            self._raw[name] = {k: float(cost.get(key, 0.0)) for k, key in COST_KEYS.items()}
        return self._raw[name]

    def _loops_in(self, name: str):
        """(condition, body, trip count or None) of the loops run by ``name`` itself or by the
        computations it calls other than as a loop's body or condition."""
        block = self.blocks[name]
        for condition, body, attributes in _WHILE.findall(block):
            trip = _TRIP.search(attributes)
            yield condition, body, int(trip.group(1)) if trip else None
        called = set()
        for one, branches in _CALLED.findall(block):
            called |= {one} if one else set(_NAME.findall(branches))
        for computation in sorted(called):
            yield from self._loops_in(computation)

    def full(self, name: str | None = None) -> dict:
        """The figures of computation ``name`` (the entry when None) with every loop counted
        ``known_trip_count`` times (once where XLA does not know it; ``unknown_trips``)."""
        name = self.entry if name is None else name
        if name not in self._full:
            cost = dict(self.raw(name))
            for condition, body, trip in self._loops_in(name):
                self.loops += 1
                self.unknown_trips += trip is None
                runs = 1 if trip is None else trip
                for part, times in ((body, runs), (condition, runs + 1)):
                    inner, once = self.full(part), self.raw(part)
                    for k in cost:
                        cost[k] += times * inner[k] - once[k]
            self._full[name] = cost
        return self._full[name]


def step_cost(compiled) -> dict:
    """One device's flops, bytes accessed and transcendentals of a compiled (SPMD) program.

    ``Compiled.cost_analysis()`` is XLA's HloCostAnalysis of the partitioned module, the one
    program every device runs on its own shards, so its figures are per device (a (512, 512)
    matmul with its left operand split by rows over 4 devices reports a quarter of the one
    device's flops and bytes). Returned: "per_device" with every loop counted as often as it
    runs (``_LoopCost``), "xla_loops_once" (``cost_analysis()`` itself, which the loop count
    starts from and is checked against), "loops" and "loops_of_unknown_trip" (counted once).
    """
    import jax

    xla = compiled.cost_analysis()
    if not isinstance(xla, dict):
        raise RuntimeError(f"XLA's cost analysis is not available here: got {xla!r}")
    once = {k: float(xla.get(key, 0.0)) for k, key in COST_KEYS.items()}
    text = compiled.as_text()
    if len(re.findall(r"^HloModule ", text, re.M)) != 1:
        raise RuntimeError("the compiled program is not one HLO module: cannot count its loops")
    counter = _LoopCost(text, jax.devices()[0].client)
    if counter.raw(counter.entry) != once:
        raise RuntimeError(
            f"the reparsed module's cost {counter.raw(counter.entry)} differs from the compiled "
            f"program's {once}: the loop count cannot be trusted"
        )
    full = counter.full()
    return {
        "per_device": full,
        "xla_loops_once": once,
        "loops": counter.loops,
        "loops_of_unknown_trip": counter.unknown_trips,
    }


def _sum_of_squares(x):
    import jax.numpy as jnp

    return jnp.sum(jnp.real(x) ** 2 + jnp.imag(x) ** 2)


def piece_costs(route, placed) -> dict:
    """Per-device cost (``step_cost``) of the forward and backward of each term of the model
    on ``placed``'s arrays: "rfi" the route's ``predict_rfi`` by the RFI parameters, "sky"
    ``sky.forward`` by the sky's, "gains" ``gains.apply`` of ``gains.forward`` by the gains'
    parameters and the visibilities (a cube placed as the data); and "rfi <group>" the RFI
    term of each RFI group alone."""
    import jax

    from tabascal.model import gains, sky

    c, params, spec = placed.constants, placed.params, placed.spec
    # (function, differentiated arguments, constants): the constants are arguments too, so
    # that they are not captured into the program as literals.
    terms = {
        "rfi": (
            lambda z, c: _sum_of_squares(route.predict_rfi(z, c, spec)),
            (params.rfi,),
            (c,),
        ),
        "sky": (lambda s, c: _sum_of_squares(sky.forward(s, c)), (params.sky,), (c.sky,)),
        "gains": (
            lambda g, vis, c: _sum_of_squares(
                gains.apply(vis, gains.forward(g, c.gains), c.a1, c.a2)
            ),
            (params.gains, placed.data.vis),
            (c,),
        ),
    }
    for g, group in enumerate(placed.info["rfi_groups"]):
        one = _one_group(spec, g)
        terms[f"rfi {group}"] = (
            lambda z, c, one=one: _sum_of_squares(route.predict_rfi(z, c, one)),
            (params.rfi,),
            (c._replace(groups=(c.groups[g],)),),
        )
    costs = {}
    for name, (fn, args, fixed) in terms.items():
        grad = jax.jit(jax.grad(fn, argnums=tuple(range(len(args)))))
        costs[name] = step_cost(grad.lower(*args, *fixed).compile())["per_device"]
    return costs


def _one_group(spec, g: int):
    """A placed ``spec`` (``joint.ModelSpec``, or a sharded spec holding one as ``model``)
    with RFI group ``g`` alone."""
    if hasattr(spec, "model"):
        return dataclasses.replace(spec, model=_one_group(spec.model, g))
    return dataclasses.replace(spec, groups=(spec.groups[g],))


def _cost_fields(cost: dict, pieces: dict | None, n_dev: int, single: dict | None) -> dict:
    per = cost["per_device"]
    fields = {}
    for k in COST_KEYS:
        fields[f"{k}_per_device"] = per[k]
        fields[f"{k}_total"] = per[k] * n_dev
        fields[f"{k}_total_over_none"] = per[k] * n_dev / single[k] if single else None
        fields[f"{k}_per_device_xla_loops_once"] = cost["xla_loops_once"][k]
    fields["cost_loops"] = cost["loops"]
    fields["cost_loops_of_unknown_trip"] = cost["loops_of_unknown_trip"]
    if pieces is not None:
        terms = {name: pieces[name]["flops"] for name in PIECES}
        fields["flops_per_device_by_piece"] = {**terms, "other": per["flops"] - sum(terms.values())}
        fields["flops_per_device_by_rfi_group"] = {
            name.removeprefix("rfi "): p["flops"]
            for name, p in pieces.items()
            if name.startswith("rfi ")
        }
        fields["pieces_per_device"] = pieces
    return fields


def _placement(placed) -> dict:
    """What each device evaluates: the rows of every RFI group (each padded to the group's
    largest share), the antennas whose signal it synthesises, and the route's padding."""
    model_spec = getattr(placed.spec, "model", placed.spec)
    names = list(placed.info["rfi_groups"])
    rows = [tables.indices.a1.shape[-1] for tables in placed.constants.groups]
    antenna_ids = getattr(placed.spec, "antenna_ids", None)
    if antenna_ids is not None:  # the reuse plan: each device's compact antenna table
        antennas = max(len(ids) for ids in antenna_ids)
    elif hasattr(placed.spec, "n_ghost"):  # the baseline axis: every antenna and the ghosts
        antennas = model_spec.n_ant + placed.spec.n_ghost
    else:
        antennas = model_spec.n_ant
    info = {"group_rows_per_device": dict(zip(names, rows, strict=True))}
    info["antennas_per_device"] = antennas
    for key in ("block_size", "n_ghost", "n_src_padded", "reuse_plan"):
        if key in placed.info:
            info[key] = placed.info[key]
    return info


def _axis_blocks(label: str) -> tuple[str, int]:
    """("baseline", 4) from "baseline/4"; (axis, 1) from a plain axis."""
    axis, _, blocks = label.partition("/")
    return axis, int(blocks or 1)


def _compile_axis(label, model, options, optimizer):
    """Place ``model`` on the axis of ``label`` ("baseline/K": K blocks of rows per device),
    compile its step and cost it; the first step is timed unless ``--cost-only``."""
    import jax

    from tabascal import parallel, planning
    from tabascal.fitting import optimiser

    axis, blocks = _axis_blocks(label)
    route = parallel.route(axis)
    placed = route.place(model, route.make_mesh(options.devices), row_blocks=blocks)
    inputs = (placed.constants, placed.data)
    step = optimiser.make_step(lambda p, i, r=route, s=placed.spec: r.loss(p, i, s), optimizer)
    # The step donates its state: a copy keeps the model's own parameters for the next axis.
    state = optimiser.init_state(jax.tree.map(jax.numpy.copy, placed.params), optimizer)
    start = time.perf_counter()
    compiled = step.lower(state, inputs).compile()
    run = {
        "compile_seconds": time.perf_counter() - start,
        "per_step": [],
        "phase_cache": placed.info["rfi_phase_cache"],
        "placement": _placement(placed),
        "step_memory": planning.stage_memory(compiled).as_dict(),
    }
    run["cost"] = step_cost(compiled)
    start = time.perf_counter()
    run["pieces"] = piece_costs(route, placed) if options.pieces else None
    run["pieces_compile_seconds"] = time.perf_counter() - start if options.pieces else None
    message = f"{label}: step compiled in {run['compile_seconds']:.1f} s"
    if not options.cost_only:
        start = time.perf_counter()
        state, loss, _ = compiled(state, inputs)
        jax.block_until_ready(loss)
        run["first_seconds"] = run["compile_seconds"] + time.perf_counter() - start
        run.update(step=compiled, state=state, inputs=inputs)
        message += f", compiled and first step in {run['first_seconds']:.1f} s"
    print(message, flush=True)
    return run


def _print_costs(runs: dict, n_dev: dict, options) -> None:
    single = runs["none"]["cost"]["per_device"] if "none" in runs else None
    print("XLA's cost analysis of the step, per device (every loop counted as often as it runs)")
    print(
        f"{'axis':>8} {'devices':>7} {'GFLOP/dev':>10} {'GB/dev':>8} {'Gtrans/dev':>10} "
        f"{'GFLOP all':>10} {'/ none':>7}"
    )
    for axis, run in runs.items():
        per = run["cost"]["per_device"]
        ratio = f"{per['flops'] * n_dev[axis] / single['flops']:.3f}" if single else "-"
        print(
            f"{axis:>11} {n_dev[axis]:>7} {per['flops'] / 1e9:10.4g} "
            f"{per['bytes_accessed'] / 1e9:8.4g} {per['transcendentals'] / 1e9:10.4g} "
            f"{per['flops'] * n_dev[axis] / 1e9:10.4g} {ratio:>7}"
        )
    print("XLA's buffer assignment of the step, per device: GiB of arguments (data, constants,")
    print("kept phase moments, state) and of temporaries")
    print(f"{'axis':>8} {'arguments':>10} {'temporaries':>12} {'moments kept':>13}")
    for axis, run in runs.items():
        mem, kept = run["step_memory"], run["phase_cache"]["kept_mib_per_device"] / 1024
        print(
            f"{axis:>11} {mem['arguments'] / 2**30:10.3f} {mem['temporaries'] / 2**30:12.3f} "
            f"{kept:13.3f}"
        )
    if options.pieces:
        print("GFLOP per device by term (forward and backward, each compiled on its own)")
        print(f"{'axis':>8} {'rfi':>9} {'sky':>9} {'gains':>9} {'other':>9}")
        for axis, run in runs.items():
            flops = [run["pieces"][name]["flops"] for name in PIECES]
            other = run["cost"]["per_device"]["flops"] - sum(flops)
            cells = " ".join(f"{x / 1e9:9.4g}" for x in (*flops, other))
            print(f"{axis:>11} {cells}")
        print("GFLOP per device of the RFI term by group, and each group's rows per device")
        for axis, run in runs.items():
            rows = run["placement"]["group_rows_per_device"]
            cells = ", ".join(
                f"{group} {run['pieces'][f'rfi {group}']['flops'] / 1e9:.4g} ({n} rows)"
                for group, n in rows.items()
            )
            print(f"{axis:>11} {cells}")


def _print_goal(records: list[dict]) -> None:
    """The scale goal: the baseline axis with the reuse plan at most 0.9 of the source axis,
    on wall time (where timed) and on per-device flops."""
    by_axis = {r["axis"]: r for r in records}
    if not {"reuse", "source"} <= set(by_axis):
        return
    reuse, source = by_axis["reuse"], by_axis["source"]
    flops = reuse["flops_per_device"] / source["flops_per_device"]
    wall = "" if reuse["ratio_to_source"] is None else f"wall time {reuse['ratio_to_source']:.3f}, "
    print(f"reuse / source (goal <= 0.9): {wall}per-device flops {flops:.3f}")


def main(argv=None) -> list[dict]:
    options = _arguments(argv)
    _common.use_cpu_devices(options.devices)
    import jax

    from tabascal.fitting import optimiser
    from tabascal.fitting import run_config as rc

    jax.config.update("jax_enable_x64", False)
    extra = {
        "array": {"n_stations": options.stations},
        "observation": {"n_time": options.times},
        "satellites": {"count": options.satellites},
    }
    abstract, config, _ = _common.preset_model("bench-96", options.channels, options.rfi, extra)
    rfi_vis = dataclasses.replace(abstract.spec.rfi_vis, phase_cache=options.phase_cache)
    abstract = dataclasses.replace(
        abstract, spec=dataclasses.replace(abstract.spec, rfi_vis=rfi_vis)
    )
    model = _common.synthetic_model(abstract)
    fit_config = rc.fit_config(config)
    optimizer = optimiser.make_optimizer(fit_config)
    print(
        f"bench-96 at {options.stations} stations ({model.spec.n_bl} baselines), "
        f"{options.channels} channels, {options.times} cells, {options.satellites} satellites, "
        f"{options.rfi} RFI, groups {model.info['rfi_groups']}; {options.devices} devices"
    )
    labels = [*options.axes, *(f"baseline/{k}" for k in options.row_blocks)]
    runs = {label: _compile_axis(label, model, options, optimizer) for label in labels}
    n_dev = {axis: 1 if axis == "none" else options.devices for axis in runs}
    if not options.cost_only:
        _common.interleaved_rounds(runs, options.rounds, options.steps)
    base = _common.provenance(["benchmarks/step_time.py", *(argv or sys.argv[1:])])
    reference = None
    if "source" in runs and not options.cost_only:
        reference = statistics.median(runs["source"]["per_step"])
    if not options.cost_only:
        print(f"{'axis':>11} {'median s':>9} {'min s':>8} {'/ source':>9} {'/ none':>7}")
    single = runs["none"]["cost"]["per_device"] if "none" in runs else None
    records = []
    alone = None
    if "none" in runs and not options.cost_only:
        alone = statistics.median(runs["none"]["per_step"])
    for label, run in runs.items():
        axis, blocks = _axis_blocks(label)
        median = statistics.median(run["per_step"]) if run["per_step"] else None
        ratio = median / reference if reference else None
        if not options.cost_only:
            print(
                f"{label:>11} {median:9.3f} {min(run['per_step']):8.3f} "
                f"{(f'{ratio:.3f}' if ratio else '-'):>9} "
                f"{(f'{median / alone:.3f}' if alone else '-'):>7}"
            )
        records.append(
            {
                **base,
                "preset": "bench-96",
                "stations": options.stations,
                "n_bl": model.spec.n_bl,
                "channels": options.channels,
                "times": options.times,
                "satellites": options.satellites,
                "rfi": options.rfi,
                "rfi_groups": model.info["rfi_groups"],
                "axis": axis,
                "row_blocks": blocks,
                "devices": n_dev[label],
                "rounds": None if options.cost_only else options.rounds,
                "steps_per_round": None if options.cost_only else options.steps,
                "step_seconds_median": median,
                "step_seconds_per_round": run["per_step"],
                "ratio_to_source": ratio,
                "first_step_seconds": run.get("first_seconds"),
                "load_average": list(os.getloadavg()),
                "phase_cache_mode": options.phase_cache,
                "phase_cache": run["phase_cache"],
                "placement": run["placement"],
                "step_memory_per_device": run["step_memory"],
                "cost_only": options.cost_only,
                "compile_seconds": run["compile_seconds"],
                "pieces_compile_seconds": run["pieces_compile_seconds"],
                **_cost_fields(run["cost"], run["pieces"], n_dev[label], single),
            }
        )
    _print_costs(runs, n_dev, options)
    _print_goal(records)
    path = _common.write_json(records, options.json, "step_time")
    print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main()
