"""RFI-visibility operators for radio interferometers, in pure JAX."""

__version__ = "0.1.0"
