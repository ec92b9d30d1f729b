"""TABASCAL: trajectory-based RFI subtraction and calibration for radio interferometers."""

__version__ = "0.1.0"
