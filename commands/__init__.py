"""tpsim's command line: every click command, its options, the one user-error path.

cli.py is the `tpsim` group and a lazy table of these modules (commands.lazy): a command's module
is imported only when that command runs. Each module here is a command's click layer, with the
work it runs in sim/ (the simulator), hw/ (the torch harness, reached through hw.harness) and
calib/ (calibration). Shared: options.py (the flags, make_workload), errors.py (UserError and
user_errors: one line, exit 2), bounds.py (the options' bounds), console.py (rich, lazily).
Importing this package imports nothing else.
"""
