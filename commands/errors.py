"""The one way a user's mistake leaves tpsim: one line on stderr, exit code 2, no traceback.

Every layer raises the one user-error type, `UserError` (sim/errors.py: a ValueError, so sim/ needs
no click), or a ValueError of its own (ProfileError, CompareError, OutputBusy are UserErrors or
ValueErrors). Every command is wrapped in `user_errors`, the one place that turns them (and an
OSError on a path the user gave) into click's one-line `Error: ...`, exit 2; a value refused while
click parses, before the command runs (an empty `--stack ""`: commands.options.not_empty), leaves
the same way through `bad_value`. Failures that are not the user's (a rank that died:
hw.dist.WorkerFailed; a stopped calibration) stay click errors with exit 1, raised by the commands
themselves. A Ctrl-C of a command that runs ranks leaves through `ctrl_c_exits_130`: one `Aborted! ...`
saying what is left, exit 130."""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from typing import Callable

import click

from tpsim.fileio.policy import printable
from tpsim.sim.errors import UserError

__all__ = ["UserError", "bad_value", "ctrl_c_exits_130", "refused", "user_errors"]


class _Refused(click.ClickException):
    """What `user_errors` and `bad_value` raise: click prints `Error: <message>` and exits 2. The
    message is shown printable (fileio/policy.py): a control character in text tpsim did not write
    (a tool log's line, a path) is shown as its escape, never sent to the terminal."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(printable(message))


def refused(message: str) -> click.ClickException:
    """The one-line user error (exit 2) for a refusal outside a command's body (the group's own checks)."""
    return _Refused(message)


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


def bad_value(ctx: click.Context, param: click.Parameter, why: str) -> click.ClickException:
    """The one-line user error (exit 2) for a value a parameter callback refuses, worded as click
    words its own ("Invalid value for '--stack': why"). A callback runs while click parses, before
    the body that `user_errors` wraps; click's BadParameter would print the usage lines above it."""
    return _Refused(f"Invalid value for {param.get_error_hint(ctx)}: {why}")


@contextlib.contextmanager
def ctrl_c_exits_130(then: Callable[[], str | None] | None = None):
    """Ctrl-C (KeyboardInterrupt) inside: `Aborted! <what the interrupt says>` on stderr and exit 130,
    as a shell reports a process SIGINT ended (SIGTERM: 143); click's own handling is a bare "Aborted!"
    and exit 1. One helper for every command that runs ranks (bench, check, spd-plan, compare,
    calibrate): the interrupts say what is left, hw.dist.Interrupted (the ranks are stopped; their run
    folder removed, or named where a rank had reported something) and calib.plan.CalibrationInterrupted
    (what the state file keeps); a plain KeyboardInterrupt says nothing. `then()`, called once the
    interrupt has unwound, may add a line of the command's own (spd-plan: the partial file a rerun
    resumes from)."""
    try:
        yield
    except KeyboardInterrupt as e:
        lines = [f"Aborted! {e}".rstrip(), then() if then else None]
        click.echo("\n".join(line for line in lines if line), err=True)
        sys.exit(128 + signal.SIGINT)


def _reader_gone() -> None:
    """stdout's reader closed the pipe (`tpsim predict | head -1`): stop quietly with SIGPIPE's exit
    status, as a Unix tool killed by it would, not with an `Error:` line (Python's documented recipe:
    point stdout at devnull so the interpreter's final flush cannot raise again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + 13)
