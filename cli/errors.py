"""The command's own error: a bad argument, printed as one line with exit status 2."""


class UsageError(Exception):
    """A bad argument; printed as one line, exit 2."""
