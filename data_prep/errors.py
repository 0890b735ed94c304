"""Errors data_prep reports as a message and a non-zero exit (never a traceback)."""


class DataPrepError(ValueError):
    """Bad input or arguments: exit status 2 (a ``ValueError``, so every command line's
    ``cli_errors`` reports it on one line too)."""

    exit_code = 2


class VerifyError(DataPrepError):
    """A packed format does not match the PNGs: exit status 1."""

    exit_code = 1
