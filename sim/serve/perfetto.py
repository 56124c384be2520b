"""Request lifetimes as a Chrome/Perfetto trace (the JSON trace-event format ui.perfetto.dev and
chrome://tracing open): one process per (schedule, replica), each request an async track of its
phases -- queued (arrival to its first scheduled chunk), prefill (to its first token), decode (to its
last), preempted (KV freed, back in the queue, until it is scheduled again: a recompute is a prefill
again) -- and counter tracks of the replica's running and waiting requests and KV in use, one sample
per iteration (at most MAX_SAMPLES, evenly thinned).
"""
from __future__ import annotations

MAX_SAMPLES = 20000


def trace_events(runs: list[tuple[str, object]]) -> dict:
    """The trace of `runs`: (schedule, sim.serve.cluster.Run recorded with record=True) pairs."""
    events: list[dict] = []
    pid = 0
    for name, run in runs:
        for e in run.engines:
            pid += 1
            events.append({"name": "process_name", "ph": "M", "pid": pid,
                           "args": {"name": f"{name} replica {e.index}"}})
            for r in e.done:
                marks = r.events or []
                for (t0, phase), (t1, _) in zip(marks, marks[1:]):
                    if t1 > t0 or phase != "queued":
                        events.append({"name": phase, "cat": "request", "ph": "b", "id": r.rid, "pid": pid,
                                       "tid": 0, "ts": t0 * 1e6,
                                       "args": {"request": r.rid, "prompt": r.prompt, "output": r.output}})
                        events.append({"name": phase, "cat": "request", "ph": "e", "id": r.rid, "pid": pid,
                                       "tid": 0, "ts": t1 * 1e6})
            steps = e.steps or []
            every = max(1, -(-len(steps) // MAX_SAMPLES))
            for start, _end, dec, tokens, running, waiting, kv_used in steps[::every]:
                events.append({"name": "requests", "ph": "C", "pid": pid, "ts": start * 1e6,
                               "args": {"running": running, "waiting": waiting}})
                events.append({"name": "KV in use", "ph": "C", "pid": pid, "ts": start * 1e6,
                               "args": {"slots": kv_used}})
                events.append({"name": "batch", "ph": "C", "pid": pid, "ts": start * 1e6,
                               "args": {"decodes": dec, "prefill tokens": tokens}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
