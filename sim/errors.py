"""The one user-error type: a mistake in what the user gave (a model, a TP degree, a schedule spec,
a profile, a size). A ValueError, so sim/ needs no click: every command turns it (and any
ValueError) into one line on stderr, exit 2, through tpsim.commands.errors.user_errors."""
from __future__ import annotations


class UserError(ValueError):
    """Bad input; the message says what and where, in one line."""
