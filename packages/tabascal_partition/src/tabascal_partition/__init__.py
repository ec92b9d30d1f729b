"""Host-side plans for splitting an interferometer's baseline axis over devices.

Pure numpy: importing this package never imports jax.
"""

__version__ = "0.1.0"
