"""The registry of schedules (the package docstring says what one holds) and its lookups."""
from __future__ import annotations

from tpsim.sim.schedule.schedules import (async_tp, dbo, ladder, parallel, seq_parallel, spd, standard, token_split,
                                          tokenweave, upper_bound)
from tpsim.sim.schedule.schedules._def import (MODEL_CHANGES, LayerKind, Probe, RunBuilder,  # noqa: F401  (public)
                                               ScheduleDef, each, no_argument)

# The built-in schedules, in the order the CLI's help lists them.
BUILTIN = (standard.DEF, ladder.DEF, spd.DEF, parallel.DEF, upper_bound.DEF, token_split.DEF, seq_parallel.DEF,
           async_tp.DEF, dbo.DEF, tokenweave.DEF)
REGISTRY: dict[str, ScheduleDef] = {d.name: d for d in BUILTIN}


def register(d: ScheduleDef, replace: bool = False) -> ScheduleDef:
    """Add a schedule (a new name, or `replace` an existing one). Its layer kinds must not clash
    with another schedule's."""
    if d.name in REGISTRY and not replace:
        raise ValueError(f"schedule {d.name!r} is registered already")
    others = {k.name for s in REGISTRY.values() if s.name != d.name for k in s.kinds}
    clash = sorted(others & {k.name for k in d.kinds})
    if clash:
        raise ValueError(f"schedule {d.name!r}: layer kind(s) {', '.join(clash)} belong to another schedule")
    REGISTRY[d.name] = d
    return d


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def schedule_def(name: str) -> ScheduleDef | None:
    return REGISTRY.get(name)


def layer_kinds() -> dict[str, LayerKind]:
    """Every layer kind of every registered schedule, by name, in registry order."""
    return {k.name: k for d in REGISTRY.values() for k in d.kinds}


def layer_builder(kind: str) -> RunBuilder:
    """The builder of a run of layers of `kind` ('kind' or 'kind:N' for a kind that takes a count)."""
    base, _, arg = kind.partition(":")
    lk = layer_kinds().get(base)
    if lk is None:
        raise ValueError(f"unknown layer kind {kind!r}; choose from {', '.join(layer_kinds())}")
    if not arg:
        return lk.build
    n = int(arg)
    return lambda b, first, end, x: lk.build(b, first, end, x, n)


def schedule_help() -> str:
    """The --schedule help: every registered schedule's grammar."""
    return " | ".join(d.grammar for d in REGISTRY.values())


def help_rows() -> list[tuple[str, str]]:
    """`tpsim --help`'s schedule list: (name, summary and what it asks of the model) per registered schedule."""
    return [(d.name, f"{d.summary or d.grammar} [model change: {d.model_change}]") for d in REGISTRY.values()]


def numerics_reference(kind: str) -> str:
    """The layer kind whose single-process reference checks a layer of `kind` (hw/check.py): its schedule's
    numerics_reference, or `kind` itself."""
    d = next((d for d in REGISTRY.values() if any(k.name == kind for k in d.kinds)), None)
    return d.numerics_reference if d is not None and d.numerics_reference else kind
