"""The joint model evaluated along the baseline axis of a 1-D device mesh ("bl"): the forward
pass, the loss and its Gauss-Newton product under ``shard_map``, and the way back to the data's
rows.

The model arrives placed by ``row_placement``: every array with a baseline axis on ``P("bl")``,
padded rows adding nothing; every visibility-shaped intermediate stays there. ``make_mesh`` and
``shard_model`` are ``row_placement``'s, offered here too so that this module, like
``source_axis``, holds the whole of its route (``routes``).

The RFI term runs in ``shard_map``: each device synthesises the per-antenna signal of its
antennas from the replicated parameters (all of them, or with a reuse plan its compact table),
appends the plan's ghost antennas (zero signal), evaluates each group with its own stacked
index arrays through the ri_kernels seams, scatters into a local (B + 1, n_freq, n_time) buffer
at the plan's positions (padding lands in the spare row B) and keeps the first B rows. The sky
runs in ``shard_map`` too, each device scattering its groups' slots into its block. The gains
and the likelihood act row by row, so they run under ``jit`` on the sharded arrays, with
sharding constraints keeping ``P("bl")`` between components. Only scalars and the gradients of
replicated parameters are summed across devices.

With ``row_blocks`` k (``ShardedSpec.row_blocks``, ``sharding.row_blocks``) each device holds k
blocks of B rows, and every map above takes its device's blocks in turn; ``loss`` then sums the
likelihood block by block (``blocked_nll``), each block recomputed in reverse mode, so that
derivatives hold one block's visibility-shaped intermediates at a time. The Gauss-Newton product
does the same (``blocked_gauss_newton``), and the export predicts block j of every device's rows
in turn (``predict_block``, ``rows_block``).

``unpad`` and ``unpad_params`` bring results to the host in the data's rows and order, undoing
the placement's padding and permutation.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tabascal.model import gains, joint, likelihood, orbit_corrections, rfi_signal, rfi_vis, sky
from tabascal.parallel.row_placement import AXIS, ShardedSpec, factor_per_device
from tabascal.parallel.row_placement import make_mesh as make_mesh
from tabascal.parallel.row_placement import shard_model as shard_model


def _keep_rows(x: jax.Array, spec: ShardedSpec) -> jax.Array:
    return jax.lax.with_sharding_constraint(x, NamedSharding(spec.mesh, P(AXIS)))


def _map_devices(device, inputs: dict, out_specs, spec: ShardedSpec):
    """``device`` over the mesh, called with ``inputs``'s values by name."""
    names = list(inputs)
    mapped = jax.shard_map(
        lambda *values: device(**dict(zip(names, values, strict=True))),
        mesh=spec.mesh,
        in_specs=tuple(part for _, part in inputs.values()),
        out_specs=out_specs,
    )
    return mapped(*(value for value, _ in inputs.values()))


def _in_blocks(tree, n: int):
    """Each leaf's leading axis (n k, ...) as (n, k, ...): a device's arrays by block."""
    return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), tree)


def _by_block(fn, parts, spec: ShardedSpec, *, remat: bool = False):
    """fn(block's parts) over the device's ``spec.row_blocks`` blocks in turn (``lax.map``),
    the outputs' block axis merged into their leading one; with one block, fn(parts). remat:
    each block's work is recomputed in reverse mode (``jax.checkpoint``), so that derivatives
    hold one block's intermediates at a time."""
    n = spec.row_blocks
    if n == 1:
        return fn(parts)
    out = jax.lax.map(jax.checkpoint(fn) if remat else fn, _in_blocks(parts, n))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)


def _block_of(tree, j, spec: ShardedSpec):
    """Block ``j`` (a traced index) of a device's per-block arrays (leading axis row_blocks
    k, ...), each (k, ...); in the map."""
    return jax.tree.map(lambda x: x[j], _in_blocks(tree, spec.row_blocks))


def _append_ghosts(x: jax.Array, n_ghost: int) -> jax.Array:
    return jnp.concatenate([x, jnp.zeros((n_ghost, *x.shape[1:]), x.dtype)])


def _device_antennas(x: jax.Array, spec: ShardedSpec) -> jax.Array:
    """This device's per-antenna rows (n_ant_total, ...) of ``x`` (n_ant, ...); in the map.

    Without a reuse plan: every antenna, then the ghosts. With one: a gather of the device's
    compact antenna table from ``x`` with a zero row appended (ghosts and unused slots select
    it). The gather's transpose adds each compact antenna's cotangent into its global antenna.
    """
    if spec.antenna_ids is None:
        return _append_ghosts(x, spec.n_ghost)
    table = jnp.asarray(np.asarray(spec.antenna_ids, np.int32))
    ids = table[jax.lax.axis_index(AXIS)]
    return _append_ghosts(x, 1)[ids]


def _device_geometry(phase, delay_us, spec: ShardedSpec):
    """This device's phase and delays (n_ant_total, ...) in its antenna numbering; in the map.
    Placed per device (``spec.device_geometry``) they arrive as this device's block, a
    leading axis of 1; replicated, they are taken from every antenna's."""
    if spec.device_geometry:
        return phase[0], delay_us[0]
    return _device_antennas(phase, spec), _device_antennas(delay_us, spec)


def _geometry_partition_spec(spec: ShardedSpec):
    return P(AXIS) if spec.device_geometry else P()


def _signal_partition_specs(signal: rfi_signal.RfiSignalConstants):
    """The RFI signal's constants on the map: replicated, but for a factor placed per device."""
    specs = jax.tree.map(lambda _: P(), signal)
    return specs._replace(factor=P(AXIS)) if factor_per_device(signal) else specs


def device_signal(rfi_params, signal, phase, delay_us, spec: ShardedSpec):
    """This device's RFI signal and geometry, in the map: (amp, factor, phase, delay_us), each
    with an antenna axis of the device's antennas (with a reuse plan, its compact table).

    rfi_params, signal: the RFI signal's parameters and constants (``rfi_signal``; the shared
    signal's factor this device's block, (1, n_ant_total, ...), where it is placed per device),
    phase: (n_ant, n_src, n_freq, n_time), delay_us: (n_ant, n_src, n_time, n_path), all antennas
    (replicated), or with ``spec.device_geometry`` this device's block of them (1,
    n_ant_total, ...). The signal is synthesised for the device's antennas alone, so its
    fine-grid arrays and their cotangents scale with those antennas; the shared signal is
    passed to the operators as its part shared by every antenna and the factor, whose product
    they form per block (``rfi_signal.forward_parts``).
    """
    # Varying from the parameters on: every group's cotangent then accumulates on the device
    # and crosses devices once, as the modes' gradient, rather than once per group as a
    # signal-sized cube.
    varying = rfi_params._replace(z=jax.lax.pcast(rfi_params.z, AXIS, to="varying"))
    if factor_per_device(signal):  # the shared signal's factor, this device's block of it
        device_params, device_signal = varying, signal._replace(factor=signal.factor[0])
    else:
        device_params, device_signal = rfi_signal.take_antennas(
            varying, signal, lambda x: _device_antennas(x, spec)
        )
    amp, factor = rfi_signal.forward_parts(device_params, device_signal)
    phase, delay_us = _device_geometry(phase, delay_us, spec)
    return amp, factor, phase, delay_us


_TABLE_FIELDS = tuple(
    f for f in rfi_vis.GroupTables._fields if f not in ("indices", "rows", "moments", "view")
)


def _group_partition_specs(groups):
    """Each group's tables on the map: indices, positions and kept moments split ("bl"), the
    rest replicated."""
    return tuple(
        tables._replace(
            indices=P(AXIS),
            rows=P(AXIS),
            **{f: P() for f in _TABLE_FIELDS},
            moments=None if tables.moments is None else P(AXIS),
            view=None if tables.view is None else P(),
        )
        for tables in groups
    )


def _block_parts(groups) -> tuple:
    """The parts of the RFI groups' tables that differ between blocks of rows: indices,
    positions and kept moments (one entry per block on their leading axis)."""
    return tuple((t.indices, t.rows, t.moments) for t in groups)


def _with_parts(groups, parts) -> tuple:
    return tuple(
        t._replace(indices=i, rows=r, moments=m) for t, (i, r, m) in zip(groups, parts, strict=True)
    )


def _rfi_rows(signal, freq_mhz, groups, spec: ShardedSpec) -> jax.Array:
    """One block's RFI visibilities (B, n_freq, n_time) from ``device_signal``'s ``signal``;
    groups: the block's tables, indices, positions and kept moments with a leading axis of 1."""
    amp, factor, phase, delay_us = signal
    n_freq, n_time = amp.shape[2], amp.shape[3]
    block = jnp.zeros((spec.block_size + 1, n_freq, n_time), amp.dtype)
    for group_spec, tables in zip(spec.model.groups, groups, strict=True):
        local = tables._replace(
            indices=jax.tree.map(lambda x: x[0], tables.indices),
            moments=None if tables.moments is None else tables.moments[0],
        )
        out = rfi_vis.evaluate_group(
            group_spec, local, amp, phase, delay_us, freq_mhz, spec.model.rfi_vis, factor
        )
        # Real positions are distinct; padded entries all add into the spare row B.
        block = block.at[tables.rows[0]].add(out)
    return block[: spec.block_size]


def rfi_block(rfi_params, signal, phase, delay_us, freq_mhz, groups, spec: ShardedSpec):
    """One device's RFI visibilities (row_blocks B, n_freq, n_time); runs inside ``shard_map``.

    The arguments as ``device_signal`` takes them, and groups: this device's tables, indices
    and positions with a leading axis of row_blocks (antenna ids in the device's numbering:
    global, or compact with a reuse plan). The blocks run in turn. The replicated parameters'
    gradients are summed over devices by the map's transpose.
    """
    device = device_signal(rfi_params, signal, phase, delay_us, spec)

    def block(parts):
        return _rfi_rows(device, freq_mhz, _with_parts(groups, parts), spec)

    return _by_block(block, _block_parts(groups), spec)


def keep_phase_moments(constants: joint.ModelConstants, spec: ShardedSpec, keep):
    """``constants`` with the phase moments of the groups ``keep`` marks formed once, each
    device forming those of its own rows (a leading axis of row_blocks per device, on
    ``P("bl")``), from the antennas ``rfi_block`` gives its operators."""
    kept = [g for g, k in enumerate(keep) if k]
    if not kept:
        return constants

    def block(phase, delay_us, freq_mhz, groups):
        phase, delay_us = _device_geometry(phase, delay_us, spec)

        def one(indices):
            out = []
            for g, index in zip(kept, indices, strict=True):
                local = groups[g]._replace(indices=jax.tree.map(lambda x: x[0], index))
                moments = rfi_vis.group_moments(
                    spec.model.groups[g],
                    local,
                    phase,
                    delay_us,
                    freq_mhz,
                    spec.model.rfi_vis,
                )
                out.append(moments[None])
            return tuple(out)

        return _by_block(one, tuple(groups[g].indices for g in kept), spec)

    geometry = _geometry_partition_spec(spec)
    mapped = jax.jit(
        jax.shard_map(
            block,
            mesh=spec.mesh,
            in_specs=(geometry, geometry, P(), _group_partition_specs(constants.groups)),
            out_specs=tuple(P(AXIS) for _ in kept),
        )
    )
    moments = mapped(constants.phase, constants.delay_us, constants.freq_mhz, constants.groups)
    groups = list(constants.groups)
    for g, m in zip(kept, moments, strict=True):
        groups[g] = groups[g]._replace(moments=m)
    return constants._replace(groups=tuple(groups))


def _rfi_inputs(rfi_params, orbit_params, constants, spec: ShardedSpec, name: str) -> dict:
    """What each device's RFI rows are computed from, by argument name: (value, partition
    spec) of the RFI signal's parameters and constants, the geometry with the orbit
    corrections applied, the frequencies and the RFI groups' tables. name: the caller, for the
    error."""
    if spec.device_geometry and orbit_params is not None:
        raise ValueError(
            f"baseline_axis.{name}: orbit corrections given for a model placed with fixed "
            "orbits (its phase and delays are per device); place a model built with orbits.fit"
        )
    phase, delay_us = orbit_corrections.corrected(
        orbit_params, constants.orbits, constants.phase, constants.delay_us, constants.freq_mhz
    )
    geometry = _geometry_partition_spec(spec)
    return {
        "rfi_params": (rfi_params, P()),
        "signal": (
            joint.corrected_signal(constants, orbit_params),
            _signal_partition_specs(constants.rfi_signal),
        ),
        "phase": (phase, geometry),
        "delay_us": (delay_us, geometry),
        "freq_mhz": (constants.freq_mhz, P()),
        "groups": (constants.groups, _group_partition_specs(constants.groups)),
    }


def predict_rfi(
    rfi_params, constants: joint.ModelConstants, spec: ShardedSpec, orbit_params=None
) -> jax.Array:
    """RFI visibilities (n_dev B, n_freq, n_time) on ``P("bl")``, before the gains;
    orbit_params: the orbit corrections, applied to the replicated per-antenna delays before
    the map (None: the orbits as given)."""
    inputs = _rfi_inputs(rfi_params, orbit_params, constants, spec, "predict_rfi")
    vis = _map_devices(partial(rfi_block, spec=spec), inputs, P(AXIS), spec)
    return _keep_rows(vis, spec)


def sky_mean_from_data(
    rfi_params, orbit_params, constants: joint.ModelConstants, vis, flags, spec: ShardedSpec
) -> jax.Array:
    """``sky.mean_from_data(vis - predict_rfi(...), flags)`` (n_dev B,) on ``P("bl")``, each
    device taking its blocks of rows in turn: the sky's data start holds one block's RFI cube
    at a time. vis, flags: the placed data's (``P("bl")``)."""

    def device(rfi_params, signal, phase, delay_us, freq_mhz, groups, rows):
        rfi = device_signal(rfi_params, signal, phase, delay_us, spec)

        def block(parts):
            group_parts, (vis, flags) = parts
            v_rfi = _rfi_rows(rfi, freq_mhz, _with_parts(groups, group_parts), spec)
            return sky.mean_from_data(vis - v_rfi, flags)

        return _by_block(block, (_block_parts(groups), rows), spec)

    inputs = _rfi_inputs(rfi_params, orbit_params, constants, spec, "sky_mean_from_data")
    inputs["rows"] = ((vis, flags), (P(AXIS), P(AXIS)))
    return _map_devices(device, inputs, P(AXIS), spec)


def _sky_partition_specs(constants: sky.SkyConstants):
    group = sky.SkyGroup(rows=P(AXIS), weight_freq=P(AXIS), weight_time=P(AXIS), dft_freq=P(),
                         dft_time=P())  # fmt: skip
    return sky.SkyConstants(groups=(group,) * len(constants.groups), scale=P(AXIS), mean=P(AXIS))


def _sky_parts(constants: sky.SkyConstants) -> tuple:
    """The sky constants' parts that differ between blocks (slots and rows)."""
    groups = tuple((g.rows, g.weight_freq, g.weight_time) for g in constants.groups)
    return groups, constants.scale, constants.mean


def _with_sky_parts(constants: sky.SkyConstants, parts) -> sky.SkyConstants:
    groups, scale, mean = parts
    return sky.SkyConstants(
        groups=tuple(
            g._replace(rows=r, weight_freq=wf, weight_time=wt)
            for g, (r, wf, wt) in zip(constants.groups, groups, strict=True)
        ),
        scale=scale,
        mean=mean,
    )


def _sky_rows(sky_params: sky.SkyParams, constants: sky.SkyConstants, spec: ShardedSpec):
    """One device's sky visibilities (row_blocks B, n_freq, n_time), block by block; in the
    map."""

    def block(parts):
        z, rows = parts
        return sky.forward(sky.SkyParams(z), _with_sky_parts(constants, rows))

    return _by_block(block, (sky_params.z, _sky_parts(constants)), spec)


def predict_sky(sky_params: sky.SkyParams, constants: sky.SkyConstants, spec: ShardedSpec):
    """Sky visibilities (n_blocks B, n_freq, n_time) on ``P("bl")``: each device scatters its
    groups' slots into its blocks (``sky.forward`` on each block's rows)."""
    mapped = jax.shard_map(
        partial(_sky_rows, spec=spec),
        mesh=spec.mesh,
        in_specs=(
            sky.SkyParams((P(AXIS),) * len(constants.groups)),
            _sky_partition_specs(constants),
        ),
        out_specs=P(AXIS),
    )
    return mapped(sky_params, constants)


def predict(params: joint.ModelParams, constants, spec: ShardedSpec) -> joint.Prediction:
    """Sharded ``joint.predict``: cubes (n_dev B, n_freq, n_time) on ``P("bl")``, padded rows
    last; gains (n_ant, n_freq, n_time) replicated. ``unpad`` returns the data's rows."""
    v_rfi = predict_rfi(params.rfi, constants, spec, params.orbits)
    v_sky = _keep_rows(predict_sky(params.sky, constants.sky, spec), spec)
    g = gains.forward(params.gains, constants.gains)
    model = _keep_rows(gains.apply(v_sky + v_rfi, g, constants.a1, constants.a2), spec)
    return joint.Prediction(v_sky, v_rfi, g, model)


def loss(params: joint.ModelParams, inputs, spec: ShardedSpec):
    """Sharded ``joint.loss``: (loss, {"chi2": reduced chi-squared}); inputs = (constants,
    data) of a ``row_placement.ShardedModel``. With ``spec.row_blocks`` > 1 the likelihood is
    summed block by block (``blocked_nll``)."""
    if spec.row_blocks == 1:
        return joint.loss(params, inputs, spec, predict=predict)
    constants, data = inputs
    return joint.posterior(blocked_nll(params, constants, data, spec), params, data.n_points)


def _device_inputs(params: joint.ModelParams, constants, spec: ShardedSpec, name: str) -> dict:
    """``_rfi_inputs``, and the sky's modes and constants and the gains (synthesised here,
    replicated): what each device's blocks of the model are computed from."""
    return {
        **_rfi_inputs(params.rfi, params.orbits, constants, spec, name),
        "z": (params.sky.z, (P(AXIS),) * len(params.sky.z)),
        "sky_c": (constants.sky, _sky_partition_specs(constants.sky)),
        "g": (gains.forward(params.gains, constants.gains), P()),
    }


def _block_model(rfi, freq_mhz, groups, sky_c, g, parts, spec: ShardedSpec):
    """One block's (sky, RFI, model) visibilities (B, n_freq, n_time), in the map: rfi, the
    device's ``device_signal``; parts: the block's (group parts, sky modes, sky parts, (a1,
    a2))."""
    group_parts, z_b, sky_b, (a1, a2) = parts
    v_rfi = _rfi_rows(rfi, freq_mhz, _with_parts(groups, group_parts), spec)
    v_sky = sky.forward(sky.SkyParams(z_b), _with_sky_parts(sky_c, sky_b))
    return v_sky, v_rfi, gains.apply(v_sky + v_rfi, g, a1, a2)


def blocked_nll(params: joint.ModelParams, constants, data: joint.Data, spec: ShardedSpec):
    """The likelihood's -log L (``likelihood.neg_log_likelihood``) summed block by block.

    Each device synthesises its RFI signal and the gains once, then takes its row_blocks
    blocks in turn (``lax.map``): each block's RFI, sky, gains and residuals, reduced to its
    -log L, recomputed in reverse mode (``jax.checkpoint``). So the loss, its gradient and
    Hessian-vector products hold one block's visibility-shaped intermediates at a time, not
    the device's, for one more forward pass per derivative. The devices' sums are added.
    """

    def device(rfi_params, signal, phase, delay_us, freq_mhz, groups, z, sky_c, g, rows):
        rfi = device_signal(rfi_params, signal, phase, delay_us, spec)

        def block(parts):
            *model_parts, (a1, a2, vis, flags, noise) = parts
            _, _, model = _block_model(
                rfi, freq_mhz, groups, sky_c, g, (*model_parts, (a1, a2)), spec
            )
            return likelihood.neg_log_likelihood(model, vis, flags, noise)

        parts = (_block_parts(groups), z, _sky_parts(sky_c), rows)
        per_block = _by_block(lambda p: block(p)[None], parts, spec, remat=True)
        return jax.lax.psum(jnp.sum(per_block), AXIS)

    inputs = _device_inputs(params, constants, spec, "blocked_nll")
    rows = (constants.a1, constants.a2, data.vis, data.flags, data.noise)
    inputs["rows"] = (rows, (P(AXIS),) * len(rows))
    return _map_devices(device, inputs, P(), spec)


#: The device inputs (``_device_inputs``) that depend on the parameters.
_VARYING = ("rfi_params", "signal", "phase", "delay_us", "z", "g")


def blocked_gauss_newton(
    params: joint.ModelParams, tangent: joint.ModelParams, inputs, spec: ShardedSpec
) -> joint.ModelParams:
    """``joint.gauss_newton`` with the likelihood's part summed block by block: J' W J v is
    the gradient over v of q(v) = sum over blocks of |J_b v|^2 / (2 noise^2) (unflagged), each
    block's J_b v a forward-mode derivative of its model, rematerialised in reverse mode. So the
    product holds one block's visibility-shaped tangents at a time, as ``blocked_nll``'s
    derivatives do."""
    constants, data = inputs

    def varying(p):
        full = _device_inputs(p, constants, spec, "blocked_gauss_newton")
        return {name: full[name][0] for name in _VARYING}

    def device(primals, tangents, freq_mhz, groups, sky_c, rows):
        keys = ("rfi_params", "signal", "phase", "delay_us")
        rfi, rfi_dot = jax.jvp(
            partial(device_signal, spec=spec),
            tuple(primals[k] for k in keys),
            tuple(tangents[k] for k in keys),
        )

        def block(parts):
            group_parts, z_b, z_dot, sky_b, (a1, a2, flags, noise) = parts

            def model(rfi, z_b, g):
                parts = (group_parts, z_b, sky_b, (a1, a2))
                return _block_model(rfi, freq_mhz, groups, sky_c, g, parts, spec)[2]

            primal = (rfi, z_b, primals["g"])
            _, m_dot = jax.jvp(model, primal, (rfi_dot, z_dot, tangents["g"]))
            return likelihood.neg_log_likelihood(m_dot, jnp.zeros_like(m_dot), flags, noise)

        parts = (_block_parts(groups), primals["z"], tangents["z"], _sky_parts(sky_c), rows)
        per_block = _by_block(lambda p: block(p)[None], parts, spec, remat=True)
        return jax.lax.psum(jnp.sum(per_block), AXIS)

    placed = _device_inputs(params, constants, spec, "blocked_gauss_newton")
    specs = {name: part for name, (_, part) in placed.items()}
    rows = (constants.a1, constants.a2, data.flags, data.noise)

    def q(v):
        primals, tangents = jax.jvp(varying, (params,), (v,))
        inputs = {
            "primals": (primals, {name: specs[name] for name in _VARYING}),
            "tangents": (tangents, {name: specs[name] for name in _VARYING}),
            "freq_mhz": (constants.freq_mhz, specs["freq_mhz"]),
            "groups": (constants.groups, specs["groups"]),
            "sky_c": (constants.sky, specs["sky_c"]),
            "rows": (rows, (P(AXIS),) * len(rows)),
        }
        return _map_devices(device, inputs, P(), spec)

    pulled = jax.grad(q)(tangent)
    return joint.with_prior_curvature(pulled, params, tangent, data.n_points)


def predict_block(
    params: joint.ModelParams, constants, j: jax.Array, spec: ShardedSpec
) -> joint.Prediction:
    """Block ``j`` (0 to row_blocks - 1) of every device's rows of ``predict``: cubes (n_dev
    B, n_freq, n_time) on ``P("bl")``, device d's B rows its block j (``results.blocks(spec,
    j)`` names their data rows); gains replicated. The export takes the blocks in turn, so
    that it holds one block's cubes at a time; ``j`` is traced, so one program serves every
    block."""

    def device(rfi_params, signal, phase, delay_us, freq_mhz, groups, z, sky_c, g, rows, j):
        rfi = device_signal(rfi_params, signal, phase, delay_us, spec)
        parts = _block_of((_block_parts(groups), z, _sky_parts(sky_c), rows), j[0], spec)
        return _block_model(rfi, freq_mhz, groups, sky_c, g, parts, spec)

    inputs = _device_inputs(params, constants, spec, "predict_block")
    g = inputs["g"][0]
    inputs["rows"] = ((constants.a1, constants.a2), (P(AXIS), P(AXIS)))
    inputs["j"] = (jnp.reshape(j, (1,)), P())
    v_sky, v_rfi, model = _map_devices(device, inputs, P(AXIS), spec)
    return joint.Prediction(v_sky, v_rfi, g, model)


def rows_block(x: jax.Array, j: jax.Array, spec: ShardedSpec) -> jax.Array:
    """Block ``j`` of every device's rows of a ``P("bl")`` per-row array (n_dev row_blocks
    B, ...): (n_dev B, ...), on ``P("bl")``, as ``predict_block`` orders its rows."""
    mapped = jax.shard_map(
        lambda x, j: _block_of(x, j[0], spec),
        mesh=spec.mesh,
        in_specs=(P(AXIS), P()),
        out_specs=P(AXIS),
    )
    return mapped(x, jnp.reshape(j, (1,)))


def data_order(rows, spec: ShardedSpec) -> np.ndarray:
    """A sharded per-baseline array (n_dev B, ...) on the host, in the data's n_bl rows:
    padded rows dropped and the placement's order (if any) undone."""
    rows = np.asarray(rows)[: spec.model.n_bl]
    if spec.order is None:
        return rows
    out = np.empty_like(rows)
    out[spec.order] = rows
    return out


def unpad(prediction: joint.Prediction, spec: ShardedSpec) -> joint.Prediction:
    """The prediction on the host (numpy), cubes cut to the data's n_bl rows in their order."""
    return joint.Prediction(
        sky=data_order(prediction.sky, spec),
        rfi=data_order(prediction.rfi, spec),
        gains=np.asarray(prediction.gains),
        model=data_order(prediction.model, spec),
    )


def unpad_params(params: joint.ModelParams, spec: ShardedSpec) -> joint.ModelParams:
    """Parameters on the host in joint.Model's placement: each sky group's padding slots
    dropped, its members in the data's order."""
    host = jax.tree.map(np.asarray, params)
    z = []
    for zg, slot in zip(host.sky.z, spec.sky_slots, strict=True):
        used = slot.member >= 0
        members = np.empty((int(used.sum()), *zg.shape[1:]), zg.dtype)
        members[slot.member[used]] = zg[used]
        z.append(members)
    return host._replace(sky=sky.SkyParams(tuple(z)))
