"""A compiled layer as the kernels Inductor emits for it (sim/compiled_kernels.json).

The table is derived from Inductor itself by `python -m hw.inductor_kernels` (torch needed there,
never here): one layer of each schedule kind compiled for each variant (prefill; decode on the
GPU path at batch > 1 and at batch 1; decode on the CPU C++ backend). Each kernel is attributed to
the one IR op that is latest in issue order among those it fuses (the op's inputs imply the
others'), by role, the op name without its layer ("attn.norm"); every other IR op of the fusion
costs nothing extra. A kernel lists the buffers it reads and writes with their element counts
as products of symbols:

  b batch, q q_len, L kv_len (the static cache), kvh KV heads per rank, G = heads / kvh,
  G2 = G + 2 (q, k, v heads per KV head), hidden, ffn (per rank), dh = head_dim / 2, 2.

So a buffer [b, heads, q, L] is "b*q*L*kvh*G"; an fp32 one keeps 4 bytes per element, one in
the activation dtype takes the stack's. docs/compiled-stack.md explains the derivation and where
the CPU backend's fusion may differ from Triton's.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from .schedule import Op, Schedule

TABLE_PATH = Path(__file__).with_name("compiled_kernels.json")

# element sizes of the table's dtypes; the activation dtype (float16 in the table) takes the stack's
_DTYPE_BYTES = {"float32": 4, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}
ACT_DTYPE = "float16"


@dataclass(frozen=True)
class Buffer:
    mode: str               # read | write
    dtype: str              # torch dtype name as derived (float16 = the activation dtype)
    numel: str              # product of symbols, e.g. "b*q*hidden"


@dataclass(frozen=True)
class Kernel:
    role: str               # the IR op it is charged to, without the layer ("attn.sdpa")
    kind: str               # generated | matmul (extern) | extern | collective
    name: str               # Inductor's kernel name (documentation)
    fuses: tuple[str, ...]  # the other IR ops whose work it does ("prev:mlp.add": the previous layer's)
    buffers: tuple[Buffer, ...]

    def bytes(self, sym: dict[str, float], act_bytes: int) -> float:
        return sum(numel(b.numel, sym) * (act_bytes if b.dtype == ACT_DTYPE else _DTYPE_BYTES[b.dtype])
                   for b in self.buffers)

    def matmul_dtype(self) -> str:
        """The dtype an extern matmul computes in: its first read's (fp32 when SDPA upcast)."""
        reads = [b.dtype for b in self.buffers if b.mode == "read"]
        return "fp32" if reads and reads[0] == "float32" else "act"


def numel(expr: str, sym: dict[str, float]) -> float:
    return math.prod(2.0 if s == "2" else sym[s] for s in expr.split("*") if s != "1")


@functools.cache
def _document(path: str) -> dict:
    """The table file as JSON, read once ({} when absent)."""
    p = Path(path)
    if not p.exists():
        return {}
    with open(p) as f:
        return json.load(f)


@functools.cache
def table(path: str = str(TABLE_PATH)) -> dict:
    """The derived table ({} when absent: every compiled phase then prices the analytic fused model)."""
    doc = _document(path)
    out = {}
    for kind, variants in doc.get("layers", {}).items():
        for variant, ks in variants.items():
            roles: dict[str, list[Kernel]] = {}
            for k in ks:
                kern = Kernel(k["role"], k["kind"], k["kernel"], tuple(k["fuses"]),
                              tuple(Buffer(b["mode"], b["dtype"], b["numel"]) for b in k["buffers"]))
                roles.setdefault(k["role"], []).append(kern)
            out[(kind, variant)] = roles
    return out


def meta(path: str = str(TABLE_PATH)) -> dict:
    """The table's provenance (torch version, command, notes): everything but the layers."""
    return {k: v for k, v in _document(path).items() if k != "layers"}


def variant(sched: Schedule, device: str) -> str:
    """Which Inductor path the step takes: prefill (M > 1 everywhere); decode on the GPU path
    (bmm with one query row decomposed into a generated reduction; at batch 1 the linear layers'
    mm too: `decode-m1`); decode on the CPU C++ backend (no such decomposition)."""
    st = sched.step
    if st.q_len > 1:
        return "prefill"
    if device == "cpu":
        return "decode-cpu"
    return "decode-m1" if st.batch == 1 else "decode"


def symbols(sched: Schedule) -> dict[str, float]:
    s, st = sched.model.shard(sched.tp), sched.step
    g = s.heads / s.kv_heads
    return {"b": st.batch, "q": st.q_len, "L": st.kv_len, "kvh": s.kv_heads, "G": g, "G2": g + 2,
            "hidden": s.hidden, "ffn": s.ffn, "dh": s.head_dim / 2, "vocab": s.vocab}


def role_of(op: Op) -> str:
    return op.name.split(".", 1)[1]


def layer_roles(sched: Schedule, op: Op, device: str) -> dict[str, list[Kernel]] | None:
    """The role -> kernels table of the compiled layer `op` belongs to, or None when the table has
    no such layer (non-layer ops, a flash-attention or unexpanded-GQA stack it was not derived
    for): those ops are priced by the analytic fused model (sim.cost.op_work)."""
    if op.layer is None or not sched.plan:
        return None
    if role_of(op) == "attn.sdpa" and (sched.stack.attention != "math" or not sched.stack.expand_gqa):
        return None
    return table().get((sched.plan[op.layer], variant(sched, device)))
