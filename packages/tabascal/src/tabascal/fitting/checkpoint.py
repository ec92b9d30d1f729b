"""The fit's checkpoint: its state and history in one ``checkpoint.npz``, written whole or
not at all (``save_checkpoint``) and read back for a resumed run (``load_checkpoint``), which
refuses a checkpoint of another configuration, or one laid out as an older tabascal wrote it,
saying how to resume it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tabascal.fitting.phases import FitState, Phased, in_polish, polish_form
from tabascal.parallel import processes
from tabascal.store.writer import kill_point

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.npz"


class FitHistory(NamedTuple):
    """Per-step loss and reduced chi-squared, shape (steps taken,), float64 on the host, and
    the passes taken by the end of each step (``optimiser.passes_taken``; None where not
    counted); ``stopped``, why the fit ended (``optimiser.run``: "converged", "settled",
    "polish settled", "steps"; "" for a history not yet ended)."""

    loss: np.ndarray
    chi2: np.ndarray
    passes: np.ndarray | None = None
    stopped: str = ""

    def summary(self) -> dict:
        """The figures summary.json's ``fit`` holds: steps, passes (None where not counted)
        and why the fit stopped."""
        passes = None if self.passes is None or not len(self.passes) else float(self.passes[-1])
        return {"steps": len(self.loss), "passes": passes, "stopped": self.stopped}


# The sky's modes as one array for every baseline, as checkpoints written before the sky's
# groups name them: "...sky.z" where today's name "...sky.z[0]" and on.
_ONE_BOX = re.compile(r"\.sky\.z(?![\[\w])")


def _leaf_names(tree) -> list[str]:
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(tree)]


def _host(leaf) -> np.ndarray:
    """A state leaf as numpy, whether or not all of it lives in this process."""
    if not isinstance(leaf, jax.Array) or leaf.is_fully_addressable:
        return np.asarray(jax.device_get(leaf))
    if leaf.sharding.is_fully_replicated:
        return np.asarray(leaf.addressable_data(0))
    return processes.host_rows(leaf, 0, leaf.shape[0])


def save_checkpoint(directory: Path, state: FitState, history: FitHistory) -> Path:
    """Write ``state`` and ``history`` to ``directory/checkpoint.npz`` atomically.

    The file is written whole under a hidden temporary name, flushed to the disk and renamed
    over the previous checkpoint, and the rename is flushed too: a process killed at any
    moment (or a machine that loses power) leaves the previous checkpoint or this one, never
    part of one.
    """
    directory = Path(directory)
    # In a multi-process run every process takes part in gathering the leaves; process 0 writes.
    arrays = {f"leaf_{i}": _host(leaf) for i, leaf in enumerate(jax.tree_util.tree_leaves(state))}
    final = directory / CHECKPOINT_NAME
    if not processes.is_writer():
        return final
    directory.mkdir(parents=True, exist_ok=True)
    arrays["leaf_names"] = np.array(_leaf_names(state))
    arrays["history_loss"] = history.loss
    arrays["history_chi2"] = history.chi2
    if history.passes is not None:
        arrays["history_passes"] = history.passes
    partial = directory / f".{CHECKPOINT_NAME}.partial"
    with open(partial, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    kill_point("checkpoint")
    os.replace(partial, final)
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    logger.info("checkpoint at step %d written to %s", int(state.step), final)
    return final


def load_checkpoint(
    directory: Path, template: FitState, optimizer=None
) -> tuple[FitState, FitHistory]:
    """Read a checkpoint written by ``save_checkpoint`` for a state shaped like ``template``
    (a gradient phase's; with a phased ``optimizer``, a checkpoint written in the polish is
    read in the polish's form, ``polish_form``).

    Refuses a checkpoint whose parameter names, shapes or dtypes differ from ``template``'s
    (a checkpoint of another configuration or data set).
    """
    path = Path(directory) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
    with np.load(path) as saved:
        names = list(saved["leaf_names"])
        expected = _leaf_names(template)
        one_box = any(_ONE_BOX.search(name) for name in names)
        # The one box's modes are a single group's, the first: with sky.groups 1 the same arrays.
        names = [_ONE_BOX.sub(".sky.z[0]", name) for name in names]
        if names != expected and isinstance(optimizer, Phased) and not in_polish(template):
            polishing = polish_form(template, optimizer)
            if names == _leaf_names(polishing):
                template, expected = polishing, names
        if names != expected:
            _refuse_names(path, names, expected, one_box)
        template_leaves, treedef = jax.tree_util.tree_flatten(template)
        leaves = []
        for i, like in enumerate(template_leaves):
            value = saved[f"leaf_{i}"]
            if value.shape != jnp.shape(like) or value.dtype != jnp.result_type(like):
                raise ValueError(
                    f"checkpoint {path}: {names[i]} has shape {value.shape} and dtype "
                    f"{value.dtype}, but this run expects {jnp.shape(like)} "
                    f"{jnp.result_type(like)}; it was written for different data or precision"
                )
            leaves.append(value)
        passes = saved["history_passes"].copy() if "history_passes" in saved else None
        history = FitHistory(saved["history_loss"].copy(), saved["history_chi2"].copy(), passes)
    return jax.tree_util.tree_unflatten(treedef, leaves), history


def _refuse_names(path: Path, names: list[str], expected: list[str], one_box: bool):
    """Refuse the checkpoint at ``path``, whose leaves ``names`` are not the ``expected``,
    saying why: a layout an older tabascal wrote (both phases' optimiser states; the sky's
    modes as one box, ``one_box``), or another model configuration."""
    both = [any(n.startswith(f".opt_state.{k}") for n in names) for k in ("first", "polish")]
    if all(both):
        raise ValueError(
            f"checkpoint {path} holds both phases' optimiser states, as tabascal wrote "
            "them before the gradient phases and the polish became two programs "
            "(2026-12-05); this version cannot resume it: run the fit again without "
            "--resume (or with the tabascal that wrote it)"
        )
    if one_box:
        raise ValueError(
            f"checkpoint {path} holds the sky's modes as one array for every baseline, as "
            "tabascal wrote them before the sky's baselines were split into groups "
            "(2026-12-05); resume it with the config key sky.groups set to 1 (every "
            "baseline in one group, as it was written), or run the fit again without --resume"
        )
    raise ValueError(
        f"checkpoint {path} holds parameters {names[:4]}... but this run expects "
        f"{expected[:4]}...; it was written by a different model configuration"
    )
