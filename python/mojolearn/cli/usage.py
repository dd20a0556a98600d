"""How a command ends: the exit codes, and `UsageError` (bad input: one line, exit code 2).

Kept apart from `cli/__init__.py`, which imports every command's module: the commands import
these from here, so no module of the package imports one that imports it back.
"""

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""
