"""tpsim simulator: schedule IR, cost model, SimPy engine, predictions.

Pure Python (numpy, scipy, simpy, networkx); never imports torch, so
``pip install .`` and ``tpsim predict`` work on a laptop. Simulation only: no click, no rich
(the command line is tpsim.commands).
"""
import os as _os

# The simulator's numpy work is on arrays of at most a few hundred entries, never a BLAS-sized
# product. OpenBLAS (numpy's BLAS) starts one thread per core (up to 64) when numpy is imported,
# and those threads spin: on 2 cores `import numpy` costs 0.16 CPU s with the pool, 0.08 without
# (bench/predict_speed.py). One thread, unless the user chose otherwise; torch uses MKL, not this.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
