"""Shared test setup.

float64 must be available for the complex128 operators and references. The test problems are
tiny, so XLA compilation dominates the suite's time; compiling without LLVM optimisation
halved it (analytic and derivative tests: 48 s -> 25 s on a shared 2-core machine) and
changes no arithmetic. XLA reads the flag when the backend starts, so it is set before jax is
imported; an existing XLA_FLAGS is kept. (It applies to the whole pytest process: run this
package's tests on their own, as the nox session does.)
"""

import os

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

import jax  # after XLA_FLAGS is set

jax.config.update("jax_enable_x64", True)
