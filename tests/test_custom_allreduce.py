"""Engine all-reduce kernels (sim/price/comm/custom_allreduce.py): each engine's kernel choice, its refusals and
NCCL fallbacks, and hand-computed toy prices of the mechanism floor + remote bytes / rate."""
import dataclasses
import json
from types import SimpleNamespace as P

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.commands.predict import note_lines
from tpsim.sim.price.comm import custom_allreduce as car
from tpsim.sim.price.cost import CostModel
from tpsim.calib.custom_allreduce_fit import fit_group
from tpsim.sim.stack.impls import ATTENTION_IMPLS, ENGINE_COLLECTIVES as E
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack

# toy constants: integer floors (us) and rates (GB/s) so every price below is exact arithmetic
TOY = {"vllm": {"groups": {
           "4": {"floor_us": 4, "oneshot_gbps": 100, "twoshot_gbps": 50, "twoshot_extra_us": 1, "eager_floor_us": 20},
           "8": {"floor_us": 6, "oneshot_gbps": 100, "twoshot_gbps": 100, "eager_floor_us": 20}}},
       "trtllm": {"groups": {"8": {"floor_us": 3, "oneshot_gbps": 100, "twoshot_gbps": 50}}}}


def toy(name: str):
    p = load_profile(name)
    raw = json.loads(json.dumps(p.raw))
    raw["collectives"]["custom_allreduce"] = TOY
    return dataclasses.replace(p, raw=raw)


def us(cm, nbytes, group, mode="graph", width=None):
    t, path = cm.price("all_reduce", nbytes, group, mode, width=width)
    return round(t * 1e6, 6), path


def test_vllm_one_shot_two_shot_switch_toy():
    """vLLM at 4 ranks with full NVLink: 1-stage below 512 KiB, 2-stage from it (custom_all_reduce.cuh).
    1-stage: floor 4 + 3 peers x S / 100 GB/s; 2-stage: floor 4 + middle barrier 1 + 2*3/4 S / 50 GB/s."""
    cm = CostModel(toy("h100-sxm"), Stack(collective="vllm-custom"))
    # 100000 B: 4 + 300000 B / 100 GB/s (3 us) = 7 us
    assert us(cm, 100_000, 4) == (7.0, "vllm-custom:oneshot")
    # 524272 B (the last 16-byte size below 512 KiB): 4 + 1572816 / 100e9 s (15.72816 us) = 19.72816 us
    assert us(cm, 524_272, 4) == (19.72816, "vllm-custom:oneshot")
    # 524288 B: 4 + 1 + 786432 / 50e9 s (15.72864 us) = 20.72864 us
    assert us(cm, 524_288, 4) == (20.72864, "vllm-custom:twoshot")
    # 1 MB: 4 + 1 + 1.5 MB / 50 GB/s (30 us) = 35 us
    assert us(cm, 1_000_000, 4) == (35.0, "vllm-custom:twoshot")
    # 6 ranks, between the fitted 4 and 8: floor 5, one-shot 100 GB/s: 5 + 5 x 100000 / 100e9 (5 us) = 10 us
    assert us(cm, 100_000, 6) == (10.0, "vllm-custom:oneshot")
    # eager: max(eager floor 20, 7 us + the copy-in): the host-bound call, 20 us
    assert us(cm, 100_000, 4, "eager") == (20.0, "vllm-custom:oneshot+eager(copy-in, host floor)")


def test_vllm_above_max_size_falls_back_to_nccl_and_says_so():
    """A100 (no NVLS, so no symmetric memory): at or above the 8 MiB max size vLLM runs pynccl: NCCL's
    bare kernel (no functional-collective copy), the reason in notes."""
    prof = toy("a100-sxm")
    cm = CostModel(prof, Stack(collective="vllm-custom"))
    nccl = CostModel(prof, Stack())
    below = 8 * 1024 * 1024 - 16
    assert us(cm, below, 8)[1] == "vllm-custom:twoshot"
    t, path = cm.price("all_reduce", 8 * 1024 * 1024, 8, "graph")
    bare, bare_path = nccl._device_price("all_reduce", 8 * 1024 * 1024, 8, "graph", "nccl", "node")
    assert t == pytest.approx(bare + prof.graph_nccl_node_s)
    assert path.endswith("(NCCL for vllm-custom)") and "graph_extra" not in path
    assert cm.notes == ("vLLM: message of 8 MiB is at or above custom allreduce's max size 8 MiB; falls back to NCCL",)
    # not a multiple of 16 bytes: NCCL as well
    assert us(cm, 8, 8)[1].endswith("(NCCL for vllm-custom)")


def test_vllm_on_nvls_box_hands_large_messages_to_symmetric_memory():
    """H100 (SM90 + NVLS): vLLM's custom all-reduce stops at 256 KiB at 8 ranks
    (CUSTOM_ALL_REDUCE_MAX_SIZES), then symmetric memory's multimem kernel up to 64 MiB, then NCCL."""
    hw = car.hardware(load_profile("h100-sxm"), 8, 8)
    assert car.pick(E["vllm-custom"], 256 * 1024 - 16, 8, hw).kernel == "oneshot"
    assert car.pick(E["vllm-custom"], 256 * 1024, 8, hw).kernel == "multimem"
    assert car.pick(E["vllm-custom"], 64 * 1024 * 1024 + 16, 8, hw).kernel == "nccl"
    assert car.pick(E["symm-mem"], 1024, 2, hw).kernel == "symm-twoshot"        # two_shot at 2 ranks
    assert car.pick(E["symm-mem"], 33 * 1024 * 1024, 4, hw).kernel == "nccl"     # above 32 MiB at 4 ranks
    assert car.pick(E["symm-mem"], 1024, 8, car.hardware(load_profile("a100-sxm"), 8, 8)).kernel == "nccl"


def test_pcie_box_refuses_custom_allreduce_above_two_gpus():
    """l40s-pcie: vLLM and SGLang refuse their kernel on more than two PCIe-only GPUs (NCCL, with the
    engine's warning as a note); two GPUs run it; TensorRT-LLM needs NVLink at any size."""
    prof = load_profile("l40s-pcie")
    nccl = CostModel(prof, Stack())
    for impl, engine in (("vllm-custom", "vLLM"), ("sglang-custom", "SGLang")):
        cm = CostModel(prof, Stack(collective=impl))
        t, path = cm.price("all_reduce", 65536, 4, "graph")
        # NCCL captured in the graph: its kernel plus NCCL's graph-mixing node (collectives.graph_nccl_node_us)
        assert t == pytest.approx(nccl._device_price("all_reduce", 65536, 4, "graph", "nccl", "node")[0]
                                  + prof.graph_nccl_node_s)
        assert path == f"table+graph_nccl_node (NCCL for {impl})"
        assert cm.notes == (f"{engine}: custom allreduce is disabled because it's not supported on more than two "
                            "PCIe-only GPUs; falls back to NCCL",)
        assert cm.price("all_reduce", 65536, 2, "graph")[1] == f"{impl}:oneshot"
    trt = CostModel(prof, Stack(collective="trtllm-oneshot"))
    assert trt.price("all_reduce", 65536, 2, "graph")[1] == "table+graph_nccl_node (NCCL for trtllm-oneshot)"


def test_predict_on_pcie_tp4_says_vllm_fell_back():
    r = CliRunner().invoke(main, ["predict", "--model", "llama-3.1-8b", "--profile", "l40s-pcie", "--tp", "4",
                                  "--batch", "1", "--prompt", "32", "--gen", "4", "--collective", "vllm-custom",
                                  "--json"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.output)["schedules"][0]["notes"]
    assert "vLLM: custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs; " \
           "falls back to NCCL" in notes


def test_trtllm_auto_lookup_table_toy():
    """TensorRT-LLM AUTO at TP 8, hidden 4096 (customAllReduceUtils.h SM90 table): 64 tokens one-shot,
    128 NCCL, 256 two-shot, 1024 NCCL. One-shot: floor 3 + 7 peers x S / 100 GB/s; two-shot:
    3 + 2*7/8 S / 50 GB/s."""
    cm = CostModel(toy("h100-sxm"), Stack(collective="trtllm-auto"))
    row = 4096 * 2
    # 64 tokens = 524288 B: 3 + 3670016 / 100e9 s (36.70016 us) = 39.70016 us
    assert us(cm, 64 * row, 8, width=4096) == (39.70016, "trtllm-auto:oneshot")
    assert us(cm, 128 * row, 8, width=4096)[1].endswith("(NCCL for trtllm-auto)")
    # 256 tokens = 2097152 B: 3 + 3670016 / 50e9 s (73.40032 us) = 76.40032 us
    assert us(cm, 256 * row, 8, width=4096) == (76.40032, "trtllm-auto:twoshot")
    assert us(cm, 1024 * row, 8, width=4096)[1].endswith("(NCCL for trtllm-auto)")
    # forced TWOSHOT with fewer tokens than ranks runs ONESHOT (4 tokens < TP 8)
    two = CostModel(toy("h100-sxm"), Stack(collective="trtllm-twoshot"))
    assert us(two, 4 * row, 8, width=4096)[1] == "trtllm-twoshot:oneshot"


def test_other_collectives_of_an_engine_run_on_nccl():
    prof = load_profile("h100-sxm")
    a = CostModel(prof, Stack(collective="vllm-custom")).price("all_gather", 65536, 8, "graph")
    assert a == CostModel(prof, Stack()).price("all_gather", 65536, 8, "graph")


def test_fit_recovers_the_mechanism_from_its_own_points():
    """Points made from floor 4 us, one-shot 100 GB/s, two-shot 50 GB/s + 1 us at 4 ranks: the fit
    (even-log2 sizes only) gives them back, to the 0.008 us the 256 B point's own bytes add to its floor
    (3 x 256 B / 100 GB/s)."""
    hw = car.Hardware(True, True, False, True)

    def kernel_of(b):
        return car.pick(E["vllm-custom"], b, 4, hw).kernel
    pts = []
    for k in range(8, 23):
        b = 2 ** k
        kern = kernel_of(b)
        extra = 1.0 if kern == "twoshot" else 0.0
        rate = 100e3 if kern == "oneshot" else 50e3           # bytes per us
        pts.append((b, 4.0 + extra + car.remote_bytes(kern, b, 4) / rate))
    f = fit_group(pts, kernel_of, 4)
    assert (f["floor_us"], f["oneshot_gbps"], f["twoshot_gbps"], f["twoshot_extra_us"]) == (4.008, 100.1, 50.0, 0.992)
    assert all(b in f["fit_bytes"] for b in (256, 1024, 4096)) and 512 not in f["fit_bytes"]


def test_one_registry_for_stack_names():
    assert "flashinfer" in ATTENTION_IMPLS and Stack(attention="fa3").attention == "fa3"
    with pytest.raises(ValueError, match="unknown attention"):
        Stack(attention="paged")
    assert set(E) == {"vllm-custom", "sglang-custom", "trtllm-auto", "trtllm-oneshot", "trtllm-twoshot", "symm-mem",
                      "symm-mem-multimem"}


def test_a_direct_multimem_call_runs_in_place_at_every_size():
    """symm-mem-multimem: a model file calling torch's multimem_all_reduce_ on its symmetric buffer. Toy
    h100-sxm (vLLM floor 6 us at 8 ranks; NVLS busbw 480 GB/s -> algbw 480 x 8 / 14 = 1920/7 GB/s):
    1,920,000 B costs 6 + 7 = 13 us, no copies; vLLM's symm-mem path pays the two copies on top. No
    size cap: 128 MiB still runs multimem (vLLM's dispatch hands it to NCCL at 64 MiB)."""
    prof = toy("h100-sxm")
    direct = CostModel(prof, Stack(collective="symm-mem-multimem", dtype="bf16"))
    vllm = CostModel(prof, Stack(collective="symm-mem", dtype="bf16"))
    assert us(direct, 1_920_000, 8) == (13.0, "symm-mem-multimem:multimem-inplace")
    copy = max(prof.launch_s["graph"], 2 * 1_920_000 / (prof.mem_bytes_per_s * prof.memory_efficiency(3_840_000)))
    assert us(vllm, 1_920_000, 8) == (pytest.approx(13.0 + 2e6 * copy), "symm-mem:multimem")
    assert us(direct, 128 << 20, 8)[1] == "symm-mem-multimem:multimem-inplace"
    assert us(vllm, 128 << 20, 8)[1].endswith("(NCCL for symm-mem)")
    # 2 ranks (h100-sxm's own constants: the toy has none at 2): vLLM runs two-shot there, a direct caller multimem
    h100 = load_profile("h100-sxm")
    assert us(CostModel(h100, Stack(collective="symm-mem", dtype="bf16")), 1024, 2)[1] == "symm-mem:symm-twoshot"
    assert us(CostModel(h100, Stack(collective="symm-mem-multimem", dtype="bf16")), 1024, 2)[1] == \
        "symm-mem-multimem:multimem-inplace"


def test_a_direct_multimem_call_has_nothing_to_fall_back_to():
    with pytest.raises(ValueError, match="needs NVLS multicast"):
        CostModel(load_profile("a100-sxm"), Stack(collective="symm-mem-multimem", dtype="bf16")).price(
            "all_reduce", 16384, 8, "graph")
    with pytest.raises(ValueError, match="bf16/fp32 only.*give --dtype bf16"):
        CostModel(load_profile("h100-sxm"), Stack(collective="symm-mem-multimem")).price("all_reduce", 16384, 8, "graph")
    r = CliRunner().invoke(main, ["collective", "--profile", "a100-sxm", "--group", "8", "--impl", "symm-mem-multimem"])
    assert r.exit_code == 2 and r.output.startswith("Error: symm-mem-multimem: ")


def test_multimem_launches_a_block_per_16_kib_of_each_ranks_slice():
    """torch init_elementwise_launch_config, splits = n, at most 8 blocks of 1024 x 16 B: a rank's slice of
    S / n bytes takes ceil(slice / 16 KiB) blocks, at least 1."""
    assert [car.multimem_blocks(kib << 10, 8) for kib in (16, 128, 256, 1024, 65536)] == [1, 1, 2, 8, 8]
    assert [car.multimem_blocks(kib << 10, 2) for kib in (16, 32, 64)] == [1, 1, 2]


def test_collective_command_prices_each_impl():
    r = CliRunner().invoke(main, ["collective", "--profile", "l40s-pcie", "--group", "4", "--impl", "vllm-custom",
                                  "--bytes", "64K", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["rows"][0]["path"] == "table+graph_nccl_node (NCCL for vllm-custom)" and out["impl"] == "vllm-custom"
    assert out["notes"][0].startswith("vLLM: custom allreduce is disabled")


def test_predict_table_says_a_fallback_shared_by_every_schedule_once():
    """The table's notes: the stack's fallback holds for all five default schedules, so it is one
    `all schedules:` line, not five `schedule:` lines."""
    r = CliRunner().invoke(main, ["predict", "--model", "llama-3.1-8b", "--profile", "l40s-pcie", "--tp", "4",
                                  "--batch", "1", "--prompt", "32", "--gen", "4", "--stack", "vllm"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())                  # the notes wrap at the table's width
    assert flat.count("custom allreduce is disabled") == 1, r.output
    assert ("all schedules: vLLM: custom allreduce is disabled because it's not supported on more than "
            "two PCIe-only GPUs; falls back to NCCL") in flat, r.output


def test_note_lines_keep_a_note_of_one_schedule_under_its_name():
    """Toy predictions: 'a' on both is shared (printed once, first); 'b' only on the second keeps its name;
    one prediction alone keeps its name for every note."""
    preds = [P(schedule="standard", notes=("a",)), P(schedule="seq-parallel", notes=("b", "a"))]
    assert note_lines(preds) == ["all schedules: a", "seq-parallel: b"]
    assert note_lines(preds[:1]) == ["standard: a"]
