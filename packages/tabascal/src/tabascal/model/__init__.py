"""Model components: each a module with a static config, host-built constants, ``init``,
a pure ``forward(params, constants)`` and ``prior(params)`` on whitened parameters.

* ``sky``: per-baseline Fourier Gaussian process, (n_bl, n_freq, n_time) complex.
* ``rfi_signal``: per (antenna, source) Fourier Gaussian process, (n_ant, n_src, n_freq, n_time).
* ``gains``: unitary or per (antenna, channel) Gaussian processes in time, and their ``apply``.
* ``likelihood``: masked Gaussian likelihood, reduced chi-squared and the loss.

Use them through their modules: ``sky.forward(params, constants)``.
"""

from tabascal.model import gains, likelihood, rfi_signal, sky
from tabascal.model.gains import GainsConfig, GainsConstants, GainsParams
from tabascal.model.rfi_signal import RfiSignalConfig, RfiSignalConstants, RfiSignalParams
from tabascal.model.sky import SkyConfig, SkyConstants, SkyGrid, SkyParams

__all__ = [
    "GainsConfig",
    "GainsConstants",
    "GainsParams",
    "RfiSignalConfig",
    "RfiSignalConstants",
    "RfiSignalParams",
    "SkyConfig",
    "SkyConstants",
    "SkyGrid",
    "SkyParams",
    "gains",
    "likelihood",
    "rfi_signal",
    "sky",
]
