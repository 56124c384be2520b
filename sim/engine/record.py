"""Per-op timing records, shared by the simulator and the hardware harness.

A simulated and a measured run of the same schedule emit records with the same op names, so
per-op error is a join on (phase, op, rank), not a guess. Records export to the Chrome trace
event format, which chrome://tracing and ui.perfetto.dev open: one process per rank, one
thread per stream.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable


@dataclass(frozen=True)
class Record:
    op: str            # op name from the schedule IR, e.g. "L3.attn.allreduce"
    rank: int
    stream: str        # "compute" | "comm" (| "wait" for time blocked on a collective, | "launch" for
                       # the simulated CPU thread launching the op: an eager phase on a GPU, sim/engine/simpy_engine.py,
                       # | "host" for a serving stack's host lane: host_records)
    start_s: float
    end_s: float
    phase: str = ""    # "prefill" | "decode" (| "" when not known)
    kind: str = ""     # op kind, e.g. "gemm"

    @property
    def dur_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "Record":
        return Record(d["op"], int(d["rank"]), d["stream"], float(d["start_s"]), float(d["end_s"]),
                      d.get("phase", ""), d.get("kind", ""))


_STREAM_TID = {"compute": 0, "comm": 1, "wait": 2, "launch": 3, "host": 4}


def host_records(h, ln, phase: str, ranks: int, start_s: float, step_s: float) -> list[Record]:
    """A serving stack's host lane (sim/stack/host_lane.py: HostStep `h`, its Lane `ln` for this step) as
    records on each rank's "host" stream, for a step that starts at `start_s` and lasts `step_s`
    (Simulator.in_lane). In series: the lead (schedule, hand-off, prepare, launch) from the step's
    start, then the output work (sampling, request updates) closing the step; overlapped: the lane
    beside the pass, preparing the next step (op "host.next")."""
    if h.overlap:
        return [Record("host.next", r, "host", start_s, start_s + ln.host_s, phase, "host") for r in range(ranks)]
    return [rec for r in range(ranks) for rec in (
        Record("host.lead", r, "host", start_s, start_s + ln.lead_s, phase, "host"),
        Record("host.output", r, "host", start_s + step_s - ln.post_s, start_s + step_s, phase, "host"))]


def chrome_trace(records: Iterable[Record], label: str = "") -> dict:
    """Chrome/Perfetto trace JSON: pid = rank, tid = stream, times in microseconds."""
    events, seen = [], set()
    for r in records:
        tid = _STREAM_TID.get(r.stream, len(_STREAM_TID))
        if (r.rank, tid) not in seen:
            seen.add((r.rank, tid))
            events.append({"ph": "M", "name": "thread_name", "pid": r.rank, "tid": tid,
                           "args": {"name": r.stream}})
            events.append({"ph": "M", "name": "process_name", "pid": r.rank, "tid": tid,
                           "args": {"name": f"{label} rank {r.rank}".strip()}})
        events.append({"ph": "X", "name": r.op, "cat": f"{r.phase},{r.kind}".strip(","),
                       "pid": r.rank, "tid": tid, "ts": r.start_s * 1e6, "dur": r.dur_s * 1e6,
                       "args": {"phase": r.phase, "kind": r.kind}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}

