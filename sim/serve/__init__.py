"""Serving at an SLO: requests over steps (docs/design.md, "Serving: requests over steps"; docs/serving.md).

A request-level SimPy simulation in Vidur's shape, a module per concept: traffic.py (arrivals and
lengths) and traces.py (public trace files) make the requests; engine.py is one engine instance per TP
group, a SimPy process that runs iterations; scheduler/ holds each engine's own per-iteration algorithm
(vLLM V1, SGLang, TensorRT-LLM: the stack preset picks it); kv.py the KV cache each holds, from tpsim's
memory model; steptime.py prices an iteration's mixed batch with the step model (sim.predict), through
an interpolated table; cluster.py routes requests over replicas; metrics.py, slo.py (goodput and the
highest rate meeting an SLO) and perfetto.py (request lifetimes) report.

Owns: the serving simulation. May import: the sim top (predict, memory) and every sim folder below it;
nothing in sim imports it (tests/test_layers.py).
"""
