"""`tpsim bench --collective symm-mem` (hw/symm_mem.py): the option, its refusals before any process
starts, the --stack presets mapped onto it, the per-call kernel rule (the simulator's own function,
sim.price.comm.custom_allreduce.symm_mem_pick, behind torch's dtype / alignment / buffer limits), the buffer
sizing, and one real 2-rank gloo run of the plumbing (the kernel each all-reduce ran, in its record).
The symmetric-memory kernels themselves need a GPU: bench/gpu_checks.sh STEPS=symm."""
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from tpsim.commands.bench import bench_cmd, check_cmd  # noqa: E402
from tpsim.hw import symm_mem as hs  # noqa: E402
from tpsim.hw.bench import stack_harness_options  # noqa: E402
from tpsim.hw.run_config import RunConfig, check_collective  # noqa: E402
from tpsim.sim.price.comm import custom_allreduce as car  # noqa: E402
from tpsim.sim.stack.impls import ENGINE_COLLECTIVES  # noqa: E402
from tpsim.sim.stack.presets import PRESETS  # noqa: E402

MiB = 1 << 20
pytestmark = pytest.mark.hw


def test_the_option_parses_and_refuses_what_cannot_run():
    assert "symm-mem" in CliRunner().invoke(bench_cmd, ["--help"]).output
    assert RunConfig(collective="symm-mem", device="cuda", backend="nccl").stack().collective == "symm-mem"
    assert RunConfig().stack().collective == "gloo"               # auto: the backend's own
    res = CliRunner().invoke(bench_cmd, ["--collective", "symm-mem", "--device", "cpu", "--model", "tiny"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    err = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(err) == 1 and "--collective symm-mem needs --device cuda --backend nccl" in err[0], res.output
    # an explicit --collective beats the preset's fallback on CPU: refused too
    res = CliRunner().invoke(bench_cmd, ["--stack", "vllm", "--collective", "symm-mem", "--device", "cpu"])
    assert res.exit_code == 2 and "gloo on CPU has none" in res.output
    assert CliRunner().invoke(bench_cmd, ["--collective", "nope", "--device", "cpu"]).exit_code == 2
    res = CliRunner().invoke(check_cmd, ["--collective", "symm-mem", "--device", "cpu"])       # check too
    assert res.exit_code == 2 and "needs --device cuda --backend nccl" in res.output
    with pytest.raises(ValueError, match="runs eager passes only"):      # no GPU needed for this check
        check_collective("symm-mem", "nccl", "cuda", compile=True)
    with pytest.raises(ValueError, match="needs --device cuda --backend nccl"):
        check_collective("symm-mem", "gloo", "cuda", compile=False)
    check_collective("auto", "gloo", "cpu", compile=True)               # the default always runs


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_maps_its_all_reduce(name):
    """An engine's own all-reduce becomes symm-mem on a GPU (eager: the presets run filled KV, so
    uncompiled), the backend's own on CPU with a note; NCCL presets leave the option unset."""
    values = PRESETS[name].values
    engine = values.get("collective", "auto") in ENGINE_COLLECTIVES
    gpu, gnotes = stack_harness_options(values, "cuda")
    cpu, cnotes = stack_harness_options(values, "cpu")
    assert "collective" not in cpu and "dtype" not in cpu
    assert gpu.get("collective") == ("symm-mem" if engine else None)
    assert gpu.get("dtype") == ("bf16" if engine else None)          # vLLM's communicator is bf16-only
    assert any("--collective symm-mem" in n for n in gnotes) == engine
    assert any("symmetric-memory" in n and "gloo measured here" in n for n in cnotes) == engine
    assert engine == (name.partition("@")[0] in ("vllm", "sglang", "trtllm"))


def test_a_compiled_preset_keeps_nccl():
    """A stack file that compiles over a static cache with an engine all-reduce: the compiled passes
    run NCCL (the harness runs symm-mem eager only), with a note."""
    values = {"attention": "flash", "kv": "static", "compile_prefill": True, "compile_decode": True,
              "collective": "vllm-custom"}
    opts, notes = stack_harness_options(values, "cuda")
    assert opts["compile"] is True and "collective" not in opts and "dtype" not in opts
    assert any("eager passes only: NCCL measured" in n for n in notes)
    opts, notes = stack_harness_options(values | {"collective": "symm-mem"}, "cuda")
    assert "collective" not in opts and any(n.startswith("collective symm-mem: ") for n in notes)


def test_hw_calls_the_simulators_rule():
    """One definition: the harness's per-call rule is sim's symm_mem_pick wherever torch's own limits
    let a message through, for every (bytes, world size, multicast) of a grid; and sim's own pick
    (family symm-mem) is that function of the hardware's multicast flag."""
    assert hs.symm_mem_pick is car.symm_mem_pick
    sizes = [16, 4096, 256 * 1024, MiB // 2, 8 * MiB, 32 * MiB, 32 * MiB + 16, 64 * MiB, 64 * MiB + 4, 128 * MiB]
    kernels = set()
    for n in (1, 2, 3, 4, 6, 8, 16):
        for multicast in (False, True):
            for single_node in (False, True):
                hw = car.Hardware(True, True, multicast, single_node)
                for b in sizes:
                    want = car.symm_mem_pick(b, n, multicast, single_node)
                    assert car.pick(ENGINE_COLLECTIVES["symm-mem"], b, n, hw) == want
                    for dtype in hs.TORCH_DTYPES:
                        got = hs.dispatch(b, n, multicast=multicast, single_node=single_node, dtype=dtype,
                                          capacity_bytes=1 << 40)
                        assert got == want, (b, n, multicast, single_node, dtype)
                    kernels.add(want.kernel)
    assert kernels == {"nccl", "multimem", "symm-twoshot"}        # the grid reaches every branch
    assert car.symm_mem_pick(8 * MiB, 8, True).kernel == "multimem"
    assert car.symm_mem_pick(8 * MiB, 2, True).kernel == "symm-twoshot"
    assert car.symm_mem_pick(33 * MiB, 4, True).kernel == "nccl"              # 32 MiB max at 4 ranks
    assert "no entry for 1 ranks" in car.symm_mem_pick(4096, 1, True).note


def test_torchs_own_limits_come_first():
    ok = dict(n=8, multicast=True, single_node=True)
    fp16 = hs.dispatch(4096, dtype="fp16", capacity_bytes=1 << 30, **ok)
    assert fp16.kernel == "nccl" and "bf16/fp32 only" in fp16.note          # AT_DISPATCH_FLOAT_AND_BFLOAT16
    odd = hs.dispatch(4098, dtype="bf16", capacity_bytes=1 << 30, **ok)
    assert odd.kernel == "nccl" and "multiple of 4 bytes" in odd.note
    big = hs.dispatch(8192, dtype="bf16", capacity_bytes=4096, **ok)
    assert big.kernel == "nccl" and "4096-byte symmetric buffer" in big.note
    assert hs.dispatch(4096, dtype="bf16", capacity_bytes=4096, **ok).kernel == "multimem"   # exactly fits
    assert set(hs.KERNEL_OPS) == {"multimem", "symm-twoshot"}       # every kernel the rule names has its op


def test_the_buffer_holds_the_largest_message_that_goes_through_it():
    # 8 ranks (64 MiB max): 100 MiB goes to NCCL, so 8 MiB sizes the buffer
    assert car.symm_mem_buffer_bytes([1000, 8 * MiB, 100 * MiB], 8) == 8 * MiB
    assert car.symm_mem_buffer_bytes([1000], 8) == 1008                    # up to 16 B: 63 * 16
    assert car.symm_mem_buffer_bytes([33 * MiB], 4) == 0                   # above the 32 MiB at 4 ranks
    assert car.symm_mem_buffer_bytes([4096], 1) == 0                       # no size at 1 rank: no buffer
    assert car.symm_mem_buffer_bytes([], 8) == 0


def test_every_torch_op_the_kernels_name_is_registered():
    """The ops (and the in-place schemas hw.symm_mem calls) exist in the installed torch, CPU build too."""
    import torch
    for op in hs.KERNEL_OPS.values():
        schema = str(getattr(torch.ops.symm_mem, op).default._schema)
        assert "Tensor(a!) input, str reduce_op, str group_name) -> Tensor(a!)" in schema, schema


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_bench_records_the_kernel_each_all_reduce_ran_on_gloo():
    """--stack sglang on CPU: the backend's own all-reduce, a note saying so, and every all-reduce
    record naming the kernel it ran (gloo)."""
    res = CliRunner().invoke(bench_cmd, ["--stack", "sglang", "--model", "tiny", "--tp", "2", "--prompt", "16",
                                         "--gen", "3", "--device", "cpu", "--backend", "gloo", "--repeats", "1",
                                         "--warmup", "0", "--schedule", "standard", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    st = d["stack"]
    assert st["collective"] == "auto" and st["collective_notes"] == []
    assert any("gloo measured here" in n for n in st["notes"])
    assert st["collective_kernels"] and set(st["collective_kernels"].values()) == {"gloo"}
    recs = [r for r in d["schedules"][0]["records"] if r["kind"] == "all_reduce" and r["stream"] == "comm"]
    assert recs and {r["kernel"] for r in recs} == {"gloo"} and {r["rank"] for r in recs} == {0, 1}
    assert {r["phase"] for r in recs} == {"prefill", "decode"}


def test_gpu_step_wiring_on_cpu(tmp_path):
    """bench/gpu_checks.sh SMOKE=1 STEPS=symm: only step S runs; its JSON has provenance, says what
    the CPU skipped, and holds tpsim's prices per size that the GPU run times against."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, SMOKE="1", STEPS="symm", OUT=str(tmp_path),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")     # python3 = this one
    r = subprocess.run(["bash", str(root / "bench" / "gpu_checks.sh")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    log = (tmp_path / "log.txt").read_text()
    assert log.count("= rc 0") == 1 and "gpu_symm_mem.py" in log and "cli.py" not in log, log[-2000:]
    d = json.loads((tmp_path / "symm-mem.json").read_text())
    assert d["format"] == "tpsim-gpu-symm-mem" and d["smoke"] is True and d["profile"] == "h200-sxm"
    assert {"date", "command", "torch", "gpu", "device"} <= set(d["provenance"]) and d["provenance"]["device"] == "cpu"
    assert d["skipped"] and "no CUDA" in d["skipped"][0]
    one = d["items"][f"bf16:{MiB}"]
    assert one["timed"] is False and one["sim_pick_n2"] == "symm-twoshot" and one["sim_pick_n8"] == "multimem"
    assert 0 < one["sim_copies_us"] < one["sim_multimem_n8_us"]          # the copies are part of the price
    assert d["items"][f"bf16:{64 * MiB}"]["sim_pick_n4"] == "nccl"        # above the 32 MiB at 4 ranks


def test_vllm_hands_a_message_to_symmetric_memory_only_in_bf16():
    """vLLM's dispatch above custom AR's SM90 max (256 KiB at 8 ranks): SymmMemCommunicator (multimem)
    for bf16, NCCL for fp16 (its self.dtype is bfloat16), saying why; the symm-mem family itself takes
    torch's bf16/fp32; at exactly the max size symmetric memory is refused (inp_size < max_size)."""
    from tpsim.sim.stack.impls import engine_collective
    hw8 = car.Hardware(full_nvlink=True, p2p=True, multicast=True, single_node=True)
    vllm = engine_collective("vllm-custom")
    assert car.pick(vllm, 1 * MiB, 8, hw8, dtype="bf16").kernel == "multimem"
    fp16 = car.pick(vllm, 1 * MiB, 8, hw8, dtype="fp16")
    assert fp16.kernel == "nccl" and "symmetric memory takes bf16 only" in fp16.note
    symm = engine_collective("symm-mem")
    assert car.pick(symm, 1 * MiB, 8, hw8, dtype="fp32").kernel == "multimem"
    assert "take bf16/fp32 only" in car.pick(symm, 1 * MiB, 8, hw8, dtype="fp16").note
    assert car.symm_mem_pick(64 * MiB, 8, True).kernel == "nccl"
    assert car.symm_mem_pick(64 * MiB - 16, 8, True).kernel == "multimem"


def test_multicast_needs_a_hopper_profile_where_it_says():
    """h100-sxm (9.0, NVSwitch with NVLS) has multicast; the same box stating compute capability 8.0
    has not (symmetric memory then falls back to NCCL, as vLLM's communicator disables itself)."""
    import dataclasses
    from tpsim.sim.hardware.profile import load_profile
    h100 = load_profile("h100-sxm")
    assert car.hardware(h100, 8, 8).multicast
    not_hopper = dataclasses.replace(h100, compute_capability=8.0)
    assert not car.hardware(not_hopper, 8, 8).multicast
    assert not car.hardware(load_profile("a100-sxm"), 8, 8).multicast
