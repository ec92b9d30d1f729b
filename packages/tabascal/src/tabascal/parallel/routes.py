"""The one registry of the ways a fit is laid out over devices.

A route is the choice of what the devices split (``ROUTES``):

* ``none``: one device runs the plain model functions (``tabascal.model.joint``);
* ``source``: the satellites are split across a 1-D mesh ("src", ``source_axis``), every
  device holding every baseline: the comparison route;
* ``baseline``: the baselines are split across a 1-D mesh ("bl", ``baseline_axis``), so the
  visibility memory divides across devices;
* ``reuse``: the baseline axis with its rows permuted by the antenna-reuse plan, so that each
  device touches few antennas.

The config's ``sharding.axis`` (and ``--shard-axis``) takes one of ``SHARD_AXES``; "reuse" is
the baseline axis with ``sharding.reuse_plan`` (``--reuse-plan``) on, which ``route`` joins.
Every consumer (``tabascal run``, the compiled stages, ``tabascal plan``, the demo and the
benchmarks) takes its functions from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import numpy as np

from tabascal.config import ConfigError
from tabascal.model import joint
from tabascal.parallel import baseline_axis, source_axis

#: What ``sharding.axis`` accepts.
SHARD_AXES = ("none", "source", "baseline")
#: Every route: the shard axes and the baseline axis with the antenna-reuse plan.
ROUTES = (*SHARD_AXES, "reuse")


@dataclass(frozen=True)
class Route:
    """How one route places a model and evaluates it.

    name: one of ``ROUTES``. place(model, mesh) -> the placed model (``spec``, ``constants``,
    ``data``, ``params``, ``info``), mesh from ``make_mesh`` (None for "none"). predict,
    predict_rfi and loss take the placed ``spec`` as their last argument (``joint.predict``'s
    signature); loss is ``joint.loss`` over this route's predict. unpad(prediction, spec) -> the
    prediction on the host (numpy) in the data's row order. make_mesh(n_dev=None) -> the mesh
    over the first n_dev devices (all when None). by_block: the baseline axis's outputs leave
    block by block and its model can be built block by block (``blockwise.build``).
    """

    name: str
    place: Callable[..., Any]
    predict: Callable[..., joint.Prediction]
    predict_rfi: Callable[..., jax.Array]
    loss: Callable[..., Any]
    unpad: Callable[..., joint.Prediction]
    make_mesh: Callable[..., Any]
    by_block: bool

    @property
    def shard_axis(self) -> str:
        """The ``sharding.axis`` value of this route."""
        return "baseline" if self.name == "reuse" else self.name

    @property
    def reuse_plan(self) -> bool:
        return self.name == "reuse"


def devices(spec) -> list:
    """The devices a placed model's ``spec`` runs on: its mesh's, or the first device."""
    mesh = getattr(spec, "mesh", None)
    return [jax.devices()[0]] if mesh is None else list(mesh.devices.flat)


def _place_single(model: joint.Model, mesh: None) -> joint.Model:
    return model


def _to_host(prediction: joint.Prediction, spec) -> joint.Prediction:
    return jax.tree.map(np.asarray, prediction)


def _no_mesh(n_dev: int | None = None) -> None:
    return None


def _baseline_route(name: str, reuse: bool) -> Route:
    return Route(
        name=name,
        place=partial(baseline_axis.shard_model, reuse=reuse),
        predict=baseline_axis.predict,
        predict_rfi=baseline_axis.predict_rfi,
        loss=baseline_axis.loss,
        unpad=baseline_axis.unpad,
        make_mesh=baseline_axis.make_mesh,
        by_block=True,
    )


_REGISTRY = {
    "none": Route(
        name="none",
        place=_place_single,
        predict=joint.predict,
        predict_rfi=joint.predict_rfi,
        loss=joint.loss,
        unpad=_to_host,
        make_mesh=_no_mesh,
        by_block=False,
    ),
    "source": Route(
        name="source",
        place=source_axis.shard_model,
        predict=source_axis.predict,
        predict_rfi=source_axis.predict_rfi,
        loss=source_axis.loss,
        unpad=source_axis.unpad,
        make_mesh=source_axis.make_mesh,
        by_block=False,
    ),
    "baseline": _baseline_route("baseline", reuse=False),
    "reuse": _baseline_route("reuse", reuse=True),
}


def route(axis: str, reuse_plan: bool = False) -> Route:
    """The ``Route`` of ``axis`` (one of ``ROUTES``); ``reuse_plan`` turns "baseline" into
    "reuse" and is refused on any other axis."""
    if axis not in _REGISTRY:
        raise ConfigError(f"shard axis {axis!r} is not known; choose one of {', '.join(ROUTES)}")
    if reuse_plan and axis not in ("baseline", "reuse"):
        raise ConfigError(
            f"the antenna-reuse plan needs the baseline axis, not {axis!r}; pass "
            "--shard-axis baseline or drop --reuse-plan"
        )
    return _REGISTRY["reuse" if reuse_plan else axis]
