"""The command line's exit codes and its usage error (what every command module raises)."""

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""
