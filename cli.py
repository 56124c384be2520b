"""tpsim command line: the `tpsim` group and its lazy command table.

Each command lives in tpsim.commands (its click layer; the work it runs in sim/, hw/, calib/) and
is imported only when it runs (commands.lazy.LazyGroup): `import tpsim.cli` loads click and this
table, nothing of the simulator, the harness or calibration, and no torch. The harness commands
(bench, check, spd-plan, calibrate, compare) reach torch through `hw.harness` when they run."""
from __future__ import annotations

if not __package__ and __name__ in ("__main__", "__mp_main__"):
    # `python cli.py ...` (or torchrun's `cli.py ...`) in a source checkout: run *this* checkout as
    # the package tpsim, whatever tpsim is installed (a sweep's worker re-runs this as __mp_main__)
    import _checkout
    _checkout.load()
    if __name__ == "__main__":
        from tpsim.cli import main as _main
        _main(prog_name="tpsim")

import click

from tpsim.commands.lazy import LazyGroup

# name -> ("module:command", its short help: `tpsim --help` lists it without importing the module;
# tests/test_cli.py holds each line equal to the command's own)
COMMANDS: dict[str, tuple[str, str]] = {
    # the simulator's (no torch)
    "predict": ("tpsim.commands.predict:predict",
                "Predict prefill time, decode time, tokens/s and speedup over standard TP per schedule."),
    "show": ("tpsim.commands.show:show",
             "Print one layer's ops in issue order with what each waits for, to check a schedule by eye."),
    "trace": ("tpsim.commands.trace:trace",
              "Write a Chrome/Perfetto trace of one prefill and one decode step (a track per rank and stream)."),
    "serve": ("tpsim.commands.serve:serve",
              "Serve request traffic with each schedule: TTFT/TPOT/E2E percentiles, goodput, highest rate under an SLO."),
    "sweep": ("tpsim.commands.sweep:sweep",
              "What-if grid from the simulator alone: models x TP x batch x profile x link scaling -> CSV (+ plot)."),
    "models": ("tpsim.commands.models:models",
               "Model presets with their shapes and valid TP degrees (any Llama-family config.json works "
               "wherever a model name is accepted)."),
    "profiles": ("tpsim.commands.profiles:profiles",
                 "List built-in hardware profiles or show one with the source of every number."),
    "stacks": ("tpsim.commands.stacks:stacks",
               "Serving-stack presets for --stack: the engine version line each describes (NAME@LINE; NAME "
               "alone is the current line), its host lane and how many of its host terms are ranges."),
    "collective": ("tpsim.commands.collective:collective_cmd",
                   "Price one collective per message size, with the path each number came from."),
    # the harness's (torch, through hw.harness, when they run)
    "bench": ("tpsim.commands.bench:bench_cmd",
              "Measure tokens/s of each schedule (interleaved repeats; standard always included)."),
    "check": ("tpsim.commands.bench:check_cmd",
              "Numerics: each schedule's TP output vs its single-process reference (nonzero exit on failure)."),
    "spd-plan": ("tpsim.commands.spd_plan:spd_plan_cmd",
                 "Choose SPD blocks by measured sensitivity (the SPD paper's method) and price them."),
    "calibrate": ("tpsim.commands.calibrate:calibrate_cmd",
                  "Measure collectives, the exact compute ops of the schedules and their overlap on this "
                  "machine; write a profile (raw points kept beside the fits)."),
    "compare": ("tpsim.commands.compare:compare_cmd",
                "Run the harness and the simulator on the same grid and report where the prediction is right."),
}


# `tpsim --help` lists every registered schedule (sim/schedule/schedules/registry.py), read when it prints
SECTIONS = {"Schedules (--schedule; each command's --help gives the arguments)":
            "tpsim.sim.schedule.schedules.registry:help_rows"}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, lazy_sections=SECTIONS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="tpsim")
def main():
    """Predict and measure tensor-parallel LLM inference under different compute/communication
    schedules, and what each asks of the model."""


if __name__ == "__main__":          # `python -m tpsim.cli` (installed); a checkout's `python cli.py` ran above
    main(prog_name="tpsim")
