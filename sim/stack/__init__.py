"""The software stack a prediction describes: Stack (spec.py: compiled or eager, CUDA graphs, attention
kernel, collective implementation, dtype, ...), the implementation names (impls.py), an engine's sampler
kernels (sampler.py), an engine's host work per step (host_lane.py), and the engine presets and stack
files of `--stack` (presets/).

Owns: Stack, HostStep, the presets. May import: the sim leaves (bounds, errors) and fileio/; nothing else
of sim (with model/, the shared base).
"""
