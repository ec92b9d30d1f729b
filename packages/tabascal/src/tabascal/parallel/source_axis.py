"""The joint model sharded along the source axis: the comparison route to ``baseline_axis``.

Sources (satellites) are padded to a multiple of the device count with dark sources: RFI
parameters 0, mean 0 and scale copied from source 0, phase and delays 0. A dark source's signal
is exactly 0 on every antenna, so its visibility term a[a1] conj(a[a2]) and that term's
gradient with respect to either factor vanish, and its prior gradient at z = 0 is 0 too.

The per-source arrays (RFI parameters, the signal's scale and mean, phase, delay_us) are split
over a 1-D mesh named "src"; everything else is replicated. Every device computes the RFI
visibilities of all baselines from its own sources in ``shard_map`` and the cubes are summed
across devices (``psum``): a whole visibility cube crosses the devices every step, which is
why the baseline axis is the route that divides memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import ri_kernels
from tabascal.model import gains, joint, rfi_signal, rfi_vis, sky
from tabascal.parallel import row_placement

AXIS = "src"
SOURCE = P(None, AXIS)  # per-source arrays: (n_ant, n_src, ...)


def make_mesh(n_dev: int | None = None) -> Mesh:
    """A 1-D mesh named "src" over the first ``n_dev`` devices (all of them when None)."""
    return row_placement.make_mesh(n_dev, axis=AXIS)


@dataclass(frozen=True)
class SourceShardedSpec:
    """model: the single-device spec (n_src counts real sources); mesh; n_src_padded."""

    model: joint.ModelSpec
    mesh: Mesh
    n_src_padded: int


@dataclass(frozen=True)
class SourceShardedModel:
    spec: SourceShardedSpec
    constants: joint.ModelConstants
    data: joint.Data
    params: joint.ModelParams
    info: dict


def _pad_sources(array, n_src: int, fill) -> np.ndarray:
    """``array`` (n_ant, n_src0, ...) extended to n_src sources; fill a value or "copy"."""
    array = np.asarray(array)
    extra = n_src - array.shape[1]
    if fill == "copy":
        tail = np.broadcast_to(array[:, :1], (array.shape[0], extra, *array.shape[2:]))
    else:
        tail = np.full((array.shape[0], extra, *array.shape[2:]), fill, array.dtype)
    return np.concatenate([array, tail.astype(array.dtype)], axis=1)


def shard_model(model: joint.Model, mesh: Mesh) -> SourceShardedModel:
    """Pad the sources to a multiple of the device count and place the arrays on ``mesh``."""
    n_dev = mesh.size
    n_src = -(-model.spec.n_src // n_dev) * n_dev
    by_source = NamedSharding(mesh, SOURCE)
    replicated = NamedSharding(mesh, P())

    def sources(array, fill):
        return jax.device_put(_pad_sources(array, n_src, fill), by_source)

    c = model.constants
    signal = jax.device_put(c.rfi_signal, replicated)._replace(
        scale=sources(c.rfi_signal.scale, "copy"),
        mean=sources(c.rfi_signal.mean, 0),
        weight_time=sources(c.rfi_signal.weight_time, "copy"),
        mask=sources(c.rfi_signal.mask, 0),
        factor=sources(c.rfi_signal.factor, 0),
    )
    constants = jax.device_put(
        c._replace(rfi_signal=None, phase=None, delay_us=None, groups=None), replicated
    )
    constants = constants._replace(
        rfi_signal=signal,
        phase=sources(c.phase, 0),
        delay_us=sources(c.delay_us, 0),
        groups=tuple(_place_group(tables, n_src, mesh) for tables in c.groups),
    )
    params = jax.device_put(model.params._replace(rfi=None), replicated)._replace(
        rfi=rfi_signal.RfiSignalParams(sources(model.params.rfi.z, 0))
    )
    data = jax.device_put(model.data, replicated)
    info = dict(model.info, n_devices=n_dev, n_src_padded=n_src)
    return SourceShardedModel(
        SourceShardedSpec(model.spec, mesh, n_src), constants, data, params, info
    )


def _per_source(group: rfi_vis.GroupTables) -> rfi_vis.GroupTables:
    """``group`` with True at each of its tables that has a leading source axis, False at the
    rest: a quadrature group's per-source weights and fine times, an analytic group's view
    (sources in view for part of an integration)."""
    split = jax.tree.map(lambda _: False, group)
    tables = group.tables
    if isinstance(tables, ri_kernels.QuadratureTables) and tables.dt.ndim == 3:
        split = split._replace(tables=split.tables._replace(w_time=True, dt=True))
    return split if group.view is None else split._replace(view=True)


def _place_group(tables: rfi_vis.GroupTables, n_src: int, mesh: Mesh) -> rfi_vis.GroupTables:
    """A group's tables replicated, but for its per-source ones, padded with zeros for the
    dark sources (no weight: nothing of them is averaged) and split like the sources."""
    replicated, by_source = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))

    def placed(x, per_source):
        if not per_source:
            return jax.device_put(x, replicated)
        x = np.asarray(x)
        tail = np.zeros((n_src - x.shape[0], *x.shape[1:]), x.dtype)
        return jax.device_put(np.concatenate([x, tail]), by_source)

    return jax.tree.map(placed, tables, _per_source(tables))


def _group_specs(groups) -> tuple:
    """in_specs of the groups on the map: per-source tables split, the rest replicated."""
    return tuple(
        jax.tree.map(lambda per_source: P(AXIS) if per_source else P(), _per_source(tables))
        for tables in groups
    )


def predict_rfi(rfi_params, constants: joint.ModelConstants, spec: SourceShardedSpec):
    """RFI visibilities (n_bl, n_freq, n_time), replicated: the sum over devices of each
    device's sources' visibilities."""
    parts = rfi_signal.forward_parts(rfi_params, constants.rfi_signal)
    amp, factor = jax.lax.with_sharding_constraint(parts, NamedSharding(spec.mesh, SOURCE))
    model = spec.model

    def local(amp, factor, phase, delay_us, freq_mhz, groups):
        vis = rfi_vis.forward(
            amp, phase, delay_us, freq_mhz, groups, model.groups, model.n_bl, model.rfi_vis, factor
        )
        return jax.lax.psum(vis, AXIS)

    mapped = jax.shard_map(
        local,
        mesh=spec.mesh,
        in_specs=(SOURCE, SOURCE, SOURCE, SOURCE, P(), _group_specs(constants.groups)),
        out_specs=P(),
    )
    return mapped(
        amp, factor, constants.phase, constants.delay_us, constants.freq_mhz, constants.groups
    )


def predict(params: joint.ModelParams, constants, spec: SourceShardedSpec) -> joint.Prediction:
    """Source-sharded ``joint.predict`` (cubes (n_bl, n_freq, n_time) replicated)."""
    v_rfi = predict_rfi(params.rfi, constants, spec)
    v_sky = sky.forward(params.sky, constants.sky)
    g = gains.forward(params.gains, constants.gains)
    model = gains.apply(v_sky + v_rfi, g, constants.a1, constants.a2)
    return joint.Prediction(v_sky, v_rfi, g, model)


#: Source-sharded ``joint.loss``: (loss, {"chi2": reduced chi-squared}).
loss = partial(joint.loss, predict=predict)


def unpad_params(params: joint.ModelParams, spec: SourceShardedSpec) -> joint.ModelParams:
    """Parameters on the host with the dark sources dropped (joint.Model's layout)."""
    host = jax.tree.map(np.asarray, params)
    n_src = spec.model.n_src
    return host._replace(rfi=rfi_signal.RfiSignalParams(host.rfi.z[:, :n_src]))


def unpad(prediction: joint.Prediction, spec: SourceShardedSpec) -> joint.Prediction:
    """The prediction on the host (numpy)."""
    return joint.Prediction(*(np.asarray(x) for x in prediction))
