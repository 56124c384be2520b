"""A workload in, a prediction per schedule out (the benchmark protocol of docs/design.md).

prefill_s: one forward pass over batch x prompt (it produces token 1).
decode_s:  the remaining gen-1 steps, each one token per sequence.
tokens/s:  batch * gen / (prefill_s + decode_s); speedup: over the standard schedule.

Fast path (default): one representative rank (ranks are symmetric without jitter); each run of
identical layers simulated for WARM_LAYERS layers and once more with one layer added, the
difference being the run's steady per-layer period (layers repeat, so the timeline does too);
and, when decode attention reads only the filled cache, decode steps simulated at sampled
positions and integrated over the growing KV length (a step's time is piecewise linear in it).
Sampled mode (`--exact`): the fast path plus the mean cost of the profile's per-rank arrival
jitter, every rank simulated on samples of steps (sim/engine/sampled.py), with a 95% confidence interval.
Brute-force mode (`--exhaustive`, tests): every rank, every layer and every decode step, with the
profile's jitter drawn once per rank and collective.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine import arrival
from tpsim.sim.engine.step import Interference, StepResult
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.stack import host_lane
from tpsim.sim.workload import Workload
from tpsim.sim.engine.estimate import REL_TOL
from tpsim.sim.prediction import Prediction
from tpsim.sim.schedule.language import Schedule, build_plan, model_change, plan_of, runs_of
from tpsim.sim.stack.spec import Step

MODES = ("fast", "sampled", "brute")
DECODE_SAMPLES = 17       # sampled decode positions on the fast path (when steps differ)
WARM_LAYERS = 2           # layers of a run simulated before its per-layer period is taken as steady


def decode_positions(gen_len: int, kv: str) -> list[int]:
    """The decode steps j (1..gen_len-1) the fast path simulates: step 1 alone when every step reads
    the whole static cache (all steps alike), else DECODE_SAMPLES positions spread evenly, the steps
    between them interpolated. The one definition: calibration measures exactly these shapes
    (calib.shapes), so the simulator's lookups hit measured points."""
    last = gen_len - 1
    if last < 1:
        return []
    if kv != "filled":
        return [1]
    import numpy as np              # lazy: numpy (~0.07 CPU s to import) only where decode steps differ
    return sorted({int(j) for j in np.linspace(1, last, min(DECODE_SAMPLES, last)).round()})


class _KeepNothing(dict):
    """A `passes` that keeps nothing (Simulator without the caller's dict)."""

    def __setitem__(self, key, value) -> None:
        pass


class Simulator:
    """Simulates schedules of one workload; shares one cost cache across them."""

    def __init__(self, workload: Workload, exact: bool = False, record: bool = True,
                 progress: Callable[[], None] | None = None, ranks: int | None = None,
                 mode: str | None = None, seed: int = 0, rel_tol: float = REL_TOL, like: Simulator | None = None,
                 passes: dict | None = None):
        self.mode = mode or ("brute" if exact else "fast")       # exact=True: the brute-force mode
        # fast-path passes and notes priced for this profile and stack but its host lane (no lane enters a
        # one-rank pass): sim/sensitivity.py reruns the host terms' ends on them. Not given: none kept
        # (a caller may change the simulator between calls: calib.compare_intervals)
        self._passes_of = passes if passes is not None and self.mode == "fast" else _KeepNothing()
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        self.w, self.exact, self.record = workload, self.mode == "brute", record
        self.seed, self._passes = seed, 0
        # like: a simulator of this workload on a profile that prices every op alike (sim.price.cost.UNPRICED,
        # sim/sensitivity.py's settings): its cost model, the passes it built and their prices serve this one too
        self._short: dict = like._short if like is not None else {}   # (spec, layer counts, step) -> pass built
        self._priced: dict = like._priced if like is not None else {}  # id(pass) -> (pass, _prices of it)
        self._apart: dict = like._apart if like is not None else {}    # (id(pass), wake_s, jitter) -> (pass, timeline)
        # (phase, prices, factors, jitter) -> [(ops, timeline)] of the kept passes simulated: another spec's pass
        # of the same ops at the same prices has the same timeline (_timed)
        self._same: dict = like._same if like is not None else {}
        self._talks: dict = like._talks if like is not None else {}    # id(pass) -> it has a collective
        self.ranks = ranks or (workload.tp if self.exact else 1)  # simulated ranks (a trace may show fewer)
        self.progress = progress            # called once per simulated forward pass (brute force is slow)
        p = workload.profile
        self.cost = like.cost if like is not None else CostModel(p, workload.stack, workload.gpus_per_node)
        # a GPU profile's overlap.gpu: co-scheduling per kernel (sim/price/coschedule.py) instead of flat factors
        cosched = None
        if p.coschedule:
            from tpsim.sim.price import occupancy     # lazy: the co-scheduling model, only for a profile with one
            cosched = occupancy.coschedule(self.cost, p.coschedule, self.comm_s)
        self.interference = Interference(p.compute_slowdown, p.comm_slowdown, p.wake_s, cosched)
        self.sampler = None
        if self.mode == "sampled":
            from tpsim.sim.engine.sampled import Sampler    # lazy: the sampler and numpy, only in sampled mode
            self.sampler = Sampler(workload.model, workload.tp, workload.stack, self._op_time, self.interference,
                                   p.arrival_jitter, self._scope, self.w.comm_group or workload.tp, WARM_LAYERS,
                                   seed, rel_tol, host_time=self._host_time, start_s=self._offsets(),
                                   issue_time=self._issue_time)

    @property
    def kept_passes(self) -> dict | None:
        """The fast-path passes and notes this simulator keeps (its `passes`), None where it keeps none."""
        return None if isinstance(self._passes_of, _KeepNothing) else self._passes_of

    def _op_time(self, op, phase: str, sched: Schedule | None = None) -> float:
        return self.comm_s(op, phase) if op.is_comm else self.cost.compute_s(op, phase, sched)

    @property
    def _host_time(self):
        """(op, phase) -> seconds of NCCL's graph host node for a network collective (CostModel.host_s),
        or None while the profile leaves collectives.graph_net_host_us unset (the engines skip it)."""
        if self.w.profile.graph_net_host_s <= 0:
            return None

        def host(op, phase: str) -> float:
            if self.w.comm_group is not None:
                op = replace(op, attrs=tuple((k, self.w.comm_group if k == "group" else v) for k, v in op.attrs))
            return self.cost.host_s(op, phase)
        return host

    @property
    def _issue_time(self):
        """(op, phase, schedule) -> CPU seconds to launch an op (CostModel.issue_s: eager launches on a
        GPU, chained per rank by the engines), or None on a CPU device (launches are in the op's time)."""
        if self.w.profile.device != "cuda":
            return None

        def issue(op, phase: str, sched: Schedule | None = None) -> float:
            if op.is_comm and self.w.comm_group is not None:    # the group the collective really spans
                op = replace(op, attrs=tuple((k, self.w.comm_group if k == "group" else v) for k, v in op.attrs))
            return self.cost.issue_s(op, phase, sched)
        return issue

    def _scope(self, op) -> str:
        """The scope whose arrival jitter a collective draws: it spans nodes or not."""
        return self.cost.scope(self.w.comm_group or op.attr("group"))

    def step(self, spec: str, step: Step, record: bool | None = None) -> StepResult:
        """The full timeline of one forward pass (every layer)."""
        return self._simulate(self.w.schedule(spec, step), self.record if record is None else record)

    def _offsets(self) -> tuple[float, ...]:
        """The host lane's per-rank start offsets (a step of the workload's batch), () without a lane."""
        h = self.w.stack.host
        return host_lane.lane(h, self.w.tp, self.w.batch).offsets_s if h.active else ()

    def lane(self, step: Step) -> host_lane.Lane | None:
        """The stack's host lane for `step` (sim.stack.host_lane), or None when the stack has none."""
        h = self.w.stack.host
        return host_lane.lane(h, self.w.tp, step.seqs, self._broadcast_s(step.seqs)) if h.active else None

    def _broadcast_s(self, batch: int) -> float:
        """One of the lane's GPU-side input broadcasts (HostStep.step_broadcasts, vLLM V0's) as an eager NCCL
        all-gather of an int64 per sequence: a ring broadcast takes the same n-1 latency-bound steps at
        these sizes (NCCL src/graph/tuning.cc), and profiles time no broadcast."""
        group = self.w.comm_group or self.w.tp
        return (self.cost.collective_s("all_gather", 8 * batch * group, group, "eager", impl="nccl")
                if self.w.stack.host.step_broadcasts and self.w.tp > 1 and group > 1 else 0.0)

    def step_time(self, spec: str, step: Step) -> tuple[float, float]:
        """(duration_s, exposed_comm_s) of one engine step: the forward pass (compressed over repeated
        layers on the fast path, the full timeline in exact mode) inside the stack's host lane
        (sim.stack.host_lane.step_s: in series or overlapped; the ranks' staggered starts, simulated per rank
        in brute-force mode, the last rank's offset added on the fast path)."""
        dur, exp = self._pass_time(spec, step)
        return self.in_lane(step, dur, self.exact), exp

    def in_lane(self, step: Step, pass_s: float, staggered: bool) -> float:
        """The engine step that holds a forward pass of `pass_s` (sim.stack.host_lane.step_s), or the pass
        alone without a host lane. `staggered`: the pass was simulated with the lane's per-rank starts
        on this simulator's ranks (exact mode, `step`), so it holds their stagger already; the ranks
        not simulated add the rest of it (symmetric ranks: the last one decides)."""
        ln = self.lane(step)
        if ln is None:
            return pass_s
        inc = max(ln.offsets_s[:self.ranks]) if staggered and self.ranks > 1 else 0.0
        return host_lane.step_s(self.w.stack.host, ln, pass_s - inc, pass_s + ln.stagger_s - inc)

    def _pass_time(self, spec: str, step: Step) -> tuple[float, float]:
        """(duration_s, exposed_comm_s) of one forward pass on the GPU."""
        if self.exact:
            r = self.step(spec, step, record=False)
            if self.progress:
                self.progress()
            return r.duration_s, r.exposed_comm_s

        if (spec, step) in self._passes_of:
            return self._passes_of[(spec, step)]
        held: dict[int, int] = {}

        def timed(sched: Schedule) -> tuple[float, float]:
            r = self._timed(sched)
            held[id(sched)] = r.last_held_op
            return r.duration_s, r.exposed_comm_s

        def settled(sched: Schedule) -> bool:
            """The launch chain held no op back from the pass's second layer on."""
            second = next((i for i, op in enumerate(sched.ops) if op.layer is not None and op.layer >= 1),
                          len(sched.ops))
            return held[id(sched)] < second
        dur, exp = self._over_layers(spec, step, timed, settled)
        self._passes_of[(spec, step)] = dur, exp
        return dur, exp

    def _over_layers(self, spec: str, step: Step, measure: Callable[[Schedule], tuple[float, ...]],
                     settled: Callable[[Schedule], bool] | None = None) -> list[float]:
        """`measure` of the whole pass from compressed ones: each run of identical layers built with
        WARM_LAYERS layers, then once more with one layer added, the difference times the run's
        remaining layers (layers repeat, so whatever they add per layer does too).

        Where Python launches the phase's kernels (a GPU phase without a CUDA graph: the engines'
        launch chain) layers repeat only once the CPU is ahead of the GPU. The extrapolation stands
        when, in every compressed pass, the chain held no op back from the second layer on
        (`settled`) and each run's layer launches in no more CPU time than the GPU time it adds: then
        the CPU's lead only grows with more layers, so no later op (the pass's tail included) waits
        for its launch either. Otherwise (a launch-bound pass) the pass is simulated whole."""
        rs = runs_of(spec, self.w.model.layers)
        short = [min(end - first, WARM_LAYERS) for _, first, end in rs]
        chain = settled is not None and self._issue_time is not None and not self.w.stack.graphs(step.phase)
        base_pass = self.warm_pass(spec, step)
        base = measure(base_pass)
        ok = not chain or settled(base_pass)
        total = list(base)
        for j, (_, first, end) in enumerate(rs):
            extra = (end - first) - short[j]
            if extra > 0 and ok:
                longer_pass = self._short_pass(spec, rs, short[:j] + [short[j] + 1] + short[j + 1:], step)
                longer = measure(longer_pass)
                if chain:
                    layer_cpu_s = self._issue_sum(longer_pass) - self._issue_sum(base_pass)
                    ok = settled(longer_pass) and layer_cpu_s <= (longer[0] - base[0]) * (1 + 1e-12)
                total = [t + extra * (b1 - b0) for t, b0, b1 in zip(total, base, longer)]
        if not ok:
            return list(measure(self._short_pass(spec, rs, [end - first for _, first, end in rs], step)))
        return total

    def warm_pass(self, spec: str, step: Step) -> Schedule:
        """The compressed pass the fast path measures first: each run of identical layers with WARM_LAYERS
        layers (all of a shorter run). Layers repeat, so it holds an op priced as each op of the whole
        pass is (what `_over_layers` rests on): a question about every op's price asks it of fewer ops."""
        rs = runs_of(spec, self.w.model.layers)
        return self._short_pass(spec, rs, [min(end - first, WARM_LAYERS) for _, first, end in rs], step)

    def _issue_sum(self, sched: Schedule) -> float:
        """CPU seconds to launch every op of a pass (the launch chain's length)."""
        return sum(self._prices(sched)[1].values())

    def _short_pass(self, spec: str, rs, counts: list[int], step: Step) -> Schedule:
        """The pass whose runs have `counts` layers each, built once per (spec, counts, step)."""
        key = (spec, tuple(counts), step)
        if key not in self._short:
            plan = tuple(k for (k, _, _), n in zip(rs, counts) for _ in range(n))
            model = self.w.model.truncated(len(plan)) if len(plan) < self.w.model.layers else self.w.model
            built = self._short[key] = build_plan(spec, plan, model, self.w.tp, step, self.w.stack)
            self._priced[id(built)] = (built, None)     # its prices are kept once made (_prices)
        return self._short[key]

    def comm_s(self, op, phase: str) -> float:
        """A collective's time, with the workload's what-if link scaling applied:
        lat_scale * t(0 bytes) + (t - t(0 bytes)) / bw_scale."""
        if self.w.comm_group is not None:
            op = replace(op, attrs=tuple((k, self.w.comm_group if k == "group" else v) for k, v in op.attrs))
        t = self.cost.comm_s(op, phase)
        bw, lat = self.w.comm_bw_scale, self.w.comm_lat_scale
        if bw == 1.0 and lat == 1.0:
            return t
        tiny = replace(op, attrs=tuple((k, 1 if k in ("rows", "width") else v) for k, v in op.attrs))
        t0 = min(self.cost.comm_s(tiny, phase), t)
        return lat * t0 + (t - t0) / bw

    def _prices(self, sched: Schedule) -> tuple[dict, dict | None]:
        """(op name -> seconds, op name -> CPU launch seconds or None without a launch chain) of `sched`:
        kept for the compressed passes (`_short_pass`; a simulator `like` this one reads them too)."""
        hit = self._priced.get(id(sched))
        if hit is not None and hit[0] is sched and hit[1] is not None:
            return hit[1]
        phase, cost, issue = sched.step.phase, self.cost, self._issue_time
        times: dict[str, float] = {}
        launch: dict[str, float] | None = {} if issue is not None else None
        for op in sched.ops:        # an op's time, then its launch: both read its kernels (CostModel.kernels_of)
            times[op.name] = self.comm_s(op, phase) if op.is_comm else cost.compute_s(op, phase, sched)
            if launch is not None:
                launch[op.name] = issue(op, phase, sched)
        out = (times, launch)
        if hit is not None and hit[0] is sched:
            self._priced[id(sched)] = (sched, out)
        return out

    def _timed(self, sched: Schedule) -> StepResult:
        """A compressed pass's timeline (fast path). One where no compute ran beside a collective
        (StepResult.apart) is the same at any flat factors with its wake-up: kept, and not simulated
        again by a simulator `like` this one (sim/sensitivity.py's settings of those factors). A kept
        pass whose ops and prices equal those of one simulated before (another spec's: a token split of
        a batch-1 decode step runs standard's layers) takes its timeline."""
        i = self.interference
        kept = id(sched) in self._priced              # a kept pass (_short_pass)
        # the same wake-up and the same arrival waits (the profile's jitter, which moves the timeline through
        # the collectives' arrivals only: none for a pass without a collective)
        jitter = self._jitter if not kept or self._has_collective(sched) else ()
        key = (id(sched), i.wake_s, jitter)
        hit = self._apart.get(key)
        if hit is not None and hit[0] is sched and i.active and i.coschedule is None:
            return hit[1]
        same = None
        if kept and i.coschedule is None:             # a co-scheduling hook reads the schedule itself
            times, launch = self._prices(sched)
            same = (sched.step.phase, tuple(times.values()), tuple(launch.values()) if launch is not None else None,
                    i.compute_slowdown, i.comm_slowdown, i.wake_s, jitter)
            for ops, r in self._same.get(same, ()):
                if ops == sched.ops:
                    return r
        r = self._simulate(sched, record=False)
        if same is not None:
            self._same.setdefault(same, []).append((sched.ops, r))
        if r.apart and kept:
            self._apart[key] = (sched, r)
        return r

    @property
    def _jitter(self) -> tuple:
        """The profile's arrival jitter as a key: (scope, dist, mean_s) per scope."""
        return tuple(sorted((k, j.dist, j.mean_s) for k, j in self.w.profile.arrival_jitter.items()))

    def _has_collective(self, sched: Schedule) -> bool:
        """Whether a kept pass has a collective (asked once per pass)."""
        out = self._talks.get(id(sched))
        if out is None:
            out = self._talks[id(sched)] = any(op.is_comm for op in sched.ops)
        return out

    def _simulate(self, sched: Schedule, record: bool) -> StepResult:
        phase = sched.step.phase
        times, launch = self._prices(sched)
        jitter = self.w.profile.arrival_jitter
        mean = (lambda op: jitter[self._scope(op)].mean_s) if self.exact else None
        self._passes += 1       # each pass draws its own jitter (steps are independent draws)
        host = self._host_time
        ln = self.lane(sched.step) if self.ranks > 1 else None    # the host lane's per-rank starts
        # the launch chain restarts with every pass (sim/engine/simpy_engine.py): the step's sync on its sampled
        # tokens ended the last one; a host lane's lead (schedule, prepare) comes before it (step_s)
        return simulate(sched, lambda op: times[op.name], ranks=self.ranks, interference=self.interference,
                        arrival_mean_s=mean, record=record, seed=self.seed * 1_000_003 + self._passes,
                        host_s=(lambda op: host(op, phase)) if host is not None else None,
                        rank_delay_s=ln.offsets_s if ln is not None else (),
                        issue_s=(lambda op: launch[op.name]) if launch is not None else None,
                        # the fast path's one rank waits its peers' expected lateness (sim/engine/arrival.py)
                        arrival_wait_s=self.arrival_wait_s if self.mode == "fast" else None)

    def arrival_wait_s(self, op) -> float:
        """A collective's expected wait for its last rank under the profile's arrival jitter."""
        j = self.w.profile.arrival_jitter[self._scope(op)]
        return arrival.expected_wait_s(j.dist, j.mean_s, self.w.comm_group or op.attr("group"))

    def notes(self, spec: str) -> tuple[str, ...]:
        """The builder's notes for the prefill and a decode step, plus what padding costs (seq-parallel:
        each padded all-gather / reduce-scatter priced at its padded size minus at the real tokens').
        Read off the fast path's compressed passes (a builder's notes do not depend on the depth, the
        padding's cost is per layer), not from full passes built for nothing."""
        if ("notes", spec) in self._passes_of:
            return self._passes_of[("notes", spec)]
        w = self.w
        steps = [(w.prefill_step(), 1)] + ([(w.decode_step(1), w.gen_len - 1)] if w.gen_len > 1 else [])
        out: dict[str, None] = {}

        def padding(sched: Schedule) -> tuple[float]:
            out.update(dict.fromkeys(sched.notes))
            step, pad_s = sched.step, 0.0
            for op in sched.collectives:
                if (op.kind == "reduce_scatter" or op.get("dim", -1) == 0) and \
                        dict(op.attrs)["rows"] * (op.attr("group") if op.kind == "all_gather" else 1) > step.tokens:
                    mode = "graph" if w.stack.graphs(step.phase, op.name) else "eager"
                    real = self.cost.collective_s(op.kind, w.stack.dtype_bytes * step.tokens * op.attr("width"),
                                                  op.attr("group"), mode)
                    pad_s += max(self.comm_s(op, step.phase) - real, 0.0)
            return (pad_s,)
        pad_s = sum(count * self._over_layers(spec, step, padding)[0] for step, count in steps)
        out = list(out)
        if pad_s > 1e-12:
            out.append(f"padding costs {pad_s * 1e3:.1f} ms of collective time over the run (prefill + decode)")
        out += [n for n in self.cost.notes if n not in out]      # e.g. an engine refusing its all-reduce kernel
        out += [n for n in (w.context_note(),) if n]
        self._passes_of[("notes", spec)] = tuple(out)
        return tuple(out)

    def predict(self, spec: str) -> Prediction:
        w = self.w
        pre_s, pre_exp = self.step_time(spec, w.prefill_step())
        steps = list(range(1, w.gen_len))
        if not steps:
            decode_s, decode_exposed = 0.0, 0.0
        elif self.exact or w.stack.kv == "filled":
            # decode steps differ (growing KV length): all of them, or sampled and integrated
            js = steps if self.exact else decode_positions(w.gen_len, w.stack.kv)
            res = [self.step_time(spec, w.decode_step(j)) for j in js]
            import numpy as np      # lazy: (numpy, as in decode_positions)
            decode_s = float(np.interp(steps, js, [r[0] for r in res]).sum())
            decode_exposed = float(np.interp(steps, js, [r[1] for r in res]).sum())
        else:
            # every decode step reads the whole static cache: all steps are the same step
            d, e = self.step_time(spec, w.decode_step(1))
            decode_s, decode_exposed = d * len(steps), e * len(steps)
        p = Prediction(spec, pre_s, decode_s, pre_exp + decode_exposed, w.batch, w.gen_len, mode=self.mode,
                       model_change=model_change(spec, w.model.layers), notes=self.notes(spec), simulator=self)
        if self.mode == "sampled":
            self._add_jitter(spec, p, pre_s, steps)
        if self.record:          # full timelines of the prefill and of decode step 1, for traces and joins
            p.prefill = self.step(spec, w.prefill_step())
            p.decode = self.step(spec, w.decode_step(1)) if steps else None
        return p

    def _add_jitter(self, spec: str, p: Prediction, pre_s: float, steps: list[int]) -> None:
        """Sampled mode: add the jitter's mean cost to the fast path's times (exposed comm stays
        the jitter-free one)."""
        from tpsim.sim.engine.sampled import MIN_SAMPLES_PREFILL    # lazy: (the sampler, as in __init__)
        w, s = self.w, self.sampler
        p.jitter_prefill = s.estimate(spec, lambda i: w.prefill_step(), lambda st: pre_s, MIN_SAMPLES_PREFILL)
        p.prefill_s += p.jitter_prefill.delta_s
        if not steps:
            return
        # positions: the fast path's decode grid, cycled (steps differ only with kv "filled")
        js = decode_positions(w.gen_len, w.stack.kv)
        fast: dict = {}

        def step_s(st: Step) -> float:
            if st not in fast:
                fast[st] = self.step_time(spec, st)[0]
            return fast[st]
        p.jitter_decode = s.estimate(spec, lambda i: w.decode_step(int(js[i % len(js)])), step_s)
        p.decode_s += p.jitter_decode.delta_s * len(steps)


def predict(workload: Workload, schedules: list[str], exact: bool = False, record: bool = True,
            progress: Callable[[], None] | None = None, mode: str | None = None, seed: int = 0,
            rel_tol: float = REL_TOL, passes: dict | None = None) -> list[Prediction]:
    """Predictions for `schedules` (in order), each with its speedup over standard.

    mode: "fast" (default), "sampled" (`--exact`: jitter on every rank, with confidence intervals)
    or "brute" (every rank, layer and step; exact=True means this). Standard is always simulated;
    it is listed in the output only if asked for. In brute-force mode `progress` is called after
    each of the (1 + len(non-standard schedules)) * gen_len passes. `passes`: a dict the fast path
    keeps its passes in, for another call on the same profile and stack that differs only in the
    host lane's numbers (Simulator); not given, a new one (Prediction.simulator.kept_passes:
    sim/sensitivity.py's host settings read them)."""
    sim = Simulator(workload, exact=exact, record=record, progress=progress, mode=mode, seed=seed, rel_tol=rel_tol,
                    passes=passes if passes is not None else {})
    for spec in schedules:                 # fail fast on a bad spec, before any simulation
        plan_of(spec, workload.model.layers)
    base = sim.predict("standard")
    out = []
    for spec in schedules:
        p = base if spec == "standard" else sim.predict(spec)
        p.speedup = p.tokens_per_s / base.tokens_per_s
        if p.mode == "sampled" and p is not base:    # two independent estimates: relative errors add
            p.speedup_ci = p.speedup * math.hypot(p.total_ci_s / (p.prefill_s + p.decode_s),
                                                  base.total_ci_s / (base.prefill_s + base.decode_s))
        out.append(p)
    return out
