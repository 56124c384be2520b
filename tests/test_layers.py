"""The folder contract (issue 47): which folder may import which, as a table, and one test that fails on
any import against it, in the style of import-linter's layers. Each folder's __init__ says the same in
words. Within a folder anything goes; across folders only the arrows below.

    sim leaves (bounds, errors, the sim package)  ->  fileio
    model, stack                                  ->  leaves                    (the shared base)
    schedule                                      ->  model, stack
    hardware                                      ->  stack                     (never price: parsing imports no pricing)
    price                                         ->  hardware, schedule, stack
    engine                                        ->  schedule, stack            (priced ops come in as numbers)
    sim top (workload, predict, memory, ...)     ->  everything in sim but serve
    serve                                         ->  the sim top, model, stack, schedule, hardware (nothing
                                                      in sim imports serve)
    hw core                                       ->  sim, fileio  (never hw/derive or hw/spd)
    hw/spd                                        ->  hw core, sim, fileio
    hw/derive                                     ->  hw core, sim, fileio  (offline; nothing imports it but itself)

fileio imports nothing of tpsim; the arrows above sim (cli -> commands -> calib -> hw -> sim) are
tests/test_imports.py's."""
from __future__ import annotations

from test_imports import import_graph

SIM_FOLDERS = ("model", "stack", "schedule", "hardware", "price", "engine")
BASE = {"leaf", "fileio"}
ALLOWED = {
    "leaf": {"fileio"},
    "model": BASE,
    "stack": BASE,
    "schedule": BASE | {"model", "stack"},
    "hardware": BASE | {"stack"},
    "price": BASE | {"hardware", "schedule", "stack"},
    "engine": BASE | {"schedule", "stack"},
    "top": BASE | set(SIM_FOLDERS),
    # the sim top and below, as used: never price or engine directly (iterations are priced through
    # predict's Simulator); nothing in sim imports serve
    "serve": BASE | {"top", "model", "stack", "schedule", "hardware"},
    "hw": {"sim", "fileio"},
    "hw/spd": {"hw", "sim", "fileio"},
    "hw/derive": {"hw", "sim", "fileio"},
    "fileio": set(),
}


def room(module: str) -> str | None:
    """The folder a module belongs to, in the table's words; None outside the table (cli, commands, calib)."""
    parts = module.split(".")[1:]               # drop "tpsim"
    if not parts:
        return None
    if parts[0] == "fileio":
        return "fileio"
    if parts[0] == "sim":
        if len(parts) == 1 or parts[1] in ("bounds", "errors"):
            return "leaf"
        if parts[1] == "serve":
            return "serve"
        return parts[1] if parts[1] in SIM_FOLDERS else "top"
    if parts[0] == "hw":
        return f"hw/{parts[1]}" if len(parts) > 1 and parts[1] in ("spd", "derive") else "hw"
    return None


def widen(target_room: str) -> set[str]:
    """What an arrow into `target_room` counts as: any sim room is 'sim' for the harness's rows."""
    out = {target_room}
    if target_room in ("leaf", "top", "serve", *SIM_FOLDERS):
        out.add("sim")
    return out


def test_every_import_follows_the_folder_table():
    g = import_graph()
    bad = []
    for a, b in g.edges:
        ra, rb = room(a), room(b)
        if ra is None or rb is None or ra == rb:
            continue
        if not widen(rb) & ALLOWED[ra]:
            bad.append(f"{a} ({ra}) -> {b} ({rb})")
    assert not bad, "imports against the folder table (tests/test_layers.py):\n" + "\n".join(sorted(bad))


def test_the_table_is_not_vacuous():
    """Each allowed arrow of the sim folders is one the code really takes (a table that allowed more
    than the code uses would not say what the architecture is)."""
    g = import_graph()
    used = {(room(a), rb) for a, b in g.edges if (rb := room(b)) and room(a) and room(a) != rb}
    for src in ("schedule", "hardware", "price", "engine", "top", "serve"):
        for dst in ALLOWED[src] - {"fileio", "leaf"}:
            assert (src, dst) in used, f"{src} may import {dst} but never does: narrow the table"
