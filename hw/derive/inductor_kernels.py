"""Derive the kernels Inductor emits for one compiled layer of each schedule (sim/price/compiled_kernels.json).

The reference harness compiles its whole forward (docs/sources.md §10), so the cost of a compiled layer
is the cost of what Inductor generates for it: extern matmuls (cuBLAS / aten) plus generated
kernels that fuse pointwise and reduction work across IR-op boundaries. Here we compile the
harness's own functional pass (hw.runner.Runner.functional_pass: COMPILED_KERNELS, math SDPA,
functional all-reduce on a 1-rank gloo group) for a tiny probe model, hook Inductor's scheduler
and record (stopping once the scheduler has fused its nodes: no kernel code is generated, built or run), per kernel: the IR ops its nodes came from, whether it is an extern kernel, and the
bytes Inductor itself estimates it reads and writes per buffer
(BaseSchedulerNode.get_read_write_buffer_accesses: min(accessed elements, buffer size) x dtype;
kernel_buffer_bytes takes it per sub-node of a fused kernel).

Probe dimensions are distinct primes, so every buffer's element count factors uniquely into a
product of symbols (b, q, L, kvh, G, G2 = G + 2, hidden, ffn, dh = head_dim / 2, and 2; tp and rs,
a rank's rows, for seq-parallel): the table stores those products, and sim/price/fusion.py evaluates
them at any model's shapes without torch. Token-split and seq-parallel take their own probe
shapes (hw/derive/inductor_probe.py, probe_of).

GPU vs CPU. On CPU Inductor lowers every cat as a ConcatKernel (one copy kernel per input), on
GPU as a pointwise cat fused into its user (torch/_inductor/lowering.py, cat): target "cuda" sets
config.force_pointwise_cat, which is the GPU's choice for RoPE's rotate_half (2 simple pointwise
inputs, pointwise use). Inductor's CUDA path decomposes a matmul with one row (mm with M == 1, bmm with
M == 1: decode at batch 1, decode attention at any batch) into a generated mul + sum reduction
when coordinate_descent_tuning is on (the reference sets it; torch/_inductor/decomposition.py,
mm and bmm). On CPU that branch is skipped, so for target "cuda" we install the same branch
(checked against the installed source: a torch that changes it fails loudly). Everything else
(fusion decisions, realized buffers) is the CPU C++ backend's; docs/compiled-stack-reference.md lists where
Triton may differ.

Run: python -m tpsim.hw.derive.inductor_kernels [--out sim/price/compiled_kernels.json] [--only KIND:VARIANT ...]
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import sys
import tempfile
import time
from unittest import mock

import torch
import torch._inductor.config as icfg
import torch.distributed as dist
from torch._inductor import decomposition as D
from torch._inductor import ir
from torch._inductor import scheduler as S
from torch._inductor.virtualized import V

from tpsim.sim.schedule.language import build_plan, plan_of
from tpsim.sim.stack.spec import Stack, Step
from tpsim.fileio.policy import write_json_atomic

from tpsim.hw.inductor_flags import REFERENCE_INDUCTOR_FLAGS, probe_vec_isa_in_default_cache
from tpsim.hw.derive.inductor_probe import (PLAIN, DTYPE, DTYPE_TORCH, KEEP_LAYER, KINDS, PROBE, VARIANTS,
                                            factor, monomial, probe_model, probe_of)
from tpsim.hw.model import build_rank_model
from tpsim.hw.runner import Runner
from tpsim.hw.torch_compat import buffer_accesses

# Inductor's CUDA-only branches we take on CPU for target "cuda" (torch/_inductor/decomposition.py)
_MM_BRANCH = "(self.unsqueeze(2) * input2.unsqueeze(0)).sum(dim=1)"
_BMM_BRANCH = "(self.unsqueeze(-1) * batch2.unsqueeze(1)).sum(dim=2)"
_GUARD = 'config.coordinate_descent_tuning and self.device.type not in ["cpu", "mps"]'


@contextlib.contextmanager
def cuda_matmul_decompositions():
    """Take Inductor's CUDA branch of the mm / bmm decompositions on CPU (see module doc)."""
    for fn, branch in ((D.mm, _MM_BRANCH), (D.bmm, _BMM_BRANCH)):
        src = inspect.getsource(fn)
        if _GUARD not in src or branch not in src:
            raise RuntimeError(f"torch {torch.__version__}: Inductor's {fn.__name__} decomposition no longer has "
                               f"the coordinate-descent M == 1 branch this derivation reproduces; re-read "
                               f"torch/_inductor/decomposition.py and update hw/derive/inductor_kernels.py")
    aten = torch.ops.aten
    orig = {k: D.decompositions[k] for k in (aten.mm.default, aten.bmm.default)}

    @D.pw_cast_for_opmath
    def mm(self, input2, out_dtype=None):
        if self.shape[0] == 1 or input2.shape[1] == 1:
            return (self.unsqueeze(2) * input2.unsqueeze(0)).sum(dim=1)
        return orig[aten.mm.default](self, input2) if out_dtype is None else NotImplemented

    @D.pw_cast_for_opmath
    def bmm(self, batch2, out_dtype=None):
        if self.shape[2] == 1 and batch2.shape[1] == 1:
            return (self * batch2).contiguous()
        if self.shape[1] == 1 or batch2.shape[2] == 1:
            return (self.unsqueeze(-1) * batch2.unsqueeze(1)).sum(dim=2)
        return orig[aten.bmm.default](self, batch2) if out_dtype is None else NotImplemented

    D.decompositions[aten.mm.default], D.decompositions[aten.bmm.default] = mm, bmm
    try:
        yield
    finally:
        D.decompositions.update(orig)


class _Stop(Exception):
    """Raised once the scheduler has its fused nodes: no kernel code is generated, built nor run."""


class _Recorder:
    """Hooks Scheduler.codegen, the step after the scheduler's fusion (Scheduler.__init__, inside
    GraphLowering.codegen): every scheduled node (kernel) of the graph, in the order the kernels would
    be generated (graph partitions split that list in order), then stops. The table needs the
    scheduler's nodes, their IR origins and read/write accesses, which code generation does not change:
    stopping before it skips the C++ backend's per-kernel codegen (vectorization analysis: half of a
    probe's compile) and g++ on every kernel."""

    def __init__(self, probe: dict):
        self.kernels: list[dict] = []
        self.probe = probe
        self.done = False               # Scheduler.codegen was reached: every node was recorded

    @contextlib.contextmanager
    def hook(self):
        orig = S.Scheduler.codegen
        rec = self

        def codegen(sched):
            for n in sched.nodes:
                k = describe(n, rec.probe)
                if k is not None:
                    rec.kernels.append(k)
            rec.done = True
            raise _Stop()

        S.Scheduler.codegen = codegen
        try:
            yield
        finally:
            S.Scheduler.codegen = orig


def _buf_dtype(name: str):
    buf = V.graph.name_to_buffer.get(name) or V.graph.graph_inputs.get(name)
    try:
        names = buf.get_mutation_names() if hasattr(buf, "get_mutation_names") else []
        if names:           # a collective's in-place output (NoneLayout): the mutated buffer's dtype
            return _buf_dtype(names[0])
        return buf.get_dtype()
    except Exception:       # noqa: BLE001 - multi-output layouts carry no dtype
        return None


def node_ops(node) -> tuple[str, ...]:
    """The IR op names (annotate {"tpsim_op": ...}) of the FX nodes a scheduler node was lowered from."""
    names = set()
    for sn in node.get_nodes():
        for o in (sn.node.origins if sn.node is not None else ()):
            name = (o.meta.get("custom") or {}).get("tpsim_op")
            if name:
                names.add(name)
    return tuple(sorted(names))


def kernel_buffer_bytes(node, include_reads: bool, include_writes: bool) -> dict[str, int]:
    """Bytes a scheduled kernel reads / writes per buffer: Inductor's estimate (hw.torch_compat.
    buffer_accesses: min(elements its loops touch x accesses, buffer size)), except for a buffer a
    fused kernel updates in place. Inductor gives a FusedSchedulerNode no loop size, so it counts
    every buffer whole: right for a norm that reads its whole input, not for a scatter into the KV
    cache (k_cache[:, :, pos] = k: b*kvh*D elements of the [b, kvh, S, D] cache) that torch 2.5 fuses
    with the V cache's. For the buffers such a kernel mutates (a written buffer that is a mutation of
    another, and that other's reads), each sub-node's own estimate is summed, capped at the whole."""
    whole = buffer_accesses(node, include_reads, include_writes)
    if not isinstance(node, S.FusedSchedulerNode) or not all(isinstance(sn, S.SchedulerNode) for sn in node.snodes):
        return whole
    mutated = set()
    for dep in node.read_writes.writes:
        names = _mutation_names(dep.name)
        if names:
            mutated |= {dep.name, *names}
    per: dict[str, int] = {}
    for sn in node.snodes:
        for name, nbytes in buffer_accesses(sn, include_reads, include_writes).items():
            per[name] = per.get(name, 0) + nbytes
    return {name: min(per.get(name, nbytes), nbytes) if name in mutated else nbytes for name, nbytes in whole.items()}


def _mutation_names(name: str) -> list[str]:
    buf = V.graph.name_to_buffer.get(name)
    try:
        return list(buf.get_mutation_names()) if buf is not None and hasattr(buf, "get_mutation_names") else []
    except Exception:       # noqa: BLE001 - a layout without mutation names
        return []


def describe(node, probe: dict) -> dict | None:
    if isinstance(node, S.NopKernelSchedulerNode):
        return None
    ops = set(node_ops(node))
    extern = isinstance(node, S.ExternKernelSchedulerNode)
    kind = "generated"
    if extern:
        kname = type(node.node).__name__
        kernel = getattr(node.node, "python_kernel_name", None) or kname
        if isinstance(node.node, (ir._CollectiveKernel, ir._WaitKernel)):
            kind = "collective"
        elif "mm" in str(kernel) or "addmm" in str(kernel):
            kind = "matmul"
        else:
            kind = "extern"
    else:
        kernel = node.get_name()
    bufs = []
    for mode, (r, w) in (("read", (True, False)), ("write", (False, True))):
        for name, nbytes in kernel_buffer_bytes(node, r, w).items():
            dt = _buf_dtype(name)
            if dt is None or nbytes == 0:
                continue
            size = torch.empty((), dtype=dt).element_size()
            bufs.append({"mode": mode, "buffer": name, "dtype": str(dt).replace("torch.", ""),
                         "numel": monomial(factor(nbytes // size, probe))})
    return {"kind": kind, "kernel": str(kernel), "ops": sorted(ops), "buffers": bufs}


def one_rank_group():
    return _group(1)


def _group(size: int):
    """The default process group with `size` ranks, this process rank 0: a 1-rank gloo group, or
    for more ranks torch's fake backend (collectives return at once; functional collectives trace
    and compile with the real job's shapes)."""
    if dist.is_initialized() and dist.get_world_size() != size:
        dist.destroy_process_group()
    if not dist.is_initialized():
        if size == 1:
            fd, path = tempfile.mkstemp(prefix="tpsim-inductor-")
            os.close(fd)
            dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
        else:
            from torch.testing._internal.distributed.fake_pg import FakeStore  # lazy: test-only fake backend, needed only for TP > 1 probes
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    return dist.group.WORLD


def derivation_flags(target: str) -> dict:
    """Derivation-only Inductor settings, over REFERENCE_INDUCTOR_FLAGS (hw.inductor_flags): every
    probe compiles afresh (no FX graph cache: a cached graph would skip the scheduler hook)."""
    return {"fx_graph_cache": False, "force_disable_caches": True,
            # Inductor lowers cat (RoPE's rotate_half) as a ConcatKernel on CPU always, on GPU as a
            # pointwise cat that fuses into its pointwise user (lowering.cat): take the GPU choice
            "force_pointwise_cat": target == "cuda"}


def compile_kernels(kind: str, variant: str) -> list[dict]:
    """Compile one probe forward pass (every layer of schedule `kind`) and return the kernels
    of layer KEEP_LAYER, each attributed to one IR op (see attribute())."""
    spec, layers = KINDS[kind]
    phase, _, target = VARIANTS[variant]
    pr = probe_of(kind, variant)
    model = probe_model(layers, pr.tp)
    batch, prompt, gen = pr.batch, pr.prompt, pr.gen
    stack = Stack(dtype=DTYPE)
    step = (Step.prefill(batch, prompt, gen, stack) if phase == "prefill"
            else Step.decode(batch, prompt, gen, 1, stack))
    sched = build_plan(spec, plan_of(spec, layers), model, pr.tp, step, stack)
    torch._dynamo.reset()
    rm = build_rank_model(model, pr.tp, 0, batch=batch, max_seq=prompt + gen, dtype=DTYPE)
    runner = Runner(rm, _group(pr.tp), rank=0)
    tokens = torch.zeros(batch, step.q_len, dtype=torch.long)
    pos = torch.tensor(step.start_pos)
    fn = torch.compile(runner.functional_pass, fullgraph=True, dynamic=False)
    rec = _Recorder(pr.symbols)
    patches = REFERENCE_INDUCTOR_FLAGS | derivation_flags(target)
    decomp = cuda_matmul_decompositions() if target == "cuda" else contextlib.nullcontext()
    # Inductor's vector-ISA probe (cached per process) builds six test programs into the cache directory:
    # in the default one, where they stay between processes (seconds of g++ each time in a scratch one)
    probe_vec_isa_in_default_cache()
    # a scratch cache: stopping in codegen makes Inductor keep its temporary directory
    with tempfile.TemporaryDirectory(prefix="tpsim-inductor-") as scratch, \
            mock.patch.dict(os.environ, {"TORCHINDUCTOR_CACHE_DIR": scratch}), \
            icfg.patch(patches), decomp, rec.hook(), torch.no_grad():
        try:
            fn(sched, tokens, pos)
        except Exception:           # noqa: BLE001 - Dynamo wraps our _Stop in a BackendCompilerFailed
            if not rec.done:
                raise
    if not rec.done:
        raise RuntimeError("Inductor scheduled no kernels (Scheduler.codegen was not reached)")
    return attribute(rec.kernels, sched, "rs" if kind == "seq-parallel" else "b*q")


def attribute(kernels: list[dict], sched, residual_rows: str = "b*q") -> list[dict]:
    """Each kernel to the one IR op that is latest in issue order among those it fuses (a fused
    kernel can start only after all of them could: the latest op's inputs imply the others'),
    kept if that op is in layer KEEP_LAYER; roles drop the layer prefix ("attn.norm")."""
    order = {op.name: i for i, op in enumerate(sched.ops)}
    layer = {op.name: op.layer for op in sched.ops}
    comm = {op.name for op in sched.ops if op.is_comm}
    kinds = {op.name: op.kind for op in sched.ops}
    out = []
    for k in kernels:
        ops = [o for o in k["ops"] if o in order]
        if not ops:
            continue
        # a functional all-reduce copies its input first: that copy is compute (often fused into the
        # producer's kernel), charged to the latest compute op, never to the collective
        compute = [o for o in ops if o not in comm]
        if k["kind"] != "collective" and compute:
            ops = compute
        gemms = [o for o in ops if kinds[o] == "gemm"]
        if k["kind"] == "matmul" and gemms:
            last = max(gemms, key=order.get)    # an extern matmul is its GEMM's; an addmm's add rides along
        else:
            last = max(ops, key=order.get)
        if layer[last] != KEEP_LAYER:
            continue
        role = last.split(".", 1)[1]
        fuses = [_rel(o, layer[o]) for o in sorted(ops, key=order.get) if o != last]
        out.append({"role": role, "kind": k["kind"], "kernel": k["kernel"],
                    "fuses": [f for f in fuses if f != "embed"],
                    "buffers": _residual(k["buffers"], ops, residual_rows)})
    return out


GEMM_ROLES = ("attn.qkv", "attn.out", "mlp.up", "mlp.down")


def recharge_matmuls(layers: dict) -> dict:
    """The extern-matmul rule of attribute() applied to an already derived table (in place): a
    matmul kernel charged to a non-GEMM op (an addmm's fused residual add) goes to the latest GEMM
    of the layer among the ops it fuses."""
    for variants in layers.values():
        for ks in variants.values():
            for k in ks:
                if k["kind"] != "matmul" or k["role"] in GEMM_ROLES:
                    continue
                g = [f for f in k["fuses"] if f in GEMM_ROLES]
                if g:
                    k["fuses"] = [f for f in k["fuses"] if f != g[-1]] + [k["role"]]
                    k["role"] = g[-1]
    return layers


def _residual(bufs: list[dict], ops: list[str], rows: str = "b*q") -> list[dict]:
    """A short probe never realizes its residual stream: Inductor recomputes x = embed(tokens) +
    the all-reduced partials inside each consumer (it realizes a reused pointwise chain only once
    it reads more than config.realize_reads_threshold buffers, i.e. every couple of layers in a
    deep model). Stand one read of the residual x [rows, hidden] in for the embedding's reads
    (rows: b*q, a micro-batch's own under token-split; rs, the rank's shard, under seq-parallel)."""
    if "embed" not in ops:
        return bufs
    out = [b for b in bufs if "vocab" not in b["numel"] and not (b["dtype"] == "int64" and b["mode"] == "read")]
    powers: dict[str, int] = {}
    for sym in rows.split("*") + ["hidden"]:
        powers[sym] = powers.get(sym, 0) + 1
    return [{"mode": "read", "buffer": "residual", "dtype": DTYPE_TORCH, "numel": monomial(powers)}] + out


def _rel(name: str, layer: int | None) -> str:
    """An IR op name relative to the kept layer: 'attn.add', 'prev:mlp.add', 'next:attn.norm'."""
    if layer is None:
        return name
    role = name.split(".", 1)[1]
    if layer == KEEP_LAYER:
        return role
    return f"{'prev' if layer < KEEP_LAYER else 'next'}:{role}"


def derive(only: list[str] | None = None, progress=print) -> dict:
    table: dict = {}
    for kind in KINDS:
        for variant in VARIANTS:
            key = f"{kind}:{variant}"
            if only and key not in only:
                continue
            t0 = time.perf_counter()
            table.setdefault(kind, {})[variant] = compile_kernels(kind, variant)
            progress(f"{key}: {len(table[kind][variant])} kernels ({time.perf_counter() - t0:.0f} s)")
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "sim", "price", "compiled_kernels.json"))
    ap.add_argument("--only", nargs="*", help="KIND:VARIANT to derive (default: all), merged into --out")
    a = ap.parse_args(argv)
    old = {}
    if a.only and os.path.exists(a.out):
        with open(a.out) as f:
            old = json.load(f).get("layers", {})
    for kind in KINDS:
        for variant in VARIANTS:
            key = f"{kind}:{variant}"
            if a.only and key not in a.only:
                continue
            t0 = time.perf_counter()
            old.setdefault(kind, {})[variant] = compile_kernels(kind, variant)
            print(f"{key}: {len(old[kind][variant])} kernels ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
            _write(a.out, old)
    return 0


def _write(path: str, layers: dict) -> None:
    doc = {"format": "tpsim-compiled-kernels", "version": 1, "torch": torch.__version__,
           "command": "python -m tpsim.hw.derive.inductor_kernels", "dtype": DTYPE,
           "probe": PROBE, "variants": {k: {"phase": v[0], "batch": v[1], "target": v[2]} for k, v in VARIANTS.items()},
           "probes": {f"{kind}:{variant}": {"tp": p.tp, "batch": p.batch, "prompt": p.prompt, "gen": p.gen,
                                            "symbols": {k: v for k, v in p.symbols.items() if k not in PROBE
                                                        or v != PROBE[k]}}
                      for kind in KINDS if kind not in PLAIN for variant in VARIANTS
                      for p in [probe_of(kind, variant)]},
           "note": "see docs/compiled-stack.md: derived on the CPU C++ backend; target cuda takes Inductor's "
                   "CUDA mm/bmm M == 1 decompositions. token-split:N roles carry the micro-batch (mb0.attn.norm), "
                   "b and q are the micro-batch's own; seq-parallel is probed at TP 37 on a fake process group, "
                   "rs = rows of a rank's shard (probes: what differs from the plain probe)",
           "layers": layers}
    write_json_atomic(path, doc)


if __name__ == "__main__":
    raise SystemExit(main())
