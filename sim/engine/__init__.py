"""The engines that run a Schedule's priced ops on every rank: simpy_engine.py (SimPy, one process per
rank and stream), heap_engine.py (the same timeline without SimPy, for speed), sampled.py (`--exact`:
the mean step under per-rank arrival jitter, by sampling) and estimate.py (what it reports), and the
per-op records both emit (record.py, shared with the harness).

Owns: Record, the engines. May import: schedule/, stack/ and the sim leaves: the ops come in priced
(as seconds, by the top's Simulator), so an engine imports no pricing and never the top.
"""
