"""Adding and replacing Measurement Set columns so that no half-written column is ever left
under a final name.

casacore writes a table's description (``table.dat``) at each flush, and a column's cells go
to the files of its own data manager. A column is therefore written in full under a temporary
name (``TABTMP_<name>``), in a data manager of its own, described and stored like a template
column, and renamed to its final name when every row is written. A column it replaces is
first renamed aside (``TABOLD_<name>``), then either becomes the backup (``TAB_FLAG_BACKUP``
for ``FLAG``: the original column itself, so its cells are kept byte for byte without a copy)
or is removed. Each step is flushed before the next.

An interruption (a kill, a full disk) leaves, besides the columns as they were, at most a
``TABTMP_`` column or a column renamed aside; :func:`recover` (run by every export before it
writes) removes the first and completes or undoes the second: a column renamed aside goes
back to its name when that name is missing, becomes the backup when one was due and none
exists, and is removed otherwise.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import numpy as np

TMP_PREFIX = "TABTMP_"
OLD_PREFIX = "TABOLD_"
#: The columns export-ms may replace that keep their original in a backup column.
BACKUPS = {
    "FLAG": "TAB_FLAG_BACKUP",
    "WEIGHT": "TAB_WEIGHT_BACKUP",
    "WEIGHT_SPECTRUM": "TAB_WEIGHT_SPECTRUM_BACKUP",
}
CHUNK_BYTES = 64 * 2**20  # cells formed and written per putcol


def recover(ms) -> list[str]:
    """Clear what an interrupted write left in the open table ``ms``; returns what was done,
    one phrase each (empty when there was nothing)."""
    done = []
    for name in ms.colnames():
        if name.startswith(TMP_PREFIX):
            ms.removecols(name)
            ms.flush()
            done.append(f"removed {name}, left by an interrupted export")
    for name in ms.colnames():
        if not name.startswith(OLD_PREFIX):
            continue
        final = name[len(OLD_PREFIX) :]
        backup = BACKUPS.get(final)
        if final not in ms.colnames():
            ms.renamecol(name, final)
            done.append(f"restored {final} (renamed aside by an interrupted export)")
        elif backup is not None and backup not in ms.colnames():
            ms.renamecol(name, backup)
            done.append(f"kept the original {final} as {backup} (an interrupted export)")
        else:
            ms.removecols(name)
            done.append(f"removed {name}, left by an interrupted export")
        ms.flush()
    return done


def _add(tables, ms, name: str, template: str, comment: str | None) -> None:
    """A new column ``name`` with the description and storage manager of ``template``, in a
    data manager of its own."""
    desc = dict(ms.getcoldesc(template))
    if comment is not None:
        desc["comment"] = comment
    dminfo = ms.getdminfo(template)
    # A data manager's name must be unique in the table, and a renamed column keeps its own.
    group = f"{name}_{uuid.uuid4().hex[:8]}"
    desc["dataManagerGroup"] = group
    manager = {"TYPE": dminfo["TYPE"], "NAME": group, "SPEC": dminfo["SPEC"]}
    ms.addcols(tables.maketabdesc(tables.makecoldesc(name, desc)), manager)


def get_rows(ms, column: str, rows: np.ndarray) -> np.ndarray:
    """``column`` at the ascending table rows ``rows``."""
    if rows[-1] - rows[0] + 1 == rows.size:
        return ms.getcol(column, startrow=int(rows[0]), nrow=rows.size)
    return ms.selectrows(rows).getcol(column)


def _put_rows(ms, column: str, rows: np.ndarray, values: np.ndarray) -> None:
    if rows[-1] - rows[0] + 1 == rows.size:
        ms.putcol(column, values, startrow=int(rows[0]), nrow=rows.size)
    else:
        ms.selectrows(rows).putcol(column, values)


def row_chunks(row_groups, bytes_per_row: Callable[[tuple], int]) -> Iterator:
    """(rows, cell shape) chunks of about CHUNK_BYTES each from ``row_groups``, pairs of a
    cell shape (n_chan, n_corr) and the ascending table rows that have it."""
    for shape, rows_of in row_groups:
        step = max(1, CHUNK_BYTES // max(1, bytes_per_row(shape)))
        for k in range(0, rows_of.size, step):
            yield rows_of[k : k + step], shape


def write_column(
    tables,
    ms,
    name: str,
    template: str,
    chunks,
    fill: Callable[[np.ndarray, tuple], np.ndarray],
    *,
    comment: str | None = None,
) -> str | None:
    """Write the column ``name`` of the open table ``ms`` (new, or replacing the one there):
    described and stored like ``template``, every row given by ``fill(rows, shape)`` over the
    (rows, shape) ``chunks``, which together cover every row once. The old column of a name in
    ``BACKUPS`` becomes its backup unless one exists. Returns the backup made, or None."""
    tmp = TMP_PREFIX + name
    _add(tables, ms, tmp, template, comment)
    ms.flush()
    try:
        for rows, shape in chunks:
            _put_rows(ms, tmp, rows, fill(rows, shape))
    except BaseException:
        ms.removecols(tmp)
        raise
    ms.flush()
    if name not in ms.colnames():
        ms.renamecol(tmp, name)
        ms.flush()
        return None
    old = OLD_PREFIX + name
    ms.renamecol(name, old)
    ms.flush()
    ms.renamecol(tmp, name)
    ms.flush()
    backup = BACKUPS.get(name)
    if backup is not None and backup not in ms.colnames():
        ms.renamecol(old, backup)
    else:
        ms.removecols(old)
        backup = None
    ms.flush()
    return backup
