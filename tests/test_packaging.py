"""Each package installs and imports on its own terms."""

import subprocess
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def test_partition_does_not_import_jax_even_with_jax_installed():
    import jax  # noqa: F401  (proves jax is importable here, so its absence below is meaningful)

    code = (
        "import sys, tabascal_partition\n"
        "assert not any(n == 'jax' or n.startswith('jax.') for n in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_declared_dependencies_stay_within_their_package_boundaries():
    def names(dist):
        reqs = [Requirement(r) for r in requires(dist) or []]
        return {canonicalize_name(r.name) for r in reqs if r.marker is None}

    assert names("ri_kernels") == {"jax", "numpy"}
    assert names("tabascal_partition") == {"numpy"}
    assert {"ri-kernels", "tabascal-partition", "jax", "optax", "numpy"} <= names("tabascal")


def test_four_virtual_devices_are_visible():
    import jax

    # The integration session sets XLA_FLAGS for four CPU devices; without them the
    # multi-device tests in this folder would be meaningless, so this fails rather than skips.
    assert jax.device_count() == 4, jax.devices()
