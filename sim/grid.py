"""A grid point: the workload's size (`Shape`: model, TP, batch, prompt and gen lengths), and a
what-if point over it (`Point`: a shape on a profile, the interconnect scaled), with `grid`, every
combination of the axes. `tpsim sweep` runs Points (commands/sweep_grid.py); `tpsim compare` measures and
predicts Shapes (calib/compare_measure.py)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Shape:
    """A workload's size: what a grid varies besides the hardware (also `tpsim compare`'s points)."""

    model: str
    tp: int
    batch: int
    prompt_len: int
    gen_len: int

    @property
    def key(self) -> str:
        return f"{self.model}_tp{self.tp}_b{self.batch}_p{self.prompt_len}_g{self.gen_len}"


@dataclass(frozen=True)
class Point(Shape):
    """One what-if: a shape on a profile, with the interconnect scaled."""

    profile: str = "h100-sxm"
    bw_scale: float = 1.0
    lat_scale: float = 1.0


def grid(models: Iterable[str], tps: Iterable[int], batches: Iterable[int], profiles: Iterable[str],
         prompt_len: int = 1024, gen_len: int = 512, bw_scales: Iterable[float] = (1.0,),
         lat_scales: Iterable[float] = (1.0,)) -> list[Point]:
    """Every combination, in the order given; a value repeated on an axis (`--tp 2 --tp 2`)
    counts once, so no point (and no row) appears twice."""
    axes = [tuple(dict.fromkeys(a)) for a in (models, tps, batches, profiles, bw_scales, lat_scales)]
    return [Point(m, tp, b, prompt_len, gen_len, p, bw, lat) for m, tp, b, p, bw, lat in itertools.product(*axes)]
