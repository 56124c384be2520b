"""seq-parallel (Megatron-SP): between layers each rank holds 1/TP of the token rows; each
sublayer all-gathers the rows and reduce-scatters the partial sums. Keeps the model."""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder
from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef, uniform


def layers(b: Builder, first: int, end: int, x: str) -> str:
    """Megatron sequence parallelism on layers first..end-1 (Korthikanti et al. 2022).

    Between layers each rank holds 1/TP of the token rows of the residual, [rows/TP, hidden]
    (padded to TP x rows/TP rows when tokens do not divide, e.g. decode at batch < TP). Each
    sublayer: norm on the shard -> all-gather of the rows -> the TP GEMMs/attention on all rows
    -> reduce-scatter of the partial sums (rank r keeps rows block r) -> residual add on the
    shard. Same bytes as the all-reduce it replaces (a ring all-reduce is a reduce-scatter then
    an all-gather) plus the padding, all blocking; the norms and adds are 1/TP of the rows."""
    st, hidden, g = b.step, b.model.hidden, b.tp
    rows = st.tokens
    rs = -(-rows // g)                   # rows of each rank's shard
    padded = rs * g
    pad = padded - rows
    if pad:
        b.note(f"{st.phase} pads {rows} token row{'s' * (rows != 1)} to {padded} (TP {g}): "
                  f"every all-gather / reduce-scatter moves {padded} rows, {pad} of them padding")

    def gather(name: str, v: str, layer: int) -> str:
        out = b.add_op(name, "all_gather", [v], [f"{name}_out"],
                          [("rows", rs), ("width", hidden), ("group", g), ("dim", 0)], layer)
        if pad:                              # drop the padding rows: a view
            out = b.add_op(f"{name}.unpad", "slice", [out], [f"{name}.unpad_out"],
                              [("rows", rows), ("width", hidden), ("batch", st.batch), ("q_len", st.q_len),
                               ("b0", 0), ("nb", st.batch), ("q0", 0), ("nq", st.q_len), ("copy", 0)], layer)
        return out

    def scatter(name: str, v: str, layer: int) -> str:
        if pad:
            v = b.add_op(f"{name}.pad", "pad", [v], [f"{name}.pad_out"],
                            [("rows", padded), ("width", hidden), ("pad", pad)], layer)
        return b.add_op(name, "reduce_scatter", [v], [f"{name}_out"],
                           [("rows", padded), ("width", hidden), ("group", g)], layer)

    r = b.add_op(f"L{first}.sp.shard", "shard", [x], [f"L{first}.sp.x_in"],
                    [("rows", rs), ("width", hidden), ("group", g), ("pad", pad)], first)
    for i in range(first, end):
        n = b.norm(f"L{i}.attn.norm", r, i, f"L{i}.attn_norm", rs)
        p = b.attn(i, gather(f"L{i}.attn.allgather", n, i), norm=False)
        h = b.add(f"L{i}.attn.add", r, scatter(f"L{i}.attn.reducescatter", p, i), f"L{i}.h", i, rs)
        n = b.norm(f"L{i}.mlp.norm", h, i, f"L{i}.mlp_norm", rs)
        z = b.mlp(i, gather(f"L{i}.mlp.allgather", n, i), norm=False)
        r = b.add(f"L{i}.mlp.add", h, scatter(f"L{i}.mlp.reducescatter", z, i), f"L{i}.x", i, rs)
    return gather(f"L{end - 1}.sp.gather", r, end - 1)



plan = uniform("seq-parallel")


# 3 layers compiled, so the kept layer 1 has no run boundary (shard/gather: once per pass, priced
# by the analytic fused model)
KIND = LayerKind("seq-parallel", layers, probes=(Probe("seq-parallel", "seq-parallel", 3, plain_sizes=False),))
DEF = ScheduleDef("seq-parallel", "seq-parallel", "none", plan, (KIND,),
                  summary="Megatron-SP: token rows sharded between layers, all-gather + reduce-scatter",
                  numerics_reference="standard")
