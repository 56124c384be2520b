"""Offline derivations of the simulator's kernel tables (sim/price/compiled_kernels*.json): Inductor's
kernels for each schedule's compiled layer (inductor_kernels.py, on CPU), the GPU decode graph through
Inductor's Triton path on a fake H100 (inductor_gpu.py, fake_cuda.py, fake_views.py, inductor_splits.py),
the ladder's overlap as Inductor schedules it (inductor_overlap.py), and the reference harness's model
they lower (reference_model.py, reference_ladder.py). No command runs them: `python -m
tpsim.hw.derive.inductor_kernels` (and the others) regenerate a table. The harness never imports them.
"""
