"""token-split:N (NanoFlow, TokenWeave): standard math on N micro-batches (batch rows in decode,
prompt tokens in prefill), each micro-batch's all-reduce overlapping the others' compute. Keeps the
model: the outputs are standard's."""
from __future__ import annotations

from tpsim.sim.bounds import check as check_bound
from tpsim.sim.schedule.builder import Builder, micro_batches
from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef, each
from tpsim.sim.schedule.schedules.standard import layer as standard_layer


def layers(b: Builder, first: int, end: int, x: str, splits: int = 2, along: str | None = None,
           mbs: list | None = None, fuse=None, threads: bool = False) -> str:
    """Token-split overlap (NanoFlow, TokenWeave) on layers first..end-1: standard math per micro-batch.

    The step is cut into micro-batches along the batch (decode) or the prompt tokens (prefill);
    each sublayer (attention, then MLP) is issued for micro-batch 0, 1, ..., and a micro-batch's
    all-reduce is awaited only by its own residual add, issued just before its next sublayer. So
    micro-batch j's all-reduce overlaps the compute of micro-batches j+1.. (and, for the last,
    the next sublayer of micro-batch 0). Costs the split adds are the IR's own: GEMMs at m/N,
    N x the kernels, the slice/concat copies, and compute slowed while a collective runs
    (the engine's Interference). Where the step cannot be split (decode at batch 1, a 1-token
    prefill) the layers are standard and the schedule says so in its notes.

    Other schedules build on it: `along` forces the split's axis (dbo: sequences in both phases), `mbs`
    gives the micro-batches themselves (tokenweave's split point), `fuse(half)` the fused-kernel attrs of
    each micro-batch's all-reduce (tokenweave's multimem all-reduce + add + RMSNorm), `threads` that each
    micro-batch runs on a CPU thread of its own (dbo): the first split op carries their start
    ("ubatch_start", 1) and each micro-batch all-reduce the hand-off to the other thread that follows it
    ("yield", 1), priced on the launch chain (sim/price/cost.py issue_s)."""
    st = b.step
    along = along or ("batch" if st.phase == "decode" else "tokens")
    if mbs is not None:
        along = "batch" if mbs[0].nq == st.q_len else "tokens"
    units = st.batch if along == "batch" else st.q_len
    if mbs is None and along == "tokens" and splits > st.q_len:
        raise ValueError(f"token-split:{splits} splits a prompt's tokens into {splits} micro-batches in prefill; the "
                         f"prompt has {st.q_len} token{'s' * (st.q_len != 1)}: give at most {st.q_len}")
    k = len(mbs) if mbs is not None else min(splits, units)
    if k < 2:
        b.note(f"{st.phase} of {units} {'sequence' if along == 'batch' else 'token'}{'s' * (units != 1)} "
                  f"cannot be split along {along}: runs standard")
        return each(standard_layer)(b, first, end, x)
    if k < splits:
        b.note(f"{st.phase} splits into {k}, not {splits} (only {units} along {along})")
    mbs = mbs or micro_batches(st, k, along)
    xs = []
    for mb in mbs:      # a view along the batch; a strided copy along the tokens of several sequences
        copy = int(along == "tokens" and st.batch > 1)
        start = [("ubatch_start", 1)] if threads and mb.index == 0 else []
        xs.append(b.add_op(f"L{first}.mb{mb.index}.split", "slice", [x], [f"L{first}.mb{mb.index}.x_in"],
                              [("rows", mb.rows), ("width", b.model.hidden), ("batch", st.batch),
                               ("q_len", st.q_len), ("b0", mb.b0), ("nb", mb.nb), ("q0", mb.q0),
                               ("nq", mb.nq), ("copy", copy)] + start, first))
    pending: list[tuple | None] = [None] * k     # per micro-batch: (add name, output, layer, all-reduce value)
    for i in range(first, end):
        for half in ("attn", "mlp"):
            for j, mb in enumerate(mbs):
                b.mb = mb
                if pending[j]:
                    name, out, layer, ar = pending[j]
                    xs[j] = b.add(name, xs[j], ar, out, layer)
                part = b.attn(i, xs[j]) if half == "attn" else b.mlp(i, xs[j])
                t = b.tag(i)
                ar = b.all_reduce(f"{t}.{half}.allreduce", part, i,     # async; awaited by the add
                                  fuse=fuse(half) if fuse else None, extra=[("yield", 1)] if threads else None)
                pending[j] = ((f"{t}.attn.add", f"{t}.h", i, ar) if half == "attn"
                              else (f"{t}.mlp.add", f"{t}.x", i, ar))
                b.mb = None
    for j, mb in enumerate(mbs):
        name, out, layer, ar = pending[j]
        b.mb = mb
        xs[j] = b.add(name, xs[j], ar, out, layer)
        b.mb = None
    return b.add_op(f"L{end - 1}.merge", "concat", xs, [f"L{end - 1}.x"],
                       [("rows", st.tokens), ("width", b.model.hidden), ("batch", st.batch),
                        ("q_len", st.q_len), ("axis", along)], end - 1)



def plan(n: int, splits: int = 2) -> tuple[str, ...]:
    """Every layer split into `splits` micro-batches (batch in decode, tokens in prefill)."""
    return (f"token-split:{splits}",) * n


def parse(spec: str, arg: str, n_layers: int) -> dict:
    if not arg:
        return {}
    try:
        splits = int(arg)
    except ValueError:
        splits = 0
    if splits < 2:
        raise ValueError(f"bad token-split spec {spec!r}; use token-split or token-split:N with N >= 2")
    # each micro-batch is simulated on its own: N buys N times the work (token-split:1000: 11 min)
    return {"splits": check_bound("micro_batches", splits, "token-split:N's N (micro-batches)")}


# 3 layers compiled, so the kept layer 1 has no run boundary (split/merge: once per pass, priced
# by the analytic fused model); other counts than 2 and 4 fall back to the analytic model too
KIND = LayerKind("token-split", layers, takes_count=True,
                 probes=(Probe("token-split:2", "token-split:2", 3, plain_sizes=False),
                         Probe("token-split:4", "token-split:4", 3, plain_sizes=False)))
DEF = ScheduleDef("token-split", "token-split | token-split:N (N micro-batches)", "none", plan, (KIND,), parse,
                  summary="NanoFlow, TokenWeave: micro-batches, each one's all-reduce beside the others' compute",
                  numerics_reference="standard")
