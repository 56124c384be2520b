"""tpsim simulator: schedule IR, cost model, SimPy engine, predictions. `ls sim/` shows the architecture:

    model/      the model's shape, presets, Hugging Face configs            (the shared base)
    stack/      the software stack, engine presets, the host lane           (the shared base)
    schedule/   the IR, the builder, the schedule language, one module per schedule
    hardware/   profiles and what they describe (topology, GPU geometry), the built-in profiles
    price/      op and collective -> seconds (comm/: collectives)
    engine/     the SimPy and heap engines, `--exact` sampling, per-op records
    workload.py, predict.py, prediction.py, memory.py, sensitivity.py, grid.py
                                                       on top: a workload in, predictions out
    silent_zeros.py                                    on top: which TP-dependent terms are zero without a code proof
    bounds.py, errors.py                               leaves every folder may import

Each folder's __init__ says what it owns and what it may import; tests/test_layers.py holds the arrows.
Pure Python (numpy, scipy, simpy, networkx); never imports torch, so ``pip install .`` and
``tpsim predict`` work on a laptop. Simulation only: no click, no rich (the command line is
tpsim.commands).
"""
import os as _os

# The simulator's numpy work is on arrays of at most a few hundred entries, never a BLAS-sized
# product. OpenBLAS (numpy's BLAS) starts one thread per core (up to 64) when numpy is imported,
# and those threads spin: on 2 cores `import numpy` costs 0.16 CPU s with the pool, 0.08 without
# (bench/predict_speed.py). One thread, unless the user chose otherwise; torch uses MKL, not this.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
