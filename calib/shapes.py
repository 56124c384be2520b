"""Which op shapes a calibration covers: workload cases -> the schedules' ops (no torch needed)."""
from __future__ import annotations

from dataclasses import dataclass


from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.predict import decode_positions
from tpsim.sim.schedule.language import Schedule, build_plan, layer_kinds
from tpsim.sim.stack.spec import Stack, Step


@dataclass(frozen=True)
class ShapeCase:
    """One workload shape to calibrate compute for."""

    model: ModelSpec
    tp: int
    batch: int
    prompt_len: int
    gen_len: int
    stack: Stack

    def __post_init__(self) -> None:
        self.model.shard(self.tp)             # ValueError naming the valid TP degrees
        for f in ("batch", "prompt_len", "gen_len"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")

    @property
    def key(self) -> str:
        s = self.stack
        return (f"{self.model.name}/tp{self.tp}/b{self.batch}/p{self.prompt_len}/g{self.gen_len}/"
                f"{s.dtype}-{s.kv}-{s.attention}-{s.head}-{s.prefill_logits}-{'gqa' if s.expand_gqa else 'nogqa'}")

    def steps(self) -> list[Step]:
        """Prefill, then one decode step (kv static: all steps alike) or the positions the
        simulator's fast path samples (kv filled), so lookups hit measured shapes exactly."""
        st = self.stack
        out = [Step.prefill(self.batch, self.prompt_len, self.gen_len, st)]
        out += [Step.decode(self.batch, self.prompt_len, self.gen_len, j, st)
                for j in decode_positions(self.gen_len, st.kv)]
        return out

    def schedules(self, model: ModelSpec | None = None) -> list[Schedule]:
        """Every step, once per layer kind with all layers of that kind: every op shape any
        schedule (or mix of layer kinds) can emit."""
        m = model or self.model
        out = []
        for step in self.steps():
            for kind in layer_kinds():
                try:
                    out.append(build_plan(kind, (kind,) * m.layers, m, self.tp, step, self.stack))
                except ValueError:      # a kind that refuses this shape (dbo at batch 1) emits none of its ops
                    continue
        return out

    def signatures(self) -> list[tuple]:
        """Unique compute-op signatures, in first-seen order."""
        seen: dict[tuple, None] = {}
        for sched in self.schedules():
            for op in sched.ops:
                if not op.is_comm:
                    seen.setdefault(op.signature, None)
        return list(seen)
