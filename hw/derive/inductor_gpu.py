"""Derive the GPU decode kernel table (sim/compiled_kernels_gpu.json) from Inductor's Triton path.

On this CPU-only box: the reference harness's own decode graph (hw/derive/reference_model.py, a
transcription of gpt_fast's GPTDense: freqs_cis[input_pos] and the causal mask indexed once per
model, KV cache [B, KVH, S, D], repeat_interleave GQA, math SDPA) on FakeTensors on device "cuda",
the device answering as an H100 (hw/derive/fake_cuda.py), with the harness's Inductor flags
(coordinate_descent_tuning, reorder_for_compute_comm_overlap; FACTS §10). So every Inductor decision
is the CUDA path's own: the mm / bmm decompositions (torch/_inductor/decomposition.py: a bmm with
one query row, and an mm with one row -- batch 1 -- become generated mul + sum reductions; at
M >= 2 an mm stays an extern cuBLAS call), Triton fusion and split reductions, pointwise cat.

Recorded per kernel, as hw/inductor_kernels does for the CPU table (same format, same
attribution: `attribute`): the IR ops it fuses and Inductor's per-buffer byte estimate. Plus, from
the Triton output code (GraphLowering.codegen is hooked, nothing is compiled or run), each
generated kernel's Triton heuristic (pointwise / reduction / persistent_reduction), size hints
and reduction hint, and the element strides its loads of the KV cache use: what
sim/price/l2_traffic.py prices the GQA re-reads from. Autotuning (coordinate descent) runs at the first
launch on a real GPU: which block sizes it keeps is not derivable here.

View strides (hw/derive/fake_views.py): the trace gives FakeTensor views eager's strides, as torch.compile's
AOTAutograd ends up with (and as the reference's torch 2.5 gave every FakeTensor view). A plain make_fx
on torch 2.13 would not, and would make the reference's wo a bmm over the expanded weight, which no
torch.compile run does.

The shipped table is derived with the torch the reference ran, 2.5.1 (+ triton 3.1.0; a CUDA build
from PyPI derives without a GPU: hw/derive/fake_cuda.py, hw/torch_compat.py); on another torch the same
command derives that torch's kernels (2.13 fuses the attention otherwise: docs/compiled-stack-reference.md).

Run: python -m tpsim.hw.derive.inductor_gpu [--out sim/compiled_kernels_gpu.json]   (about 20 s)
     python -m tpsim.hw.derive.inductor_gpu --at llama-3.1-70b:8:4 ...   (the launches at real shapes)
     python -m tpsim.hw.derive.inductor_splits   (the table's `splits` section: what the real shapes launch
                                           beyond the probe; about 15 min on 2 cores)
     (needs the `triton` package for code generation: pip install triton)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from unittest import mock

import torch
import torch._inductor.config as icfg
from torch._inductor import scheduler as S
from torch._inductor.graph import GraphLowering
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx

from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import build_plan, plan_of
from tpsim.sim.stack.spec import Stack, Step
from tpsim.sim.price.l2_traffic import mark_rereads
from tpsim.fileio.policy import write_json_atomic

from tpsim.hw.derive import reference_model as R
from tpsim.hw.derive.fake_cuda import H100, fake_h100
from tpsim.hw.derive.fake_views import eager_view_strides
from tpsim.hw.inductor_flags import REFERENCE_INDUCTOR_FLAGS
from tpsim.hw.derive.inductor_kernels import describe, one_rank_group, attribute
from tpsim.hw.derive.inductor_probe import DTYPE, PROBE, probe_model
from tpsim.hw.torch_compat import scheduler_nodes

LAYERS = 3              # the kept layer 1 has a neighbour on each side
KINDS = {"standard": True, "upper-bound": False}            # kind -> the graph has the all-reduces
VARIANTS = {"decode": PROBE["b"], "decode-m1": 1}           # variant -> probe batch
# derivation-only settings over the reference's flags (hw.inductor_flags): every lowering afresh
# (stopping in codegen leaves nothing to cache), one compile thread
DERIVATION_FLAGS = {"fx_graph_cache": False, "force_disable_caches": True, "compile_threads": 1,
                    # the reference models' matmul dims are multiples of 8: pad_mm never pads them (and it
                    # benchmarks on the device to decide); the probe's prime dims must not trigger it
                    "shape_padding": False}
FLAGS = REFERENCE_INDUCTOR_FLAGS | DERIVATION_FLAGS


# Model-level tables indexed by input_pos (an indirect load: Inductor's estimate is the whole
# table): a decode step reads one row of each (q = 1): the causal mask row [S] and freqs_cis [D/2, 2]
ROW_READS = {"causal_mask": "L", "freqs_cis": "2*dh"}


class _Stop(Exception):
    """Raised after the output code is written: nothing is compiled or run."""


class _Capture:
    """Scheduler nodes (kernels) and the Triton output code of the graph compiled meanwhile."""

    def __init__(self, probe: dict | None):
        self.nodes: list = []           # (scheduler node, description or None)
        self.code = ""
        self.probe = probe

    @contextlib.contextmanager
    def hook(self):
        orig_cg, orig_sched = GraphLowering.codegen, S.Scheduler._codegen
        cap = self

        def _codegen(sched, *args):
            out = orig_sched(sched, *args)
            for n in scheduler_nodes(sched, args):
                if not isinstance(n, S.NopKernelSchedulerNode):
                    cap.nodes.append((n, describe(n, cap.probe) if cap.probe else None))
            return out

        def codegen(graph, *a, **k):
            out = orig_cg(graph, *a, **k)
            cap.code = out[0].value if hasattr(out[0], "value") else str(out[0])
            raise _Stop()

        GraphLowering.codegen, S.Scheduler._codegen = codegen, _codegen
        try:
            yield
        finally:
            GraphLowering.codegen, S.Scheduler._codegen = orig_cg, orig_sched


def compile_decode(shapes: R.Shapes, comm: bool, probe: dict | None = None, model=None,
                   flags: dict | None = None) -> _Capture:
    """Lower one decode step of the reference model at `shapes` for the fake H100 (views traced with
    eager's strides, as torch.compile sees them: hw.derive.fake_views); the capture holds its scheduler
    nodes (described over `probe`'s primes when given) and output code. model: (params, forward) of
    another of the reference's models (hw.derive.reference_ladder.MODELS; default the dense one); flags:
    Inductor settings over FLAGS."""
    params, forward = model or (R.params, R.forward)
    cap = _Capture(probe)
    # a 1-rank group also without collectives: torch 2.5's reorder_for_compute_comm_overlap passes ask
    # dist.get_rank() whatever the graph holds
    group = one_rank_group()
    with fake_h100(), icfg.patch(FLAGS | (flags or {})), torch.no_grad(), eager_view_strides():
        torch._dynamo.reset()
        fm = FakeTensorMode()
        with fm:
            p = params(shapes)
            idx = torch.empty(shapes.batch, 1, dtype=torch.long, device="cuda")
            pos = torch.empty(1, dtype=torch.int32, device="cuda")
        names = list(p)

        def fn(idx, pos, *ws):
            return forward(dict(zip(names, ws)), shapes, idx, pos, group, comm)

        with fm, fx_traceback.preserve_node_meta():
            gm = make_fx(fn)(idx, pos, *p.values())
        from torch._inductor.compile_fx import compile_fx      # lazy: heavy import
        # a scratch cache: stopping in codegen makes Inductor keep its temporary directory
        with tempfile.TemporaryDirectory(prefix="tpsim-inductor-gpu-") as scratch, \
                mock.patch.dict(os.environ, {"TORCHINDUCTOR_CACHE_DIR": scratch}):
            try:
                with cap.hook():
                    compile_fx(gm, [idx, pos, *p.values()])
            except Exception:           # noqa: BLE001 - Inductor wraps our _Stop in an InductorError
                if not cap.code:
                    raise
    if not cap.code:
        raise RuntimeError("Inductor wrote no output code (GraphLowering.codegen was not reached)")
    return cap


# --- the Triton output code

_KERNEL_DEF = re.compile(r"^(triton_\w+) = async_compile\.triton\('(\w+)', '''(.*?)''', device_str='cuda'\)",
                         re.S | re.M)
# size hints: {'x': 8192, 'r0_': 64} (newer torch) or [8192, 64] (torch 2.5: x then r)
_HEUR = re.compile(r"@triton_heuristics\.(\w+)\(\s*size_hints=(\{[^}]*\}|\[[^\]]*\])"
                   r"(?:,\s*reduction_hint=ReductionHint\.(\w+))?")
# one launch of call() per line: a Triton kernel's .run(args), extern_kernels.<fn>(args), or a functional
# collective op with the buffer it names first (through reinterpret_tensor or not)
_LAUNCH = re.compile(r"^\s*(?:(\w+)\.run\((.*)\)|(extern_kernels\.\w+)\((.*)\)|"
                     r"torch\.ops\._c10d_functional\.(\w+)\.default\((?:reinterpret_tensor\()?(\w+))", re.M)


def _size_hints(text: str) -> dict[str, int]:
    """{'x': 8192, 'r0_': 64} from either form of the decorator's size_hints (a list: x, then r)."""
    if text.startswith("["):
        return dict(zip(("x", "r0_"), (int(v) for v in re.findall(r"\d+", text))))
    return {k: int(v) for k, v in re.findall(r"'(\w+)':\s*(\d+)", text)}


def triton_kernels(code: str) -> dict[str, dict]:
    """kernel name -> {heuristic, size_hints, reduction_hint, loads}: what the output code says of
    each generated kernel. loads: the index expression of every tl.load (element offsets)."""
    out = {}
    for name, _, src in _KERNEL_DEF.findall(code):
        m = _HEUR.search(src)
        sizes = _size_hints(m.group(2)) if m else {}
        loads = re.findall(r"tl\.load\((\w+) \+ \(([^)]*)\)", src)
        out[name] = {"heuristic": m.group(1) if m else "?", "size_hints": sizes,
                     "reduction_hint": (m.group(3) or "") if m else "",
                     "loads": [f"{ptr}: {expr}" for ptr, expr in loads]}
    return out


def call_launches(code: str) -> list[tuple[str, str]]:
    """(what is launched, its arguments) for each launch of the output code's call(), in order: a Triton
    kernel's name, extern_kernels.<fn>, or `all_reduce_(buf)` / `wait_tensor(buf)` (arguments: buf).
    The one parser of call() (hw/derive/inductor_overlap.py and hw/derive/inductor_splits.py read it too)."""
    body = code[code.find("def call("):]
    return [(t, targs) if t else (e, eargs) if e else (f"{c}({buf})", buf)
            for t, targs, e, eargs, c, buf in _LAUNCH.findall(body)]


def launch_order(code: str) -> list[str]:
    """The output code's call() launches in order: Triton kernel names, extern_kernels.<fn>, and
    `all_reduce_(buf)` / `wait_tensor(buf)` with the buffer they name."""
    return [name for name, _ in call_launches(code)]


def probe_shapes(batch: int) -> R.Shapes:
    """One rank's shapes of the prime probe's decode step (LAYERS layers) at `batch`."""
    m = probe_model(LAYERS)
    return R.Shapes(batch, PROBE["L"], m.heads, m.kv_heads, m.head_dim, m.hidden, m.ffn, m.vocab, LAYERS)


def derive(progress=print) -> dict:
    """{kind: {variant: [kernel, ...]}} at the probe's prime shapes (the CPU table's format), each
    generated kernel with its Triton heuristic, size hints and reduction hint."""
    layers: dict = {}
    for kind, comm in KINDS.items():
        for variant, b in VARIANTS.items():
            t0 = time.perf_counter()
            pr = dict(PROBE, b=b)
            m, shapes = probe_model(LAYERS), probe_shapes(b)
            cap = compile_decode(shapes, comm, pr)
            tk = triton_kernels(cap.code)
            gen = [n for n in launch_order(cap.code) if n.startswith("triton_")]
            descs = [d for _, d in cap.nodes if d is not None]
            gens = [d for d in descs if d["kind"] == "generated"]
            if len(gens) != len(gen):
                raise RuntimeError(f"{kind}:{variant}: {len(gens)} generated scheduler nodes, {len(gen)} Triton "
                                   f"launches in call(): cannot pair them")
            for d, name in zip(gens, gen):
                t = tk[name]
                d["kernel"] = name
                d["triton"] = {k: t[k] for k in ("heuristic", "size_hints", "reduction_hint")}
            step = Step.decode(b, PROBE["q"], PROBE["L"] - PROBE["q"], 1, Stack(dtype=DTYPE))
            sched = build_plan(kind, plan_of(kind, LAYERS), m, 1, step, Stack(dtype=DTYPE))
            rows = {f"arg{2 + i}_1": n for i, n in enumerate(R.params_order(shapes)) if n in ROW_READS}
            for d in descs:
                for buf in d["buffers"]:
                    if buf["buffer"] in rows and buf["mode"] == "read":
                        buf["numel"] = ROW_READS[rows[buf["buffer"]]]
            ks = attribute(descs, sched)
            triton = {d["kernel"]: d.get("triton") for d in descs}
            for k in ks:
                if triton.get(k["kernel"]):
                    k["triton"] = triton[k["kernel"]]
            layers.setdefault(kind, {})[variant] = [mark_rereads(k) for k in ks]
            progress(f"{kind}:{variant}: {len(ks)} kernels ({time.perf_counter() - t0:.0f} s)")
    return layers


def write(path: str, layers: dict, splits: dict | None = None) -> None:
    doc = {"format": "tpsim-compiled-kernels", "version": 1, "torch": torch.__version__,
           "triton": _triton_version(), "command": "python -m tpsim.hw.derive.inductor_gpu", "dtype": DTYPE,
           "device": {"name": H100.name, "sms": H100.multi_processor_count, "cc": f"{H100.major}.{H100.minor}"},
           "probe": PROBE, "layers_compiled": LAYERS,
           "view_strides": "eager: FakeTensor views through the C++ meta kernel, as torch.compile's AOTAutograd "
                           "sees them (hw.derive.fake_views.eager_view_strides)",
           "variants": {k: {"phase": "decode", "batch": b, "target": "cuda-triton"} for k, b in VARIANTS.items()},
           "note": "see docs/compiled-stack.md: the reference harness's decode graph (gpt_fast GPTDense, "
                   "hw/derive/reference_model.py) lowered by Inductor's CUDA/Triton path for a fake H100 on FakeTensors; "
                   "per kernel the Triton heuristic and size hints at the probe's prime shapes. Derived with the "
                   "reference's own torch 2.5.1 / triton 3.1.0 (its logs: NCCL 2.21.5): "
                   "TPSIM_REFERENCE_TORCH_PYTHON in docs/compiled-stack.md",
           "layers": layers}
    if splits:
        doc["splits"] = splits
    write_json_atomic(path, doc)


def _triton_version() -> str:
    import triton                          # lazy: optional dependency
    return triton.__version__


def real_shapes(model: str, tp: int, batch: int, layers: int = LAYERS) -> R.Shapes:
    """One rank's shapes of `model` at TP `tp` (cache 1536: prompt 1024 + 512, the reference workload)."""
    s = get_model(model).shard(tp)
    return R.Shapes(batch, 1536, s.heads, s.kv_heads, s.head_dim, s.hidden, s.ffn, s.vocab, layers)


def at_shapes(model: str, tp: int, batch: int, comm: bool = False) -> list[tuple[str, dict | None]]:
    """The launches of one decode step at a real model's per-rank shapes (cache 1536 = prompt 1024
    + 512 generated, the reference workload), layer 1 only: (kernel, its Triton heuristic / size
    hints / reduction hint, None for an extern call). Shows what the prime probe cannot: the split
    reductions and inlining decisions Inductor makes at the real sizes."""
    code = compile_decode(real_shapes(model, tp, batch), comm).code
    tk = triton_kernels(code)
    order = launch_order(code)
    per_layer = len(order) // LAYERS if order else 0
    layer1 = order[per_layer:2 * per_layer] if per_layer else order
    return [(n, {k: tk[n][k] for k in ("heuristic", "size_hints", "reduction_hint")} if n in tk else None)
            for n in layer1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "sim", "price", "compiled_kernels_gpu.json"))
    ap.add_argument("--at", metavar="MODEL:TP:BATCH", nargs="*",
                    help="print the Triton launches of a decode step at these real shapes instead")
    a = ap.parse_args(argv)
    if a.at:
        for spec in a.at:
            model, tp, batch = spec.split(":")
            print(f"{model} TP{tp} batch {batch} (upper-bound, ~one layer of launches):")
            for name, t in at_shapes(model, int(tp), int(batch)):
                print(f"  {name[:80]:80s} {t['heuristic'] + ' ' + str(t['size_hints']) + ' ' + t['reduction_hint'] if t else ''}")
        return 0
    layers = derive(progress=lambda s: print(s, file=sys.stderr, flush=True))
    splits = None
    if os.path.exists(a.out):                 # derived apart (hw/derive/inductor_splits.py): kept
        with open(a.out) as f:
            splits = json.load(f).get("splits")
    write(a.out, layers, splits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
