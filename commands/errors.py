"""The one way a user's mistake leaves tpsim: one line on stderr, exit code 2, no traceback.

Every layer raises the one user-error type, `UserError` (sim/errors.py: a ValueError, so sim/ needs
no click), or a ValueError of its own (ProfileError, CompareError, OutputBusy are UserErrors or
ValueErrors). Every command is wrapped in `user_errors`, the one place that turns them (and an
OSError on a path the user gave) into click's one-line `Error: ...`, exit 2. Failures that are not
the user's (a rank that died: hw.dist.WorkerFailed; a stopped calibration) stay click errors with
exit 1, raised by the commands themselves."""
from __future__ import annotations

import functools
import os
import sys

import click

from tpsim.sim.errors import UserError

__all__ = ["UserError", "user_errors"]


class _Refused(click.ClickException):
    """What `user_errors` raises: click prints `Error: <message>` and exits 2."""

    exit_code = 2


def user_errors(fn):
    """`fn` (a click command's body) with ValueError (UserError, ProfileError, ...) and OSError turned
    into click's `Error: <message>` on stderr, exit 2. The message is printed as raised: one line, or
    where a breakdown is the point (the memory gate's table of what does not fit) its own lines."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            out = fn(*a, **kw)
            sys.stdout.flush()                # a reader gone by now shows here, not at interpreter exit
            return out
        except BrokenPipeError:
            _reader_gone()
        except ValueError as e:
            raise _Refused(str(e)) from None
        except OSError as e:                  # an output path that cannot be written, a missing file
            raise _Refused(f"cannot use {e.filename}: {e.strerror}" if e.filename else str(e)) from None
    wrapper.user_errors = True                # tests/test_cli.py: every command has it
    return wrapper


def _reader_gone() -> None:
    """stdout's reader closed the pipe (`tpsim predict | head -1`): stop quietly with SIGPIPE's exit
    status, as a Unix tool killed by it would, not with an `Error:` line (Python's documented recipe:
    point stdout at devnull so the interpreter's final flush cannot raise again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + 13)
