"""The types of the schedule registry (sim/schedule/schedules/__init__.py says what a schedule holds)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tpsim.sim.schedule.builder import Builder

# What running a schedule asks of the model (predict's model_change column):
#   none         the same model and outputs as standard TP (only the order and shape of the work change)
#   retrain      a different architecture: the model must be trained (or fine-tuned) for it
#   drops syncs  the trained model with some all-reduces skipped: outputs change, some accuracy is lost
#   n/a          not a way to run the model (upper-bound: no communication; the standard layer's speed
#                ceiling, not every schedule's: schedules/upper_bound.py)
# A spec whose plan keeps every layer standard (spd:0: no block dropped) is none whatever its
# schedule's (sim/schedule/language.py model_change): it runs standard TP's pass.
MODEL_CHANGES = ("none", "retrain", "drops syncs", "n/a")

RunBuilder = Callable[..., str]     # (builder, first layer, end layer, input residual[, count]) -> output residual


@dataclass(frozen=True)
class Probe:
    """One compiled-kernel probe of a layer kind (hw/derive/inductor_kernels.py compiles it): its table key
    (the kind, or 'kind:N' for a kind that takes a count), the spec whose layers all have that kind,
    how many layers to compile, and whether the plain probe sizes tell its symbols apart."""

    key: str
    spec: str
    layers: int
    plain_sizes: bool = True


@dataclass(frozen=True)
class LayerKind:
    """A kind of layer a plan may hold: `build` appends the ops of a run of such layers."""

    name: str
    build: RunBuilder
    takes_count: bool = False           # plans write it 'name:N' (token-split:4); build gets N
    probes: tuple[Probe, ...] = ()      # compiled-kernel probes; () -> `analytic` says why
    analytic: str = ""                  # why compiled phases price it by the analytic fused model

    def __post_init__(self) -> None:
        if not self.probes and not self.analytic:
            raise ValueError(f"layer kind {self.name!r}: give its compiled-kernel probes or say why it has none")


def no_argument(spec: str, arg: str, n_layers: int) -> dict:
    """The parse of a schedule that takes no argument."""
    if arg:
        raise ValueError(f"schedule {spec.partition(':')[0]!r} takes no argument (got {spec!r})")
    return {}


@dataclass(frozen=True)
class ScheduleDef:
    """One schedule. `parse(spec, arg, n_layers)` turns the text after ':' ('' when absent) into
    the keyword arguments of `plan(n_layers, **kwargs)`, which returns the kind of every layer
    (kinds of this schedule's `kinds` or of other schedules'). ValueError for a bad argument."""

    name: str
    grammar: str                        # its part of the --schedule help: "ladder | ladder:K (upper K layers)"
    model_change: str                   # MODEL_CHANGES
    plan: Callable[..., tuple[str, ...]]
    kinds: tuple[LayerKind, ...] = ()
    parse: Callable[[str, str, int], dict] = no_argument
    example: str = ""                   # a spec that runs it ("" = the bare name): docs and tests use it
    # no collective anywhere in the pass: the builder also leaves out the ones outside the layers
    # (a vocab-parallel embedding's all-reduce, a vocab-parallel head's all-gather)
    comm_free: bool = False
    summary: str = ""                   # one line for `tpsim --help`: what the schedule does, and whose it is
    # the layer kind whose single-process reference `tpsim check` holds this schedule's layers to
    # (hw/check.py): a schedule that computes another's math names it (one that keeps the model:
    # "standard"); "": its own kinds' references
    numerics_reference: str = ""

    @property
    def example_spec(self) -> str:
        return self.example or self.name

    def __post_init__(self) -> None:
        if self.model_change not in MODEL_CHANGES:
            raise ValueError(f"schedule {self.name!r}: model_change must be one of {MODEL_CHANGES}")
        if ":" in self.name or not self.name:
            raise ValueError(f"schedule name {self.name!r} must be non-empty and hold no ':'")


def uniform(kind: str) -> Callable[[int], tuple[str, ...]]:
    """The plan of a schedule whose every layer is of one kind (standard, parallel, seq-parallel,
    upper-bound): `plan(n)` = (kind,) * n."""
    def plan(n: int) -> tuple[str, ...]:
        return (kind,) * n
    return plan


def each(layer: Callable[[Builder, int, str], str]) -> RunBuilder:
    """A run builder for a layer kind whose layers are built one at a time (all but ladder)."""
    def build(b: Builder, first: int, end: int, x: str) -> str:
        for i in range(first, end):
            x = layer(b, i, x)
        return x
    return build
