"""Host-side checks of baseline lists, device counts and group labels.

Every public entry point validates its input here, once, and the errors say which rows are
wrong and how to fix them. The arrays returned are int64 copies the planners may index freely.
"""

import operator

import numpy as np

# How many offending rows an error message lists before it summarises the rest.
_ROWS_SHOWN = 5


def _listed(values: np.ndarray) -> str:
    shown = ", ".join(str(int(v)) for v in values[:_ROWS_SHOWN])
    more = len(values) - _ROWS_SHOWN
    return f"[{shown}, ... {more} more]" if more > 0 else f"[{shown}]"


def check_count(value, name: str, caller: str, minimum: int) -> int:
    """Return ``value`` as a Python int after checking it is an integer >= ``minimum``."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{caller}: {name} must be an integer, got the boolean {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{caller}: {name} must be an integer, got {value!r} of type {type(value).__name__}"
        ) from None
    if number < minimum:
        raise ValueError(f"{caller}: {name} must be >= {minimum}, got {number}")
    return number


def _check_integer_column(values, name: str, caller: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(
            f"{caller}: {name} must be 1-D with one entry per baseline row, got shape {array.shape}"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"{caller}: {name} has dtype {array.dtype}; it must hold integers. Convert it with "
            f"np.asarray({name}, dtype=np.int64) once you know no value is fractional"
        )
    return array


def check_baselines(a1, a2, n_ant, caller: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate a baseline list and return it as int64 arrays.

    Args:
        a1, a2: (n_bl,) integer antenna ids of each baseline row, in [0, n_ant).
        n_ant: number of antennas (int >= 0).
        caller: name of the public function, used in error messages.

    Returns:
        ``(a1, a2, n_ant)`` with a1, a2 as new (n_bl,) int64 arrays.

    Raises:
        TypeError: non-integer dtype or n_ant.
        ValueError: shapes differ, an id is negative or >= n_ant, or an (a1, a2) pair repeats.
            Pairs are ordered: (3, 7) and (7, 3) are different rows, as in ``make_indices``.
    """
    a1 = _check_integer_column(a1, "a1", caller)
    a2 = _check_integer_column(a2, "a2", caller)
    n_ant = check_count(n_ant, "n_ant", caller, 0)
    if a1.shape != a2.shape:
        raise ValueError(
            f"{caller}: a1 has {a1.shape[0]} rows but a2 has {a2.shape[0]}; pass exactly one "
            "(a1, a2) antenna pair per baseline row"
        )
    for name, values in (("a1", a1), ("a2", a2)):
        negative = np.flatnonzero(values < 0)
        if negative.size:
            raise ValueError(
                f"{caller}: negative antenna id in {name} at rows {_listed(negative)} (values "
                f"{_listed(values[negative])}); antenna ids must lie in [0, n_ant={n_ant})"
            )
        too_big = np.flatnonzero(values >= n_ant)
        if too_big.size:
            raise ValueError(
                f"{caller}: antenna id in {name} >= n_ant={n_ant} at rows {_listed(too_big)} "
                f"(values {_listed(values[too_big])}); pass n_ant >= {int(values.max()) + 1} "
                "or renumber the antennas to 0 .. n_ant-1"
            )
    a1 = a1.astype(np.int64)
    a2 = a2.astype(np.int64)
    _check_unique_pairs(a1, a2, n_ant, caller)
    return a1, a2, n_ant


def _check_unique_pairs(a1: np.ndarray, a2: np.ndarray, n_ant: int, caller: str) -> None:
    key = a1 * n_ant + a2
    if n_ant * n_ant <= 1 << 26:  # a bitmap is several times faster than sorting the keys
        seen = np.zeros(n_ant * n_ant, bool)
        seen[key] = True
        if np.count_nonzero(seen) == key.size:
            return
    by_key = np.argsort(key, kind="stable")
    repeats = np.flatnonzero(key[by_key][1:] == key[by_key][:-1])
    if repeats.size == 0:
        return
    first_key = key[by_key[repeats[0]]]
    rows = np.flatnonzero(key == first_key)
    n_keys = np.unique(key[by_key[repeats]]).size
    raise ValueError(
        f"{caller}: baseline ({int(a1[rows[0]])}, {int(a2[rows[0]])}) appears {rows.size} times "
        f"(rows {_listed(rows)}), and {n_keys} pair(s) repeat in all; each (a1, a2) pair may "
        "appear at most once: drop or merge the repeated rows"
    )


def check_groups(groups, n_bl: int, caller: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-row group labels.

    Args:
        groups: None (one group, label 0) or (n_bl,) integer labels, any values.
        n_bl: number of baseline rows.

    Returns:
        ``(labels, index)``: the distinct labels in increasing order, (n_groups,) int64, and
        each row's position in ``labels``, (n_bl,) int64.
    """
    if groups is None:
        return np.zeros(1, np.int64), np.zeros(n_bl, np.int64)
    groups = _check_integer_column(groups, "groups", caller)
    if groups.shape[0] != n_bl:
        raise ValueError(
            f"{caller}: groups has {groups.shape[0]} labels but there are {n_bl} baseline rows; "
            "pass one group label per row (or groups=None for a single group)"
        )
    groups = groups.astype(np.int64)
    if n_bl and 0 <= groups.min() and groups.max() < 1 << 16:
        # Small non-negative labels (the usual case): a lookup table instead of a sort.
        present = np.bincount(groups) > 0
        return np.flatnonzero(present), (np.cumsum(present) - 1)[groups]
    labels, index = np.unique(groups, return_inverse=True)
    return labels, index.astype(np.int64).reshape(n_bl)


def check_order(order, n_bl: int, caller: str) -> np.ndarray:
    """Validate a permutation of ``n_bl`` rows and return it as an int64 copy."""
    order = _check_integer_column(order, "order", caller).astype(np.int64)
    seen = np.zeros(n_bl, np.int64)
    inside = (order >= 0) & (order < n_bl)
    np.add.at(seen, order[inside], 1)
    if order.shape[0] != n_bl or not inside.all() or np.any(seen != 1):
        missing = np.flatnonzero(seen == 0)
        raise ValueError(
            f"{caller}: order must list each of the {n_bl} rows exactly once (a permutation of "
            f"0 .. {n_bl - 1}); it has {order.shape[0]} entries and misses rows {_listed(missing)}"
        )
    return order
