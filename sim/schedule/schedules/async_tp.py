"""async-tp: sequence parallelism whose all-gather + GEMM and GEMM + reduce-scatter are micro-pipelined
per rank's row block, the copies overlapping the GEMMs -- PyTorch's micro-pipeline TP
(torch/distributed/_symmetric_memory/__init__.py@006b161f fused_all_gather_matmul,
fused_matmul_reduce_scatter) as vLLM's AsyncTPPass installs it (vllm/compilation/collective_fusion.py,
PassConfig.enable_async_tp / fuse_gemm_comms; "a no-op if Sequence Parallelism has not been applied").
Keeps the model: seq-parallel's math, reordered.

Per sublayer, on rank r of n (rs = rows per rank, padded as seq-parallel pads):
  all-gather + GEMM (qkv, gate/up): for s = 1..n-1 a ring step (`shift`, offset s: the block of rank
    (r + s) % n, a copy-engine pull from its symmetric buffer), issued ahead; the GEMM of the local block
    (overlapping the first copy), then of each block as its copy lands; the n results land in rank order
    in one output (concat ring, in place);
  GEMM + reduce-scatter (o, down): for s = 1..n-1 the GEMM of the rows of rank (r - s) % n and a ring
    step sending it there (receiving rank (r + s)'s partial of r's rows), then the local block's GEMM,
    then one kernel summing the n partials (`sum`).
The copies run on the comm stream while the GEMMs of other blocks run on the compute stream; the GEMMs
are priced at their own m = rs (the split's inefficiency is the tables' own). A barrier opens and closes
each fused op (symm_mem.barrier), charged to its first and last ring step (sim/price/comm/async_tp.py).
Not modelled: the second stream on which PyTorch alternates the block GEMMs (two GEMMs may overlap each
other: conservative), the local block's copy into the symmetric buffer.

vLLM applies SP + async TP only for token counts >= sp_min_token_num (vllm/compilation/passes/fusion/
sequence_parallelism.py@007b5e0b get_sequence_parallelism_threshold: SM90 needs hidden >= 8192 and
8 MiB x TP / (hidden x 2) tokens, e.g. 70B: TP2 1024, TP4 2048, TP8 4096 tokens), and it is off by default
(-O2's IS_DENSE is False): the schedule prices it wherever asked, and says where vLLM would not run it.
"""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder
from tpsim.sim.schedule.schedules._def import LayerKind, ScheduleDef

SP_MIN_HIDDEN = 8192                 # SP_MIN_HIDDEN_SIZE[90]
SP_MIN_PER_GPU_BYTES = 8 << 20       # SP_MIN_PER_GPU_SIZE_MB[90] = 8


def vllm_applies(hidden: int, tp: int, tokens: int, elem_bytes: int = 2) -> bool:
    """Whether vLLM's sequence-parallelism threshold (SM90) lets it run SP + async TP on this step."""
    return hidden >= SP_MIN_HIDDEN and tokens * hidden * elem_bytes >= SP_MIN_PER_GPU_BYTES * tp


def layers(b: Builder, first: int, end: int, x: str) -> str:
    st, hidden, g = b.step, b.model.hidden, b.tp
    rows = st.tokens
    rs = -(-rows // g)
    padded = rs * g
    pad = padded - rows
    s = b.shard
    e = b.stack.dtype_bytes
    if hidden < SP_MIN_HIDDEN:
        b.note(f"vLLM runs no sequence parallelism (so no async TP) for hidden < {SP_MIN_HIDDEN} on SM90")
    elif not vllm_applies(hidden, g, rows, e):
        b.note(f"vLLM would not run async TP on this {st.phase} ({rows} tokens): its sequence-parallelism threshold "
               f"at TP {g} is {SP_MIN_PER_GPU_BYTES * g // (hidden * e)} tokens")
    if pad:
        b.note(f"{st.phase} pads {rows} token row{'s' * (rows != 1)} to {padded} (TP {g}): every ring step moves "
               f"{rs} rows")
    lin = b.linear_attrs()

    def view(name: str, v: str, layer: int, what: list) -> str:
        return b.add_op(name, "shard", [v], [f"{name}_out"], what, layer)

    def ring(name: str, v: str, step: int, layer: int, width: int) -> str:
        barrier = (step == 1) + (step == g - 1)          # the open and close barriers of the fused op
        return b.add_op(name, "shift", [v], [f"{name}_out"],
                        [("rows", rs), ("width", width), ("group", g), ("offset", step)]
                        + ([("barrier", barrier)] if barrier else []), layer)

    def ag_gemm(name: str, v: str, layer: int, n_out: int, param: str) -> str:
        """All-gather of v [rs, hidden] + GEMM -> [padded, n_out] in rank order. The ring steps are issued
        first (the copies run ahead on their own streams), the local block's GEMM overlaps the first."""
        blocks = [v] + [ring(f"{name}.shift{k}", v, k, layer, hidden) for k in range(1, g)]
        parts = [b.add_op(f"{name}.r{k}", "gemm", [blk], [f"{name}.r{k}_out"],
                          [("m", rs), ("n", n_out), ("k", hidden)] + lin, layer, param)
                 for k, blk in enumerate(blocks)]
        return b.add_op(f"{name}.cat", "concat", parts, [f"{name}.cat_out"],
                        [("rows", padded), ("width", n_out), ("batch", st.batch), ("q_len", st.q_len),
                         ("axis", "ring"), ("group", g), ("inplace", 1)], layer)

    def gemm_rs(name: str, v: str, layer: int, k_in: int, param: str) -> str:
        """GEMM of v [padded, k_in] + reduce-scatter -> this rank's rows [rs, hidden]."""
        got = []
        for k in range(1, g):
            blk = view(f"{name}.blk{k}", v, layer, [("rows", rs), ("width", k_in), ("group", g), ("pad", 0),
                                                    ("offset", g - k)])     # rank (r - k) % g's rows
            part = b.add_op(f"{name}.r{k}", "gemm", [blk], [f"{name}.r{k}_out"],
                            [("m", rs), ("n", hidden), ("k", k_in)] + lin, layer, param)
            got.append(ring(f"{name}.shift{k}", part, k, layer, hidden))
        own = view(f"{name}.blk0", v, layer, [("rows", rs), ("width", k_in), ("group", g), ("pad", 0)])
        mine = b.add_op(f"{name}.r0", "gemm", [own], [f"{name}.r0_out"],
                        [("m", rs), ("n", hidden), ("k", k_in)] + lin, layer, param)
        return b.add_op(f"{name}.sum", "sum", [mine, *got], [f"{name}.sum_out"],
                        [("rows", rs), ("width", hidden), ("parts", g)], layer)

    r = b.add_op(f"L{first}.sp.shard", "shard", [x], [f"L{first}.sp.x_in"],
                 [("rows", rs), ("width", hidden), ("group", g), ("pad", pad)], first)
    for i in range(first, end):
        n = b.norm(f"L{i}.attn.norm", r, i, f"L{i}.attn_norm", rs)
        qkv = ag_gemm(f"L{i}.attn.qkv", n, i, s.qkv_dim, f"L{i}.wqkv")
        if pad:                              # attention reads the real token rows (a view)
            qkv = b.add_op(f"L{i}.attn.unpad", "slice", [qkv], [f"L{i}.attn.unpad_out"],
                           [("rows", rows), ("width", s.qkv_dim), ("batch", st.batch), ("q_len", st.q_len),
                            ("b0", 0), ("nb", st.batch), ("q0", 0), ("nq", st.q_len), ("copy", 0)], i)
        o = b.sdpa(i, qkv)
        if pad:
            o = b.add_op(f"L{i}.attn.pad", "pad", [o], [f"L{i}.attn.pad_out"],
                         [("rows", padded), ("width", s.q_dim), ("pad", pad)], i)
        h = b.add(f"L{i}.attn.add", r, gemm_rs(f"L{i}.attn.out", o, i, s.q_dim, f"L{i}.wo"), f"L{i}.h", i, rs)
        n = b.norm(f"L{i}.mlp.norm", h, i, f"L{i}.mlp_norm", rs)
        up = ag_gemm(f"L{i}.mlp.up", n, i, 2 * s.ffn, f"L{i}.w13")     # the padding rows ride along (zeros)
        act = b.add_op(f"L{i}.mlp.act", "swiglu", [up], [f"L{i}.mlp.act_out"], [("rows", padded), ("width", s.ffn)], i)
        r = b.add(f"L{i}.mlp.add", h, gemm_rs(f"L{i}.mlp.down", act, i, s.ffn, f"L{i}.w2"), f"L{i}.x", i, rs)
    out = b.add_op(f"L{end - 1}.sp.gather", "all_gather", [r], [f"L{end - 1}.sp.gather_out"],
                   [("rows", rs), ("width", hidden), ("group", g), ("dim", 0)], end - 1)
    if pad:
        out = b.add_op(f"L{end - 1}.sp.gather.unpad", "slice", [out], [f"L{end - 1}.sp.gather.unpad_out"],
                       [("rows", rows), ("width", hidden), ("batch", st.batch), ("q_len", st.q_len), ("b0", 0),
                        ("nb", st.batch), ("q0", 0), ("nq", st.q_len), ("copy", 0)], end - 1)
    return out


def plan(n: int) -> tuple[str, ...]:
    return ("async-tp",) * n


KIND = LayerKind("async-tp", layers,
                 analytic="symmetric-memory ring steps and per-block GEMMs outside Inductor's codegen (vLLM's "
                          "AsyncTPPass replaces the pattern after Inductor's graph passes): the analytic fused model")
DEF = ScheduleDef("async-tp", "async-tp (seq-parallel with micro-pipelined AG+GEMM / GEMM+RS)", "none", plan, (KIND,),
                  summary="async TP: seq-parallel's all-gather/reduce-scatter split per rank block, overlapping the GEMMs",
                  numerics_reference="standard")
