"""What the default backend computes in float64, for the simulator's truth and ``precision:
double``.

TPUs have no float64 arithmetic. XLA's TPU compiler does not raise a Python error on a program
that needs it: it aborts the whole process (on a float64 to complex128 conversion, say, which
the simulator's cell averaging makes). So the simulator computes its float64 parts on the host's
CPU device where the default backend is a TPU (``float64_device``), and a fit in double
precision is refused there before any work (``check_precision``).
"""

from __future__ import annotations

import jax

from tabascal.config import ConfigError

#: Backends (``jax.default_backend()``) without float64 arithmetic.
NO_FLOAT64 = ("tpu",)


def has_float64(backend: str | None = None) -> bool:
    """Whether ``backend`` (the default backend when None) computes in float64."""
    return (backend or jax.default_backend()) not in NO_FLOAT64


def float64_device() -> jax.Device:
    """The device for float64 work: the default device, or the first CPU device where the
    default backend has no float64."""
    if has_float64():
        return jax.devices()[0]
    return jax.devices("cpu")[0]


def check_precision(precision: str) -> None:
    """Refuse ``precision: double`` on a backend without float64, saying what to do instead."""
    backend = jax.default_backend()
    if precision == "double" and not has_float64(backend):
        raise ConfigError(
            f"precision: double needs float64 arithmetic, which the {backend} backend does not "
            "have; fit in single precision (precision: single, the default, or --precision "
            "single), or in double on the CPU (JAX_PLATFORMS=cpu) or a GPU"
        )
