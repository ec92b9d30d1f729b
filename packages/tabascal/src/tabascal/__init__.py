"""TABASCAL: trajectory-based RFI subtraction and calibration for radio interferometers."""

__version__ = "0.1.0"


class TabascalError(Exception):
    """The base of every error tabascal raises about its input or its run (a config, a store,
    a Measurement Set, element sets, a simulation, a launch, an output folder): the message
    says what was wrong and how to fix it, and the command line reports it and exits 2.

    Each subclass also derives from the built-in type a caller would expect (``ValueError``
    for bad input, ``ImportError`` for a missing extra, ``FileExistsError`` for an occupied
    output folder), so that ``except ValueError`` keeps catching what it did.
    """
