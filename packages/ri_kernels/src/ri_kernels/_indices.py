"""Baseline index sets: host-side validation and the int32 arrays the operators trace over."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import jax
import numpy as np


@jax.tree_util.register_pytree_node_class
class BaselineIndices:
    """Index arrays of one baseline list, taken by the operators as traced arguments.

    A pytree whose leaves are int32 arrays and whose only static field is ``n_ant``. Every
    shape depends on ``(n_bl, n_ant)`` alone, so the sets built for several devices with the
    same ``(n_bl, n_ant)`` stack leaf by leaf on a leading device axis (see
    :func:`stack_indices`).

    Fields (from :func:`make_indices`, ``n_u = min(2 n_bl, n_ant)`` and ``n_r = n_c =
    min(n_bl, n_ant)``; from :func:`make_index_sets`, the largest counts over the sets, which
    never exceed these bounds):

    - ``a1``, ``a2``: (n_bl,) antenna ids of each baseline, in the caller's order.
    - ``ant``: (n_u,) the antennas the list touches, ascending; unused tail slots repeat the
      first antenna (harmless work, never read back). When ``n_u = n_ant`` it is every antenna
      in order (``arange(n_ant)``), and the operators read the signal without gathering it.
    - ``row``: (n_r,) positions in ``ant`` of the distinct ``a1`` antennas (Gram rows).
    - ``col``: (n_c,) positions in ``ant`` of the distinct ``a2`` antennas (Gram columns).
    - ``bl_row``, ``bl_col``: (n_bl,) positions of ``a1[b]`` in ``row`` and ``a2[b]`` in ``col``.
    """

    __slots__ = ("a1", "a2", "ant", "bl_col", "bl_row", "col", "n_ant", "row")

    def __init__(self, n_ant: int, a1, a2, ant, row, col, bl_row, bl_col):
        self.n_ant = n_ant
        self.a1, self.a2 = a1, a2
        self.ant, self.row, self.col = ant, row, col
        self.bl_row, self.bl_col = bl_row, bl_col

    def tree_flatten(self):
        leaves = (self.a1, self.a2, self.ant, self.row, self.col, self.bl_row, self.bl_col)
        return leaves, self.n_ant

    @classmethod
    def tree_unflatten(cls, n_ant, leaves):
        return cls(n_ant, *leaves)

    @property
    def n_bl(self) -> int:
        """Number of baselines (the last axis of ``a1``)."""
        return self.a1.shape[-1]

    def __repr__(self) -> str:
        return f"BaselineIndices(n_ant={self.n_ant}, n_bl={self.n_bl}, shape={self.a1.shape})"


def index_shapes(n_bl: int, n_ant: int) -> dict[str, tuple[int]]:
    """The shape of every :class:`BaselineIndices` array that :func:`make_indices` builds for a
    list of ``n_bl`` baselines; for ``ant``, ``row`` and ``col`` the largest any set may have."""
    n_u, n_rc = min(2 * n_bl, n_ant), min(n_bl, n_ant)
    return {
        "a1": (n_bl,),
        "a2": (n_bl,),
        "ant": (n_u,),
        "row": (n_rc,),
        "col": (n_rc,),
        "bl_row": (n_bl,),
        "bl_col": (n_bl,),
    }


def _antenna_column(name: str, values, n_ant: int) -> np.ndarray:
    array = np.asarray(values)
    if array.size == 0 and not isinstance(values, np.ndarray):
        array = array.astype(np.int32)  # an empty Python list carries no dtype of its own
    if array.ndim != 1:
        raise ValueError(f"make_indices: {name} must be 1-D; got shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise TypeError(
            f"make_indices: {name} must hold integers; got dtype {array.dtype}. "
            f"Cast antenna ids with .astype(np.int32) once they are known to be whole numbers"
        )
    bad = np.flatnonzero((array < 0) | (array >= n_ant))
    if bad.size:
        shown = ", ".join(f"{name}[{i}] = {array[i]}" for i in bad[:5])
        more = f" and {bad.size - 5} more" if bad.size > 5 else ""
        raise ValueError(
            f"make_indices: {shown}{more} outside [0, {n_ant}); antenna ids must be below "
            f"n_ant, the total antenna count (real and ghost antennas)"
        )
    return array.astype(np.int32)


def _refuse_repeated_pairs(a1: np.ndarray, a2: np.ndarray, n_ant: int) -> None:
    key = a1.astype(np.int64) * n_ant + a2
    order = np.argsort(key, kind="stable")
    repeats = np.flatnonzero(key[order][1:] == key[order][:-1])
    if repeats.size:
        first, second = sorted((order[repeats[0]], order[repeats[0] + 1]))
        raise ValueError(
            f"make_indices: baseline ({a1[first]}, {a2[first]}) appears twice "
            f"(rows {first} and {second}); each antenna pair may appear at most once"
        )


def _padded(values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, np.int32)
    out[: values.size] = values
    if values.size:
        out[values.size :] = values[0]
    return out


def _validated(n_ant, a1, a2) -> tuple[int, np.ndarray, np.ndarray]:
    try:
        n_ant = operator.index(n_ant)
    except TypeError:
        raise TypeError(f"make_indices: n_ant must be an integer; got {n_ant!r}") from None
    if n_ant < 1:
        raise ValueError(f"make_indices: n_ant must be >= 1; got {n_ant}")
    a1 = _antenna_column("a1", a1, n_ant)
    a2 = _antenna_column("a2", a2, n_ant)
    if a1.size != a2.size:
        raise ValueError(
            f"make_indices: a1 and a2 must have the same length; got {a1.size} and {a2.size}"
        )
    _refuse_repeated_pairs(a1, a2, n_ant)
    return n_ant, a1, a2


def _distinct(a1: np.ndarray, a2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The touched antennas, the distinct a1 (Gram rows) and the distinct a2 (columns)."""
    return np.union1d(a1, a2), np.unique(a1), np.unique(a2)


def _build(n_ant: int, a1: np.ndarray, a2: np.ndarray, sizes: tuple[int, int, int]):
    ant, rows, cols = _distinct(a1, a2)
    if sizes[0] == n_ant:
        # Room for every antenna: take them all, in order, so that the operators can use the
        # signal arrays as they are instead of gathering a copy for each list.
        ant = np.arange(n_ant)
    bl_row = np.searchsorted(rows, a1)
    bl_col = np.searchsorted(cols, a2)
    n_u, n_r, n_c = sizes
    return BaselineIndices(
        n_ant,
        a1,
        a2,
        _padded(ant.astype(np.int32), n_u),
        _padded(np.searchsorted(ant, rows).astype(np.int32), n_r),
        _padded(np.searchsorted(ant, cols).astype(np.int32), n_c),
        bl_row.astype(np.int32).reshape(-1),
        bl_col.astype(np.int32).reshape(-1),
    )


def make_indices(n_ant: int, a1: Sequence[int], a2: Sequence[int]) -> BaselineIndices:
    """Validate a baseline list on the host and build its index arrays.

    Args:
        n_ant: total number of antennas in the signal arrays (real and ghost), >= 1.
        a1, a2: (n_bl,) integer antenna ids of each baseline, in [0, n_ant). Reversed pairs
            ((p, q) and (q, p)) and autocorrelations ((p, p)) are allowed; a repeated pair is
            not. An empty list is valid.

    Returns:
        A :class:`BaselineIndices` of numpy int32 arrays whose shapes depend only on
        ``(n_bl, n_ant)``.

    Raises:
        TypeError, ValueError: naming the offending rows.
    """
    n_ant, a1, a2 = _validated(n_ant, a1, a2)
    shapes = index_shapes(a1.size, n_ant)
    return _build(n_ant, a1, a2, (shapes["ant"][0], shapes["row"][0], shapes["col"][0]))


def make_index_sets(
    n_ant: int, baselines: Sequence[tuple[Sequence[int], Sequence[int]]]
) -> BaselineIndices:
    """Index sets of several equally long baseline lists, stacked on a leading axis and sized
    to what the lists touch.

    The sets of :func:`make_indices` size their Gram rows and columns for any list of that
    length: ``min(n_bl, n_ant)`` each, so a device's share of a large array forms products of
    nearly every antenna pair even when its baselines touch few distinct ``a1`` or ``a2``.
    Here ``ant``, ``row`` and ``col`` take the largest counts over the lists instead, so the
    quadrature operator's Gram products per cell are at most (distinct a1) x (distinct a2) of
    the widest list. For ``shard_map`` with ``P(axis)``, like :func:`stack_indices`.

    Args:
        n_ant: total number of antennas (real and ghost), as for :func:`make_indices`.
        baselines: one ``(a1, a2)`` pair of (n_bl,) antenna-id lists per set, every list of the
            same length (pad short ones with pairs against a ghost antenna first).

    Raises:
        TypeError, ValueError: as :func:`make_indices`, naming the set.
    """
    if not baselines:
        raise ValueError("make_index_sets: need at least one (a1, a2) baseline list")
    lists = []
    for i, (a1, a2) in enumerate(baselines):
        try:
            lists.append(_validated(n_ant, a1, a2)[1:])
        except (TypeError, ValueError) as error:
            message = str(error).removeprefix("make_indices: ")
            raise type(error)(f"make_index_sets: set {i}: {message}") from None
    lengths = {a1.size for a1, _ in lists}
    if len(lengths) > 1:
        raise ValueError(
            f"make_index_sets: the lists have lengths {sorted(lengths)}; every set must have "
            f"the same number of baselines (pad short lists with pairs against a ghost antenna)"
        )
    counts = np.array([[x.size for x in _distinct(a1, a2)] for a1, a2 in lists])
    sizes = tuple(int(n) for n in counts.max(axis=0))
    n_ant = operator.index(n_ant)
    return jax.tree.map(
        lambda *leaves: np.stack(leaves), *(_build(n_ant, a1, a2, sizes) for a1, a2 in lists)
    )


def stack_indices(index_sets: Sequence[BaselineIndices]) -> BaselineIndices:
    """Stack per-device index sets on a new leading axis, for ``shard_map`` with ``P(axis)``.

    All sets must share ``n_ant`` and ``n_bl`` (pad short lists with pairs against a ghost
    antenna first). Inside the map, take the device's own set with
    ``jax.tree.map(lambda x: x[0], indices)`` before calling a seam.
    """
    if not index_sets:
        raise ValueError("stack_indices: need at least one index set")
    first = index_sets[0]
    for i, other in enumerate(index_sets):
        if not isinstance(other, BaselineIndices):
            raise TypeError(f"stack_indices: entry {i} is {type(other).__name__}, not indices")
        if (other.n_ant, other.n_bl) != (first.n_ant, first.n_bl):
            raise ValueError(
                f"stack_indices: entry {i} has (n_ant, n_bl) = ({other.n_ant}, {other.n_bl}) "
                f"but entry 0 has ({first.n_ant}, {first.n_bl}); pad every device's list to "
                f"the same length with pairs against a ghost antenna"
            )
    return jax.tree.map(lambda *leaves: np.stack(leaves), *index_sets)
