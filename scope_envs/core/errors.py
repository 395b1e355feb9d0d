"""The error of an ordinary mistake in what was asked for, as opposed to a bug in the code."""

from __future__ import annotations


class UsageError(ValueError):
    """An unknown name, a malformed spec or setting: the message, one line, says what is wrong and
    what would work. The `scope` command prints it without a traceback; a `ValueError`, so that
    callers catching those still catch it."""
