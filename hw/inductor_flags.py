"""The reference harness's Inductor flags: the one definition every compiled path here uses.

The Ladder Residual benchmark sets these at import (torch._inductor.config, process-wide), as
gpt-fast does (docs/sources.md §10):
  mayank31398/ladder-residual-inference@ea2e9e44 benchmark.py:27, :28, :30, :32
  pytorch-labs/gpt-fast@32971d31 generate.py:25, :26, :28 (no reorder flag there)
Keys are torch._inductor.config's own names; a nested one is dotted ("triton.unique_kernel_names"),
which setattr/getattr on the config module and icfg.patch({...}) all take as they stand.

Users: compile_functional_pass, the compiled harness's one torch.compile (hw.bench.compile_passes,
hw.check --compile: in each rank process), and hw.derive.inductor_kernels / hw.derive.inductor_gpu (the derivation
of sim/price/compiled_kernels*.json, which add their own derivation-only settings on top). Importing this
module imports no torch (calib.compare_measure reads the flags to reuse only a run compiled alike).
"""
from __future__ import annotations

import os
from unittest import mock

REFERENCE_INDUCTOR_FLAGS: dict[str, bool] = {
    # benchmark.py:27, generate.py:25. On a GPU with static shapes it makes Inductor decompose
    # one-row matmuls (torch/_inductor/decomposition.py mm / bmm); the C++ (CPU) backend ignores it
    "coordinate_descent_tuning": True,
    # benchmark.py:28, generate.py:26: each generated Triton kernel gets its own name
    # (triton_poi_fused_add_mul_0) instead of the shared `triton_` (torch/_inductor/config.py: "to
    # maximize caching"), so a profiler trace tells the kernels apart; the kernels' code is the same.
    # torch 2.13 defaults it on (TORCHINDUCTOR_UNIQUE_KERNEL_NAMES, default "1"): set here so a run
    # records it and the environment cannot turn it off. A nested key: dotted, as the config takes it
    "triton.unique_kernel_names": True,
    # benchmark.py:30, generate.py:28: compiled graphs cached across runs (TORCHINDUCTOR_CACHE_DIR)
    "fx_graph_cache": True,
    # benchmark.py:32 ("allows overlap"): on PyTorch 2.5 it runs the default passes reorder_compute_for_overlap,
    # sink_waits, raise_comms, which leave each wait before its first reader (hw/derive/inductor_overlap.py derives the
    # ladder's windows). torch 2.13 defaults that pass list to []; its FX locality pass sinks the ladder's waits
    # to their readers all the same (python -m tpsim.hw.derive.inductor_overlap --locality-installed --no-passes)
    "reorder_for_compute_comm_overlap": True,
}


def harness_inductor_flags(mm_decompose_m1: bool = True) -> dict[str, bool]:
    """The flags a compiled harness run sets: the reference's, with coordinate_descent_tuning
    following the run's stack (Stack.mm_decompose_m1: the reference and SGLang set it, vLLM's
    default build, TRT-LLM and eager do not; sim/stack/presets/*.py source each)."""
    return REFERENCE_INDUCTOR_FLAGS | {"coordinate_descent_tuning": bool(mm_decompose_m1)}


def apply_inductor_flags(flags: dict[str, bool]) -> dict[str, bool]:
    """Set `flags` on torch._inductor.config process-wide, as the reference does at import (a rank
    is its own process, so every later compile and recompile sees them), and return the values read
    back from the config: what the passes are compiled with, for the result's provenance."""
    import torch._inductor.config as icfg   # lazy: Inductor's config pulls torch._inductor; only --compile needs it
    for k, v in flags.items():
        setattr(icfg, k, v)
    return current_inductor_flags(flags)


def current_inductor_flags(names=REFERENCE_INDUCTOR_FLAGS) -> dict[str, bool]:
    """torch._inductor.config's present values of `names` (by default the reference's flags)."""
    import torch._inductor.config as icfg   # lazy: as apply_inductor_flags
    return {k: getattr(icfg, k) for k in names}


def probe_vec_isa_in_default_cache() -> None:
    """Run Inductor's vector-ISA probe (torch._inductor.cpu_vec_isa.valid_vec_isa_list, cached per process)
    with TORCHINDUCTOR_CACHE_DIR at its default, whatever the variable says now. The probe builds six test
    programs (~10 s of g++ on a 2-core box) into the cache directory, keyed by their source and flags; in
    the default one they stay between processes, in a fresh scratch one (a derivation's, bench/gpu_kernels.py
    decode's) they were rebuilt every time. Only that probe is moved: every compile after it still
    lands in the scratch directory, and the C++ backend picks its ISA from the process's cached list."""
    from torch._inductor import cpu_vec_isa                         # lazy: the module stays torch-free for calib
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir   # lazy: as cpu_vec_isa
    with mock.patch.dict(os.environ, {"TORCHINDUCTOR_CACHE_DIR": default_cache_dir()}):
        cpu_vec_isa.valid_vec_isa_list()


def compile_functional_pass(runner, mm_decompose_m1: bool, mode: str | None = None):
    """The compiled harness's pass: torch.compile(runner.functional_pass) whole-graph with static
    shapes, as the reference compiles its forward (docs/sources.md §10; `mode` "reduce-overhead"
    for CUDA-graphed decode), after setting harness_inductor_flags(mm_decompose_m1) process-wide."""
    import torch                            # lazy: the module stays torch-free for calib
    apply_inductor_flags(harness_inductor_flags(mm_decompose_m1))
    return torch.compile(runner.functional_pass, fullgraph=True, dynamic=False, mode=mode)
