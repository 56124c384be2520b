"""TensorRT-LLM's AllReduceStrategy.AUTO: which kernel its lookup table picks for a [tokens, hidden]
all-reduce, and when it falls back to NCCL.

Source: NVIDIA/TensorRT-LLM cpp/tensorrt_llm/common/customAllReduceUtils.h (the version with the
64 MiB workspace and hidden sizes 128..8192): selectStrategyLookUpTable indexes
AllReduceBestStrategyTableSM90[tp_index][fusion][hidden_index][token_index] with
tp_index = log2(tp) - 1, hidden_index = floor(log2(hidden)) - 7, token_index = floor(log2(tokens));
an index outside the table is NCCL; every pre-Blackwell GPU maps to the SM90 table. Values:
0 NCCL, 4 ONESHOT, 5 TWOSHOT (AllReduceStrategyType). Only Fusion=NONE (a plain all-reduce) is
kept here. getMaxRequiredWorkspaceSize: 64 MiB (TRTLLM_ALLREDUCE_FUSION_WORKSPACE_SIZE unset);
thop/allreduceOp.cpp ifFallbackToNCCL: message bytes > workspace, or no P2P, or no NVLink -> NCCL;
a forced TWOSHOT with tokens < tp runs ONESHOT.
"""
from __future__ import annotations

import math

WORKSPACE_BYTES = 64 * 1024 * 1024

_O, _T, _N = "oneshot", "twoshot", "nccl"
_CODE = {4: _O, 5: _T, 0: _N}

# [tp 2, 4, 8][hidden 128 .. 8192][tokens 1 .. 16384], Fusion=NONE, SM90
_SM90_NONE = {
    2: ("444444444444000", "444444444444400", "444444444444400", "444444444444000",
        "444444444444000", "444444444444000", "444444444444000"),
    4: ("444444444444000", "444444444444000", "444444444444000", "444444444455000",
        "444444444555000", "444444445550000", "444444445000000"),
    8: ("444444444440000", "444444444440000", "444444444455000", "444444444055500",
        "444444440555000", "444444405500000", "444444055000000"),
}


def auto_strategy(tokens: int, hidden: int, tp: int) -> str:
    """"oneshot" | "twoshot" | "nccl": TensorRT-LLM AUTO's pick for a [tokens, hidden] all-reduce."""
    rows = _SM90_NONE.get(tp)
    if rows is None or tokens < 1 or hidden < 1:
        return _N
    h = int(math.floor(math.log2(hidden))) - 7
    t = int(math.floor(math.log2(tokens)))
    if not (0 <= h < len(rows) and 0 <= t < len(rows[h])):
        return _N
    return _CODE[int(rows[h][t])]
