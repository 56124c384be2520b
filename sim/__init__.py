"""tpsim simulator: schedule IR, cost model, SimPy engine, predictions.

Pure Python (numpy, scipy, simpy, networkx); never imports torch, so
``pip install .`` and ``tpsim predict`` work on a laptop. Simulation only: no click, no rich
(the command line is tpsim.commands).
"""
