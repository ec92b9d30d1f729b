import subprocess
import sys


def test_import_does_not_import_jax():
    # A fresh interpreter, so that nothing imported by the test runner can mask an import.
    code = (
        "import sys, tabascal_partition, importlib, pkgutil\n"
        "for m in pkgutil.walk_packages(tabascal_partition.__path__, 'tabascal_partition.'):\n"
        "    if m.name != 'tabascal_partition.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n == 'jax' or n.startswith(('jax.', 'jaxlib')))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
