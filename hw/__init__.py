"""The harness: the schedules run on real torch.distributed process groups (NCCL on GPUs, gloo on CPUs).

Every module of hw/ imports torch at its top, but these: run_config.py (the bench config, plain data),
beat.py (the ranks' progress and heartbeat files), report.py (bench's and check's tables), and spd-plan's spd_select.py (choosing, pricing,
printing) and spd_text.py (tokens, digest); spd_plan.py is its torch side. The click commands that
start the harness (bench, check, spd-plan, calibrate, compare) are in tpsim.commands.

`harness()` is the one door through which the CLI's command bodies (commands.bench, .spd_plan,
.calibrate, .compare and calib.compare) reach the torch side: hw.bench, hw.check, hw.dist,
calib.run, torch itself. It is lazy because the commands must load without torch (tpsim predict, collective, models: the [hw]
extra is optional) and start fast (torch takes ~1 s to import). tests/test_imports.py holds every
other function-local import to a `# lazy: <reason>` comment.
"""
from __future__ import annotations

import importlib
import importlib.util

from tpsim.sim.errors import UserError


def require_torch(command: str) -> None:
    """UserError (one line, exit 2 through the commands' user_errors), before any process starts, when the
    [hw] extra (PyTorch) is missing."""
    if importlib.util.find_spec("torch") is None:
        raise UserError(f"tpsim {command} runs real PyTorch process groups and needs torch: "
                        f"pip install 'tpsim[hw]' (on a CPU-only machine: pip install torch==2.13.0 first)")


def harness(module: str, command: str):
    """The torch-side `module` (e.g. "tpsim.hw.dist", "tpsim.calib.run", "torch") for `tpsim command`, imported
    on first use (see the module doc for why lazily)."""
    require_torch(command)
    return importlib.import_module(module)
