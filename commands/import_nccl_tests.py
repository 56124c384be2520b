"""`tpsim profiles import-nccl-tests`: the click command of calib/nccl_import.py (nccl-tests outputs
-> a profile of measured collective tables). Pure Python (no torch)."""
from __future__ import annotations

from pathlib import Path

import click

from tpsim.fileio.lock import check_writable
from tpsim.sim.hardware.profile import load_profile, write_profile

from tpsim.calib.imports import COLLECTIVES, check_impl_tag
from tpsim.calib.nccl_import import build_profile, default_base, read_files, refuse_overwriting_inputs

from tpsim.commands.console import echo_wrapped
from tpsim.commands.errors import UserError, user_errors
from tpsim.commands.options import not_empty


def _fmt_bytes(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} B"


@click.command("import-nccl-tests")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False), callback=not_empty)
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=not_empty, help="profile JSON to write")
@click.option("--extends", default=None, callback=not_empty,
              help="base profile for compute and topology [default: the built-in profile of the GPU "
                   "named in the files' rank lines]")
@click.option("--group", type=int, default=None, help="ranks of the runs [default: each file's rank lines]")
@click.option("--mode", type=click.Choice(["eager", "graph"]), default=None,
              help="[default: each file's header: graph: 1 (-G 1) is graph, else eager]")
@click.option("--collective", type=click.Choice(COLLECTIVES), default=None,
              help="[default: the nccl-tests binary in the file name (all_gather_perf...), else all_reduce]")
@click.option("--impl", default="nccl", show_default=True, callback=not_empty,
              help="table tag (`--collective` of predict chooses it), e.g. nccl, nccl-p2p-off")
@click.option("--name", default=None, callback=not_empty, help="profile name [default: the --out file's stem]")
@user_errors
def import_nccl_tests_cmd(files, out, extends, group, mode, collective, impl, name):
    """Import nccl-tests outputs (all_reduce_perf etc.; text or -J JSON) as measured collective
    tables: one per (collective, group, mode), in a profile that extends a base profile."""
    if group is not None and group < 1:
        raise UserError(f"--group must be >= 1, got {group}")
    check_impl_tag(impl)                   # calibrate's rule: the tag predict's --collective picks
    check_writable(out)                    # the output-path policy: a regular file or a new name
    tables, gpus, spans = read_files(files, group=group, mode=mode, collective=collective)
    base = extends if extends is not None else default_base(gpus)
    per_node = load_profile(base).gpus_per_node
    refuse_overwriting_inputs(out, files, base)
    prof = build_profile(tables, extends=base, name=name if name is not None else Path(out).stem, impl=impl)
    write_profile(out, prof)
    click.echo(f"wrote {out}: {len(tables)} table(s), extends {base}")
    for t in sorted(tables, key=lambda t: (t.collective, t.group, t.mode)):
        echo_wrapped(f"  {t.collective} {t.group} ranks {t.mode}: {len(t.bytes)} sizes "
                     f"{_fmt_bytes(t.bytes[0])}..{_fmt_bytes(t.bytes[-1])}, "
                     f"{t.time_us[0]:g}..{t.time_us[-1]:g} us  ({t.path})")
        if t.path in spans and t.group <= per_node:
            echo_wrapped(f"  note: that run spans {spans[t.path]} hosts, yet {t.group} ranks fit in one node of "
                         f"{base} ({per_node} GPUs): predict uses it for a {t.group}-rank group inside a node",
                         err=True)
