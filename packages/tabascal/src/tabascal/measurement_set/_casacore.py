"""python-casacore, the optional extra ``tabascal[ms]``, imported only when a Measurement Set is
read or written, so that the rest of tabascal works without it."""

from __future__ import annotations

from tabascal import TabascalError

INSTALL_HINT = 'pip install "tabascal[ms]"'


class MissingExtraError(TabascalError, ImportError):
    """python-casacore is not installed; the message says how to install it."""


def _missing(err: ImportError) -> MissingExtraError:
    return MissingExtraError(
        f"Measurement Sets need python-casacore, which is not installed ({err}); "
        f"install tabascal with the 'ms' extra: {INSTALL_HINT}"
    )


def tables():
    """The ``casacore.tables`` module."""
    try:
        from casacore import tables as module
    except ImportError as err:
        raise _missing(err) from None
    return module


_leap_seconds_checked = False


def measures():
    """A new ``casacore.measures`` converter, with a current leap-second table where
    casacore's own is out of date (``_leap_seconds``)."""
    global _leap_seconds_checked
    try:
        from casacore.measures import measures as make
    except ImportError as err:
        raise _missing(err) from None
    if not _leap_seconds_checked:
        _leap_seconds_checked = True
        from tabascal.measurement_set._leap_seconds import use_current_leap_seconds

        use_current_leap_seconds()
    return make()
