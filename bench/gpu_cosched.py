"""`python bench/gpu_kernels.py cosched`: a Triton probe kernel on a second stream beside decode-shaped
compute (see that module's docstring), what only a GPU settles for sim/price/coschedule.py: the start delay of a
collective-sized kernel, its SMs (%smid), 4-CTA clusters' placement, and the compute kernels' slowdown."""
from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from gpu_record import Doc, guarded, linear_shapes, sync, trace_events, windows

try:                                        # the probe kernel; without Triton the part says so and skips
    import triton
    import triton.language as tl
except ImportError:                         # pragma: no cover - a torch build without Triton
    triton = None

from tpsim.hw.inductor_flags import REFERENCE_INDUCTOR_FLAGS, apply_inductor_flags

if triton is not None:
    @triton.jit
    def tpsim_probe(out_ptr, spin_ns):
        """Per CTA (%ctaid.x, so per CTA of a cluster too): start %globaltimer, end, %smid; spins spin_ns.
        The special registers are read as triton.language.extra.cuda's globaltimer() / smid() read them
        (the same inline PTX, written out: that module's path has moved between Triton releases)."""
        cta = tl.inline_asm_elementwise("mov.u32 $0, %ctaid.x;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
        t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        t = t0
        while t - t0 < spin_ns:
            t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                          pack=1)
        tl.store(out_ptr + cta * 3, t0)
        tl.store(out_ptr + cta * 3 + 1, t)
        tl.store(out_ptr + cta * 3 + 2, sm.to(tl.int64))

# name -> (CTAs, warps per CTA, CTAs per cluster). 24 CTAs: what sim/price/coschedule.py gives the 70B TP8 batch-64
# all-reduce (docs/design.md "Overlap the GPU allows"), 16 a mid-sized one; clusters of 4 as NCCL launches on
# sm90 (cgaClusterSize 4); 16 warps (512 threads, NCCL's usual block) for a CTA that needs more of an SM
PROBES = {"16x1w": (16, 1, 1), "24x1w": (24, 1, 1), "16x1w-cluster4": (16, 1, 4), "24x1w-cluster4": (24, 1, 4),
          "24x16w": (24, 16, 1)}
SPIN_NS = 150_000          # long enough to overlap several 15-40 µs compute kernels


def offline_compile() -> dict:
    """Compile the probe for sm_90 without a GPU (Triton's bundled ptxas): each PROBES shape builds."""
    from triton.backends.compiler import GPUTarget    # lazy: Triton internals, smoke mode only
    from triton.compiler import ASTSource              # lazy: as above
    out = {}
    for name, (_, warps, ctas) in PROBES.items():
        try:
            k = triton.compile(ASTSource(tpsim_probe, {"out_ptr": "*i64", "spin_ns": "i64"}),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_ctas": ctas})
            ptx = k.asm["ptx"]
            # both timer reads survive (the spin loop was not folded away), the SM id is read, and a
            # cluster shape is declared as one
            out[name] = {"ok": ptx.count("%globaltimer") >= 2 and "%smid" in ptx and
                         (ctas == 1 or f".reqnctapercluster {ctas}" in ptx), "num_ctas": ctas}
        except Exception as e:  # noqa: BLE001 - record which shape Triton refuses
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def cosched_works() -> dict:
    """name -> fn(): one compute kernel of 70B TP8 decode shape (weight [n, k], x [m, k])."""
    sh = linear_shapes("llama-3.1-70b", 8)
    works = {}
    for name, m in (("w13", 4), ("w13", 64), ("w2", 4), ("w2", 64)):
        n, k = sh[name]
        x, w = torch.randn(m, k, device="cuda", dtype=torch.float16), torch.randn(n, k, device="cuda", dtype=torch.float16)
        works[f"{name}-m{m}"] = (lambda x=x, w=w: F.linear(x, w))
    try:                     # the compiled step's m = 1 GEMV: Inductor's generated reduction (coordinate descent)
        apply_inductor_flags(REFERENCE_INDUCTOR_FLAGS)
        n, k = sh["w13"]
        x1, w1 = torch.randn(1, k, device="cuda", dtype=torch.float16), torch.randn(n, k, device="cuda", dtype=torch.float16)
        gemv = torch.compile(lambda: F.linear(x1, w1), fullgraph=True, dynamic=False)
        gemv()
        works["w13-m1-generated"] = gemv
    except Exception as e:  # noqa: BLE001
        works["w13-m1-generated"] = f"{type(e).__name__}: {str(e)[:300]}"
    return works


CALLS = 60                 # compute calls per trial; the probe becomes ready after CALLS // 2 (gate) or CALLS // 4 (host)
HOLD_CYCLES = 8_000_000    # torch.cuda._sleep on stream A first (~4 ms at 1.98 GHz): the host enqueues ahead


def trial(tag: str, work, probe: str | None, mode: str) -> torch.Tensor | None:
    """One trial inside record_function(tag): stream A runs CALLS back-to-back work() behind a hold;
    the probe on stream B waits for the event after call CALLS/2 ("gate"; "gate-hi" on a high-priority
    stream, TORCH_NCCL_HIGH_PRIORITY's), is launched by the host once call CALLS/4 is done ("host":
    it lands inside a running kernel), or runs alone ("idle"). Returns the probe's [CTAs, 3] buffer."""
    cta, warps, per = PROBES[probe] if probe else (0, 0, 0)
    buf = torch.zeros(max(cta, 1), 3, dtype=torch.int64, device="cuda")
    A, B = torch.cuda.Stream(), torch.cuda.Stream(priority=-1 if mode == "gate-hi" else 0)
    gate, mark = torch.cuda.Event(), torch.cuda.Event()
    sync()
    with record_function(f"tpsim:{tag}"):
        if work is not None:
            with torch.cuda.stream(A):
                torch.cuda._sleep(HOLD_CYCLES)
                for i in range(CALLS):
                    work()
                    if i == CALLS // 2 - 1:
                        gate.record(A)
                    if i == CALLS // 4 - 1:
                        mark.record(A)
        if probe:
            if mode.startswith("gate"):
                B.wait_event(gate)
            elif mode == "host" and work is not None:
                while not mark.query():         # the GPU is a quarter into the sequence
                    pass
            with torch.cuda.stream(B):
                tpsim_probe[(cta // per,)](buf, SPIN_NS, num_warps=warps, num_ctas=per)
        sync()
    return buf.cpu() if probe else None


def read_trial(kers: list[dict], launch_end: dict, buf, probe: str | None, mode: str, alone_us) -> dict:
    """A trial's numbers from its kernels (CUPTI, µs) and the probe's buffer (globaltimer, ns). ready:
    the gating compute kernel's end ("gate"), else the end of the probe's launch call (CUPTI's
    runtime/driver API record of the same correlation id)."""
    pk = [k for k in kers if "tpsim_probe" in k["name"]]
    comp = [k for k in kers if "tpsim_probe" not in k["name"] and "spin_kernel" not in k["name"]]
    per_call = len(comp) // CALLS if len(comp) % CALLS == 0 else None      # cuBLAS may run 2 kernels a call
    out = {"compute_kernels": len(comp), "kernels_per_call": per_call,
           "compute_names": sorted({k["name"] for k in comp}),
           "compute_median_us": statistics.median(k["dur"] for k in comp) if comp else None}
    if not probe or not pk:
        return out | ({"probe_missing": True} if probe else {})
    p = pk[0]
    if mode.startswith("gate"):
        g = comp[(CALLS // 2) * per_call - 1] if per_call else None
        ready = g["ts"] + g["dur"] if g else None
    else:
        ready = launch_end.get(p.get("args", {}).get("correlation"))
    beside = [k["dur"] for k in comp if k["ts"] < p["ts"] + p["dur"] and k["ts"] + k["dur"] > p["ts"]]
    t0, sms, per = buf[:, 0], buf[:, 2].tolist(), PROBES[probe][2]
    out |= {"probe_start_ts_us": p["ts"], "probe_dur_us": p["dur"], "ready_ts_us": ready,
            "start_delay_us": p["ts"] - ready if ready is not None else None,
            "cta_start_spread_ns": int(t0.max() - t0.min()), "cta_start_ns": (t0 - t0.min()).tolist(), "smids": sms,
            "cluster_smids": [sms[i:i + per] for i in range(0, len(sms), per)] if per > 1 else None,
            "beside_us": beside, "beside_mean_us": statistics.mean(beside) if beside else None}
    if beside and alone_us:
        out["slowdown"] = statistics.mean(beside) / alone_us
    return out


def part_cosched(a, doc: Doc) -> None:
    if triton is None:
        doc.skip("cosched: no Triton in this torch build")
        return
    if not torch.cuda.is_available():
        doc.skip("cosched: no CUDA: nothing timed; the probe kernel is only compiled for sm_90 offline")
        guarded(doc, "offline_compile", offline_compile)
        return
    works = cosched_works()
    plan = [(f"idle:{p}", None, p, "idle") for p in PROBES]
    for w, fn in works.items():
        if isinstance(fn, str):
            doc.put(f"work:{w}", {"error": fn})
            continue
        plan += [(f"{w}:alone", fn, None, "alone")] + [(f"{w}:{p}:{mode}", fn, p, mode) for p in PROBES
                                                       for mode in ("gate", "gate-hi", "host")]
    for p in PROBES:        # JIT-compile each probe shape before the profiled trials; a refused shape is dropped
        try:
            trial(f"warm:{p}", None, p, "idle")
        except Exception as e:  # noqa: BLE001
            doc.put(f"probe:{p}", {"error": f"{type(e).__name__}: {str(e)[:300]}"})
            plan = [t for t in plan if t[2] != p]
    for rep in range(a.reps):
        bufs = {}
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as pr:
            for tag, fn, p, mode in plan:
                try:
                    bufs[tag] = trial(tag, fn, p, mode)
                except Exception as e:  # noqa: BLE001
                    doc.put(f"{tag}:rep{rep}", {"error": f"{type(e).__name__}: {str(e)[:300]}"})
        ev = trace_events(pr)
        launch_end = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in ev
                      if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        win, alone = windows(ev, "tpsim:"), {}
        for tag, fn, p, mode in plan:
            if tag in bufs and tag in win:
                item = read_trial(win[tag], launch_end, bufs[tag], p, mode, alone.get(tag.split(":")[0]))
                if mode == "alone":
                    alone[tag.split(":")[0]] = item["compute_median_us"]
                doc.put(f"{tag}:rep{rep}", item | {"probe": p, "mode": mode, "spin_ns": SPIN_NS})
        print(f"cosched rep {rep}: {len(plan)} trials -> {doc.path}", flush=True)
