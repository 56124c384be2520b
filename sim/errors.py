"""The one user-error type: a mistake in what the user gave (a model, a TP degree, a schedule spec,
a profile, a size). Every command turns it (and any ValueError) into one line on stderr, exit 2."""
from __future__ import annotations


class UserError(ValueError):
    """Bad input; the message says what and where, in one line."""
