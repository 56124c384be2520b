"""`tpsim collective`: price one collective size by size, like an nccl-tests table, and optionally
hold it against a measured nccl-tests output (read by calib/imports.py). Pure Python: no torch."""
from __future__ import annotations

import json
import math
import statistics

import click

from tpsim.sim.bounds import check as check_bound
from tpsim.commands.collective_table import COLLECTIVES, MODES, Row, collective_rows, parse_size, to_json
from tpsim.sim.price.comm.timing import HostCosts, Timing, loop_time
from tpsim.sim.stack.impls import ENGINE_COLLECTIVES, check_collective_impl
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.topology import nccl_nodes
from tpsim.sim.price.comm.topology import TopologyModel

from tpsim.calib.nccl_import import read_files

from tpsim.commands.console import compact_table, rich_escape, terminal_console
from tpsim.commands.errors import user_errors
from tpsim.commands.options import not_empty


@click.command("collective")
@click.option("--profile", "profile_name", default="h100-sxm", show_default=True, callback=not_empty,
              help="Built-in name or JSON path.")
@click.option("--op", "collective", type=click.Choice(COLLECTIVES), default="all_reduce", show_default=True)
@click.option("--group", type=int, required=True, help="Ranks in the collective (TP degree).")
@click.option("--mode", type=click.Choice(MODES), default="graph", show_default=True,
              help="graph / eager: as a compiled CUDA-graph step / an eager call pays it; "
                   "nccl: the bare NCCL kernel, as nccl-tests times it.")
@click.option("--bytes", "sizes", multiple=True, metavar="B", callback=not_empty,
              help="Message size (4096, 16K, 1M ...); repeatable. Default: the --compare file's sizes, "
                   "else 1K..256M doubling.")
@click.option("--gpus-per-node", type=int, default=None, help="Ranks placed on each node (default: the profile's gpus_per_node); the node stays the "
                   "profile's hardware (its NICs, NVLink).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--compare", "compare_path", type=click.Path(dir_okay=False), default=None, callback=not_empty,
              help="An nccl-tests output (text or -J JSON): adds the measured time and the error per size.")
@click.option("--impl", default="auto", show_default=True, callback=not_empty,
              help="Implementation: auto (the profile's default), a table tag of the profile (nccl, custom, ...) "
                   f"or an engine all-reduce ({', '.join(ENGINE_COLLECTIVES)}).")
@click.option("--hidden", type=int, default=None,
              help="Hidden size of the [tokens, hidden] tensor (TensorRT-LLM AUTO picks its kernel by shape); "
                   "default 4096, as aiconfigurator's collector shapes each message.")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True,
              help="The tensor's dtype: whether symmetric memory takes a message (vLLM's SymmMemCommunicator: "
                   "bf16 only; torch's symm_mem kernels: bf16/fp32). NCCL and custom all-reduce prices do not "
                   "depend on it.")
@user_errors
def collective_cmd(profile_name, collective, group, mode, sizes, gpus_per_node, as_json, compare_path, impl, hidden,
                   dtype):
    """Price one collective per message size, with the path each number came from."""
    _run(profile_name, collective, group, mode, sizes, gpus_per_node, as_json, compare_path, impl, hidden, dtype)


def _run(profile_name, collective, group, mode, sizes, gpus_per_node, as_json, compare_path, impl="auto",
         hidden=None, dtype="bf16"):
    # the bounds table (sim/bounds.py): ranks are priced one by one, so --group 2000000 ran out of memory
    check_bound("collective_group", group, "--group")
    if gpus_per_node is not None:
        check_bound("gpus_per_node", gpus_per_node, "--gpus-per-node")
    nbytes = tuple(check_bound("message_bytes", parse_size(s), "--bytes") for s in sizes)
    if hidden is not None:
        check_bound("hidden", hidden, "--hidden")
    prof = load_profile(profile_name)
    check_collective_impl(prof, impl, "--impl")
    measured = None
    if compare_path is not None:
        imp = _measured_run(compare_path, collective, group)
        measured = dict(zip(imp.bytes, imp.time_us))
    notes: list[str] = []
    rows = collective_rows(prof, collective, group, mode, nbytes or None,
                           gpus_per_node, measured, impl=impl, width=hidden, notes=notes, dtype=dtype)
    timing, flagged, reason = None, [], None
    if measured is not None and (imp.gpus_per_thread > 1 or imp.mode == "graph"):
        # one nccl-tests thread launched every GPU's kernel each iteration (-g N): mark the sizes
        # whose time its host launch loop can set; a -G file's captured calls each pay NCCL's
        # graph-mixing record node (sim/price/comm/timing.py)
        kind = "graph_replay_batched" if imp.mode == "graph" else "single_thread_n_gpus"
        timing = Timing(kind, imp.gpus_per_thread, graph_launches=max(1, imp.graph_launches))
        host = HostCosts.from_profile(prof)
        bare = rows if mode == "nccl" else collective_rows(prof, collective, group, "nccl",
                                                            tuple(r.bytes for r in rows), gpus_per_node)
        marked = []
        for r, k in zip(rows, bare):
            lt = loop_time(k.time_us * 1e-6, timing, host)     # the loop acts on the bare kernel's time
            add_us, path = lt.time_s * 1e6 - k.time_us, lt.path
            if mode == "graph" and path.startswith("+graph_nccl_node"):
                # a graph-mode row already carries NCCL's record node: not twice
                add_us, path = add_us - host.graph_nccl_node_s * 1e6, path[len("+graph_nccl_node"):]
            marked.append(Row(r.bytes, r.time_us + add_us, r.busbw_gbps, r.path + path, r.measured_us))
            if lt.unpriced:
                flagged.append(r.bytes)
                reason = lt.unpriced
        rows = marked
    nccl = _nccl_nodes(prof, group, gpus_per_node, rows)
    if as_json:
        out = to_json(prof.name, collective, group, mode, rows)
        if nccl is not None:
            out["nccl"] = nccl
        if impl != "auto":
            out["impl"] = impl
        if notes:
            out["notes"] = notes
        if measured is not None:
            out["compare"] = {"file": compare_path, "median_abs_error_pct": _median_abs(rows)}
            if timing is not None:
                out["compare"]["timing"] = {"kind": timing.kind, "gpus_per_thread": timing.gpus_per_thread,
                                            "graph_launches": timing.graph_launches if imp.mode == "graph" else 0,
                                            "unpriced_sizes": flagged, "unpriced_reason": reason,
                                            "median_abs_error_pct_priced":
                                                _median_abs([r for r in rows if r.bytes not in flagged])}
        click.echo(json.dumps(out))
        return
    per = gpus_per_node or prof.gpus_per_node
    boxes = -(-group // per)
    # the machines, and where NCCL splits them further (P2P off across sockets) how many nodes it sees
    seen = f"; NCCL sees {nccl['nnodes']}" if nccl is not None and nccl["nnodes"] != boxes else ""
    t = compact_table(title=f"{collective}  {group} ranks ({boxes} node{'s' if group > per else ''}{seen})  "
                           f"profile {rich_escape(prof.name)}  mode {mode}" + (f"  impl {impl}" if impl != "auto" else ""),
                      title_justify="left")
    # two-line headers, units below; the path wraps before each of its +terms (the JSON keeps it whole)
    for col in ("size\nB", "time\nus", "busbw\nGB/s") + (("measured\nus", "error") if measured else ()) + ("path",):
        t.add_column(col, justify="left" if col == "path" else "right", no_wrap=col != "path", overflow="fold")
    for r in rows:
        cells = [str(r.bytes), f"{r.time_us:.2f}", f"{r.busbw_gbps:.2f}"]
        if measured is not None:
            cells += ["-", "-"] if r.measured_us is None else [f"{r.measured_us:.2f}", f"{r.error_pct:+.1f}%"]
        t.add_row(*cells, rich_escape(r.path.replace("+", " +")))
    console = terminal_console()
    console.print(t)
    if nccl is not None:
        console.print(f"NCCL nNodes {nccl['nnodes']} (ranks per NCCL node {'+'.join(map(str, nccl['ranks_per_node']))}"
                      f"; P2P off: {nccl['why']}); algorithm/protocol the tuner picks: "
                      f"{', '.join(nccl['picks']) or '-'} (path column, per size)")
    for n in notes:
        console.print(rich_escape(f"note: {n}"))
    if measured is not None:
        med = _median_abs(rows)
        console.print(f"median |error| over {sum(r.measured_us is not None for r in rows)} sizes: "
                      + ("-" if med is None else f"{med:.1f}%")
                      + ("" if mode == "nccl" else "  (nccl-tests times the bare kernel: --mode nccl compares like "
                                                   "with like)"))
        if timing is not None and timing.kind == "single_thread_n_gpus":
            g = timing.gpus_per_thread
            bound = g * prof.launch_s["eager"] * 1e6
            dev = _median_abs([r for r in rows if r.bytes not in flagged])
            console.print(f"warning: {rich_escape(compare_path)} was timed by one thread launching {g} GPUs' kernels per call "
                          f"(nccl-tests -g {g}, 'nGpus {g}' in its header); below {g} x compute.launch_us.eager = "
                          f"{bound:.1f} us of device time its times can be the host launch loop, not the collective "
                          f"(one process per GPU never pays it): {len(flagged)} sizes marked +host-floor?(g{g}); "
                          f"median |error| over the other {len(rows) - len(flagged)} sizes: "
                          + ("-" if dev is None else f"{dev:.1f}%"))
        elif flagged:
            console.print(f"warning: {rich_escape(compare_path)}: {rich_escape(str(reason))}: {len(flagged)} sizes marked +first-launch? (their "
                          f"times include it; nccl-tests -G 10 or more spreads it over ten times the calls)")


def _measured_run(path: str, collective: str, group: int):
    """The run of an nccl-tests output over `group` ranks, read as import-nccl-tests reads it
    (calib/nccl_import.py: a file of several runs, e.g. 8 then 16 GPUs, is split at each run's header,
    not refused): the one run of that size, else a line naming the runs there are."""
    tables, _, _ = read_files([path], collective=collective)
    runs = [t for t in tables if t.group == group]
    if len(runs) == 1:
        return runs[0]
    where = lambda ts: " and ".join(f"{t.group} ranks {t.path[len(str(path)):].strip()}".rstrip()  # noqa: E731
                                    for t in ts)
    if not runs:
        raise ValueError(f"{path} was measured over {where(tables)}, but --group is {group}")
    raise ValueError(f"{path} holds {len(runs)} runs over {where(runs)}; compare each from a file of its own")


def _nccl_nodes(prof, group: int, gpus_per_node: int | None, rows) -> dict | None:
    """For a P2P-off profile with a topology: how NCCL 2.21 splits the group into nodes
    (sim/hardware/topology.py nccl_domains) and the algorithm/protocol picks in the rows; None otherwise."""
    spec = prof.topology
    if spec is None or spec.p2p or group <= 1:
        return None
    tm = TopologyModel(spec)
    nodes = nccl_nodes(spec, tm.placement(group, gpus_per_node or prof.gpus_per_node))
    boxes = len({k for k, _ in tm.placement(group, gpus_per_node or prof.gpus_per_node)})
    why = ("cross-socket pairs go NET/IB (shm.cc shmCanConnect -> ncclTopoCheckNet), NVLS off for nNodes > 1"
           if len(nodes) > boxes else "every pair inside a box is SHM (one NCCL node per box)")
    picks = []
    for r in rows:
        if r.path.startswith("topology:"):
            name = r.path[len("topology:"):].split("+")[0]
            if name not in picks:
                picks.append(name)
    return {"nnodes": len(nodes), "ranks_per_node": [len(x) for x in nodes], "why": why, "picks": picks}


def _median_abs(rows) -> float | None:
    errs = [abs(r.error_pct) for r in rows if r.error_pct is not None and math.isfinite(r.error_pct)]
    return round(statistics.median(errs), 2) if errs else None
