"""Chrome/Perfetto traces of measured runs, alone (`tpsim bench --trace`) or beside the simulated
timeline of the same workload (`tpsim compare`, one trace per grid point).

Measured records are what the harness already takes (hw.bench `_recorded_passes`: per rank, one
eager prefill and a few eager decode steps, each op timed from its pass's start -- perf_counter
on CPU, CUDA events on GPU, ranks aligned by a barrier before each pass). A trace shows the
prefill (pass 0) and the first decode step (pass 0), with the op names of the schedule IR, so a
measured and a simulated op of the same name sit on the same track kind of the same rank.

Layout (sim.engine.record.chrome_trace does the writing; here only processes are laid out): one process
per (group, rank) -- a group is a schedule, and in a side-by-side trace "measured" and "simulated"
of each rank are adjacent processes -- and one thread per stream (compute, comm, wait). The
prefill starts at 0 in every track; the decode step starts at the same time in every track (after
the longest prefill shown, plus a small gap), so the two decode steps line up for the eye.
Pure Python: no torch.
"""
from __future__ import annotations

from typing import Iterable

from tpsim.sim.predict import Simulator
from tpsim.sim.engine.record import Record, chrome_trace

PHASES = ("prefill", "decode")
_PID_STRIDE = 1000          # pid = group * stride + rank * 2 + (0 measured | 1 simulated)


def measured_records(records: Iterable[dict], decode_pass: int = 0) -> dict[str, list[Record]]:
    """{phase: Records} of the recorded prefill and decode pass `decode_pass` (every rank)."""
    out: dict[str, list[Record]] = {p: [] for p in PHASES}
    for d in records:
        ph = d.get("phase", "")
        if ph in out and d.get("pass", 0) == (0 if ph == "prefill" else decode_pass):
            out[ph].append(Record.from_dict(d))
    return out


def simulated_records(w, spec: str, ranks: int) -> dict[str, list[Record]]:
    """{phase: Records} of one simulated prefill and the first decode step, `ranks` ranks (exact
    simulation: every rank is its own process, with the profile's jitter)."""
    sim = Simulator(w, exact=True, record=True, ranks=ranks)
    out = {"prefill": list(sim.step(spec, w.prefill_step()).records), "decode": []}
    if w.gen_len > 1:
        out["decode"] = list(sim.step(spec, w.decode_step(1)).records)
    return out


def _end(recs: list[Record]) -> float:
    return max((r.end_s for r in recs), default=0.0)


def combine(groups: list[tuple[str, str, dict[str, list[Record]]]]) -> dict:
    """One trace of (group, source, {phase: records}) entries, source "measured" or "simulated".
    Records of group i, rank r get pid i * 1000 + 2r (+1 when simulated), so Perfetto lists a
    rank's measured and simulated processes next to each other; phases align across entries."""
    pre_end = max((_end(g[2].get("prefill", [])) for g in groups), default=0.0)
    decode_at = pre_end * 1.05
    events: list[dict] = []
    index: dict[str, int] = {}
    for group, source, phases in groups:
        gi = index.setdefault(group, len(index))
        slot = 1 if source == "simulated" else 0
        recs = list(phases.get("prefill", []))
        recs += [Record(r.op, r.rank, r.stream, r.start_s + decode_at, r.end_s + decode_at, r.phase, r.kind)
                 for r in phases.get("decode", [])]
        for e in chrome_trace(recs)["traceEvents"]:
            rank = e["pid"]
            e["pid"] = gi * _PID_STRIDE + 2 * rank + slot
            if e["ph"] == "M" and e["name"] == "process_name":
                e["args"]["name"] = f"{group} rank {rank} {source}"
            events.append(e)
        for rank in sorted({r.rank for r in recs}):
            pid = gi * _PID_STRIDE + 2 * rank + slot
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": pid}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"decode_starts_us": decode_at * 1e6,
                          "note": "prefill at 0, the first decode step at decode_starts_us in every track"}}


def bench_trace(result: dict) -> dict:
    """Trace of a `tpsim bench` result: per schedule, per rank, one measured prefill and decode step."""
    groups = []
    for row in result.get("schedules", []):
        recs = measured_records(row.get("records", []))
        if recs["prefill"] or recs["decode"]:
            groups.append((row["schedule"], "measured", recs))
    if not groups:
        raise ValueError("the bench result holds no per-op records to trace")
    tr = combine(groups)
    tr["otherData"] |= {"model": result.get("model"), "tp": result.get("tp"), "batch": result.get("batch"),
                        "prompt_len": result.get("prompt_len"), "gen_len": result.get("gen_len"),
                        "source": "measured (tpsim bench per-op records)"}
    return tr


def side_by_side_trace(measured: dict, w, specs: list[str] | None = None) -> dict:
    """Measured and simulated tracks of each rank, per schedule, of one grid point (`w` is the
    simulator's Workload for the measured run, calib.compare_measure.workload_of)."""
    groups = []
    for row in measured.get("schedules", []):
        spec = row["schedule"]
        if specs is not None and spec not in specs:
            continue
        meas = measured_records(row.get("records", []))
        ranks = sorted({r.rank for p in PHASES for r in meas[p]}) or [0]
        sim = simulated_records(w, spec, min(len(ranks), w.tp))
        groups += [(spec, "measured", meas), (spec, "simulated", sim)]
    if not groups:
        raise ValueError("the measured run holds no schedules to trace")
    tr = combine(groups)
    tr["otherData"] |= {"model": w.model.name, "tp": w.tp, "batch": w.batch, "prompt_len": w.prompt_len,
                        "gen_len": w.gen_len, "profile": w.profile.name}
    return tr
