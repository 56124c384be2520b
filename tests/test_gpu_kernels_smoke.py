"""bench/gpu_kernels.py in --smoke mode on CPU, run as bench/gpu_checks.sh runs it (SMOKE=1 STEPS=kernels):
the wiring of the GPU script's first step. Each part's JSON must have its provenance, say what the CPU
skipped, and hold the items the GPU run fills in: the real decode shapes with tpsim's prices (linear),
a compiled 1-layer toy step with its kernels and Inductor's output code (decode), the probe kernel
built for sm_90 in every shape the GPU run launches (cosched). Correctness only, no timing asserted."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.hw

ROOT = Path(__file__).resolve().parent.parent
PROVENANCE = {"date", "command", "torch", "cuda", "triton", "nccl", "gpu", "nvidia_smi", "device"}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu-checks")
    env = dict(os.environ, SMOKE="1", STEPS="kernels", OUT=str(out), TRITON_DEFAULT_FP_FUSION="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")     # python3 = this one
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_checks.sh")], env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    log = (out / "log.txt").read_text()
    assert log.count("= rc 0") == 3 and "cli.py" not in log, log[-2000:]     # the three parts, no harness step
    assert (out / "kernels.tgz").is_file()
    return out / "kernels"


def _doc(kernels: Path, part: str) -> dict:
    d = json.loads((kernels / f"{part}.json").read_text())
    assert d["format"] == f"tpsim-gpu-{part}" and d["smoke"] is True and d["profile"] == "h200-sxm"
    assert PROVENANCE <= set(d["provenance"]) and d["provenance"]["device"] == "cpu"
    assert d["skipped"] and all("no CUDA" in s or "no Triton" in s for s in d["skipped"]), d["skipped"]
    assert not [k for k, v in d["items"].items() if "error" in v], d["items"]
    return d


def test_linear_prices_the_real_shapes_and_times_the_toy(kernels):
    items = _doc(kernels, "linear")["items"]
    w13 = items["llama-3.1-70b:tp8:w13:m1"]          # the reference's fused w1 [2 ffn, hidden] of one TP8 rank
    assert (w13["n"], w13["k"], w13["timed"]) == (7168, 8192, False)
    assert items["llama-3.1-8b:tp1:head:m1"]["n"] == 128256 and items["llama-3.1-70b:tp8:qkv:m1"]["n"] == 1280
    # at m 1 the compiled step runs Inductor's generated GEMV, not cuBLAS: tpsim prices the two apart
    assert w13["sim_compiled_us"] != w13["sim_cublas_us"] > 0
    toy = items["toy-512:tp1:w13:m4"]
    assert toy["eager_us"] > 0 and toy["kernels"] and "graph_us" not in toy


def test_decode_compiles_the_toy_and_keeps_its_code(kernels):
    d = _doc(kernels, "decode")
    assert d["inductor_flags"]["coordinate_descent_tuning"] is True
    it = d["items"]["toy-512:tp1:b2"]
    assert it["step"]["layers"] == 1 and it["step_0layers"]["layers"] == 0
    names = [k["name"] for k in it["step"]["kernels"]]
    assert any("cpp_fused" in n for n in names) and len(names) > len(it["step_0layers"]["kernels"])
    assert it["sim_layer_us"] > 0 and it["sim_kernels"]
    for f in it["step"]["output_code"]:
        assert "def call(" in (kernels / f).read_text()
    assert it["step"]["output_code"]
    # torch.compile folds wo's [b, 1, H*D] input into one mm (hw/derive/fake_views.py): the 1-layer step calls
    # 5 extern mm's (qkv, wo, w13, w2, the head) and no bmm over an expanded weight
    code = (kernels / it["step"]["output_code"][0]).read_text()
    assert (code.count("extern_kernels.mm("), code.count("extern_kernels.bmm(")) == (5, 0)


def test_cosched_builds_every_probe_for_sm90(kernels):
    pytest.importorskip("triton")
    built = _doc(kernels, "cosched")["items"]["offline_compile"]
    assert {k: v.get("ok") for k, v in built.items() if k != "wall_s"} == {
        "16x1w": True, "24x1w": True, "16x1w-cluster4": True, "24x1w-cluster4": True, "24x16w": True}


def test_bad_arguments_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_kernels.py"), "linear", "--models", "nope",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "use MODEL:TP" in r.stderr


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return __import__(name)     # the bench scripts import each other by file name
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_windows_place_a_kernel_by_the_call_that_launched_it():
    rec = _bench("gpu_record")
    ev = [{"ph": "X", "cat": "user_annotation", "name": "tpsim:a", "ts": 0, "dur": 50},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 3, "args": {"correlation": 7}},
          # launched at 5 (inside a), runs at 60 (after a's range): a's
          {"ph": "X", "cat": "kernel", "name": "k7", "ts": 60, "dur": 4, "args": {"correlation": 7}},
          # no launch record: placed by its own start, 70, outside a
          {"ph": "X", "cat": "kernel", "name": "k8", "ts": 70, "dur": 4, "args": {"correlation": 8}}]
    assert [k["name"] for k in rec.windows(ev, "tpsim:")["a"]] == ["k7"]


def test_read_trial_delay_clusters_and_slowdown(monkeypatch):
    pytest.importorskip("triton")
    cos = _bench("gpu_cosched")
    monkeypatch.setattr(cos, "CALLS", 4)            # 4 compute calls; the gate is the event after call 2
    k = lambda name, ts, dur: {"name": name, "ts": ts, "dur": dur, "args": {}}  # noqa: E731
    kers = [k("gemm", 0, 10), k("gemm", 10, 10),    # [0, 10), [10, 20): the gate kernel ends at 20
            k("gemm", 20, 14), k("gemm", 34, 14),   # [20, 34), [34, 48): beside the probe, 14 each
            k("tpsim_probe", 23, 20)]               # the probe [23, 43): ready at 20, started at 23
    t0 = [1000, 1000, 1500, 1000, 2000, 2000, 2000, 2000]     # ns; 8 CTAs = 2 clusters of 4
    buf = torch.tensor([[t, t + 20_000, sm] for t, sm in zip(t0, [0, 1, 2, 3, 10, 11, 12, 13])])
    r = cos.read_trial(kers, {}, buf, "16x1w-cluster4", "gate", alone_us=10.0)
    assert r["kernels_per_call"] == 1 and r["start_delay_us"] == 3
    assert r["beside_us"] == [14, 14] and r["slowdown"] == pytest.approx(1.4)      # 14 / 10
    assert r["cta_start_spread_ns"] == 1000 and r["cluster_smids"] == [[0, 1, 2, 3], [10, 11, 12, 13]]


def test_the_report_reads_the_smoke_runs_documents(kernels):
    """bench/gpu_report.py on what the smoke run wrote: linear says it is untimed; decode compares the
    toy's per-layer kernels with tpsim's and names the smallest ones."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_report.py"), str(kernels)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "linear: untimed (--smoke run)" in r.stdout
    assert "decode toy-512:tp1:b2: layer" in r.stdout and "extern (cuBLAS" in r.stdout
    assert "smallest" in r.stdout and "tpsim's floor" in r.stdout
