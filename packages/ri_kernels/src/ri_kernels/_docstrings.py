"""The descriptions that several docstrings share, written once.

A docstring names a shared description by a line that holds ``$name`` alone;
:func:`described` puts the description there, indented as that line is. The operators share
the description of the signal they take, and their tables types that of the tables across a
channel, as they share the checks of both (``_validate``).
"""

from __future__ import annotations

_DESCRIPTIONS = {
    "signal": """\
indices: from :func:`make_indices` for ``n_ant`` antennas and ``n_bl`` baselines.
amp: (n_ant, n_rfi, n_freq, n_time) complex64 or complex128 signal per data cell;
    with ``amp_factor``, (1, n_rfi, n_freq, n_time), the part every antenna shares.
phase: (n_ant, n_rfi, n_freq, n_time) real phase (rad) at each channel and cell
    centre.
delay_us: (n_ant, n_rfi, n_time, n_path >= 1) real delay (us) relative to the array
    mean at each cell centre, then its time derivatives (us/s**k).""",
    "amp_factor": """\
amp_factor: None, or (n_ant, n_rfi, n_freq, n_time) real: each antenna's factor of a
    signal ``amp_factor[a] * amp[0]`` whose varying part ``amp`` all antennas share (a
    known beam and distance seen by each antenna, say). The result equals passing the
    product as ``amp``; where the work runs in several blocks the product is formed only
    at each block's cells, so neither it nor (in reverse mode) its cotangent is ever held
    whole.""",
    "frequency_tables": """\
w_freq: (n_freq, n_sf, n_int_f) real weights of data channel ``start_freq[f] + k`` at fine
    channel u of channel f (:func:`lagrange_stencils`).
start_freq: (n_freq,) integer first data channel of each channel's stencil.
dnu_mhz: (n_int_f,) real fine-channel offsets from the channel centre (MHz).""",
    "table_rules": """\
Real arrays are float32 with complex64 ``amp`` and float64 with complex128. Stencils must
lie inside their axis and contain their own cell, ``0 <= start[c] <= c < start[c] +
n_stencil <= n_cells``; any linear interpolant with such stencils may be passed (the
builders' tables times the scales of :func:`gauss_legendre_offsets` make the Gauss rule).
The tables are constants: the operators do not differentiate them.""",
}


def described(obj):
    """``obj`` (a function or class) with each ``$name`` line of its docstring replaced by the
    shared description of that name."""
    lines = []
    for line in obj.__doc__.splitlines():
        name = line.strip()
        if name.startswith("$"):
            indent = line[: len(line) - len(line.lstrip())]
            text = _DESCRIPTIONS[name[1:]].splitlines()
            lines += [indent + part if part else part for part in text]
        else:
            lines.append(line)
    obj.__doc__ = "\n".join(lines)
    return obj
