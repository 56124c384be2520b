"""What every part of bench/gpu_kernels.py shares: provenance, the rewritten-as-it-goes JSON, the
profiler trace read into per-label kernel windows, and the decode shapes of one rank."""
from __future__ import annotations

import contextlib
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

import torch  # noqa: E402

try:                                        # only for its version here
    import triton
except ImportError:                         # pragma: no cover - a torch build without Triton
    triton = None

from tpsim.fileio.policy import write_json_atomic  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402

PROFILE = "h200-sxm"                        # tpsim's prices beside every measurement
MODELS = ("llama-3.1-70b:8", "llama-3.1-8b:1")          # MODEL:TP, one rank's shapes


def provenance(argv: list[str]) -> dict:
    """What ran where: versions, the GPU and its clocks (nvidia-smi, when there), date, command."""
    smi = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        q = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,temperature.gpu"
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True,
                             text=True, timeout=20).stdout.strip() or None
    cuda = torch.cuda.is_available()
    nccl = None
    with contextlib.suppress(Exception):             # a tuple on recent torch, an int on older ones
        v = torch.cuda.nccl.version() if cuda else None
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else v
    props = torch.cuda.get_device_properties(0) if cuda else None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([sys.executable, *argv]), "torch": torch.__version__,
            "cuda": torch.version.cuda, "triton": getattr(triton, "__version__", None),
            "nccl": nccl, "gpu": torch.cuda.get_device_name() if cuda else None,
            "sms": getattr(props, "multi_processor_count", None), "l2_bytes": getattr(props, "L2_cache_size", None),
            "nvidia_smi": smi, "device": "cuda" if cuda else "cpu"}


class Doc:
    """One part's JSON: loaded if DIR already has it (decode is run once per model), rewritten
    after every item so a timeout keeps what was measured."""

    def __init__(self, path: Path, part: str, argv: list[str], smoke: bool):
        self.path = path
        old = json.loads(path.read_text()) if path.is_file() else {}
        self.d = {"format": f"tpsim-gpu-{part}", "smoke": smoke, "profile": PROFILE,
                  "provenance": provenance(argv), "skipped": old.get("skipped", []), "items": old.get("items", {}),
                  # the earlier runs whose items this file keeps (decode: one run per model)
                  "provenance_earlier": old.get("provenance_earlier", []) + ([old["provenance"]] if old else [])}

    def put(self, key: str, value: dict) -> None:
        self.d["items"][key] = value
        write_json_atomic(self.path, self.d)

    def skip(self, what: str) -> None:
        print(f"skipped: {what}", flush=True)
        if what not in self.d["skipped"]:
            self.d["skipped"].append(what)
        write_json_atomic(self.path, self.d)


def guarded(doc: Doc, key: str, fn, *a) -> dict | None:
    """fn(*a) -> an item; any failure is recorded as the item's error and the next item runs."""
    t0 = time.perf_counter()
    try:
        item = fn(*a)
    except Exception as e:  # noqa: BLE001 - one item's failure must not end the part
        item = {"error": f"{type(e).__name__}: {str(e)[:600]}"}
    item["wall_s"] = round(time.perf_counter() - t0, 2)
    doc.put(key, item)
    print(f"{key}: {_summary(item)}", flush=True)
    return item


def _summary(item: dict) -> str:
    if "error" in item:
        return "ERROR " + item["error"][:200]
    parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in item.items()
             if isinstance(v, (int, float, str)) and k != "wall_s"]
    parts += [f"{k} {'ok' if v['ok'] else 'FAIL'}" for k, v in item.items() if isinstance(v, dict) and "ok" in v]
    return ", ".join(parts + [f"{k} ERROR" for k, v in item.items() if isinstance(v, dict) and "error" in v])


def trace_events(prof) -> list[dict]:
    """The profiler's Chrome trace events (ts, dur in µs): GPU kernels are cat "kernel" (args
    grid, block, stream, correlation), launches cat "cuda_runtime" / "cuda_driver"."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        return [e for e in json.loads(Path(f.name).read_text())["traceEvents"] if e.get("ph") == "X"]


def windows(events: list[dict], prefix: str) -> dict[str, list[dict]]:
    """label -> the kernels that ran inside record_function(prefix + label) (each range ends in a
    synchronize, so its kernels fall inside it); on CPU the C++ kernels and extern calls."""
    rng = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith(prefix)]
    ker = [e for e in events if e.get("cat") == "kernel" or (e.get("cat") == "cpu_op" and
           ("cpp_fused" in e["name"] or e["name"] in ("aten::mm", "aten::addmm", "aten::bmm")))]
    # a GPU kernel is placed by the host call that launched it (same correlation id: cudaLaunchKernel,
    # cuLaunchKernelEx, cudaGraphLaunch for a graph's kernels), which lies inside the range for sure
    launched = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    at = [(launched.get(k.get("args", {}).get("correlation"), k["ts"]), k) for k in ker]
    return {r["name"][len(prefix):]: sorted((k for t, k in at if r["ts"] <= t <= r["ts"] + r["dur"]),
                                            key=lambda k: k["ts"]) for r in rng}


def kernel_row(e: dict) -> dict:
    a = e.get("args", {})
    return {"name": e["name"], "us": e["dur"], "grid": a.get("grid"), "block": a.get("block"),
            "regs": a.get("registers per thread"), "smem": a.get("shared memory")}


def init_profiler_for_graphs() -> None:
    """Start and stop the profiler once before any CUDA graph is captured: a graph made before the
    profiler's first use can replay untraced (pytorch/pytorch#100441, the workaround it ships as
    torch.profiler._utils._init_for_cuda_graphs)."""
    if torch.cuda.is_available():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]):
            pass


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def linear_shapes(model: str, tp: int) -> dict[str, tuple[int, int]]:
    """name -> (n, k) of one rank's decode linears (weight [n, k]); the head replicated, as the reference."""
    s = get_model(model).shard(tp)
    return {"qkv": (s.qkv_dim, s.hidden), "wo": (s.hidden, s.q_dim),
            "w13": (2 * s.ffn, s.hidden), "w2": (s.hidden, s.ffn), "head": (s.vocab, s.hidden)}


def time_calls(fn, calls: int, graph: bool) -> float:
    """µs per call of `calls` back-to-back fn(i): replayed as one CUDA graph (median of 5 replays),
    or eager (CUDA events; perf_counter on CPU)."""
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        return (time.perf_counter() - t0) / calls * 1e6
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    g = None
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                fn(i)
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if g is not None:
            g.replay()
        else:
            for i in range(calls):
                fn(i)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)
