"""tpsim compare prices the all-reduce implementation a measured run used (hw.symm_mem:
`tpsim bench --collective symm-mem`, or a --stack whose engine all-reduce the harness maps onto it),
not the run's process-group backend; where the simulator cannot price what ran, the compared point
says so in one line.

gloo on CPU cannot run symmetric memory, so the run record is written by the harness's own writer
(hw.bench.assemble) from a RunConfig the harness accepts (cuda, nccl, symm-mem), with the per-rank
samples a GPU run would gather; the kernel each message ran comes from the harness's own per-call
rule (hw.symm_mem.dispatch) on an SM90 multicast box, as SymmMemAllReduce.ran records it."""
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")          # hw.symm_mem imports it: skipped in the torch-free venv (-m "not hw")

from tpsim.sim.price.comm import custom_allreduce as car
from tpsim.sim.hardware.profile import load_profile, read_raw
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.presets import load_stack

from tpsim.hw import symm_mem as hs
from tpsim.hw.bench import assemble, stack_harness_options
from tpsim.hw.run_config import RunConfig

from tpsim.calib.compare_join import compare_point
from tpsim.calib.compare_measure import CompareError, workload_of

from tpsim.commands.collective import collective_cmd

pytestmark = pytest.mark.hw

TP = 4          # multimem at 4 ranks on SM90 (car.SYMM_MEM_MULTIMEM_SM90)


def _run_record(**opts) -> dict:
    """A measured run as hw.bench writes it: standard only, one repeat, prefill 16 / gen 4 on `tiny`
    (hidden 64, bf16: a prefill all-reduce of 16 x 64 x 2 = 2048 B, a decode one of 128 B)."""
    cfg = RunConfig(**({"model": "tiny", "tp": TP, "batch": 1, "prompt_len": 16, "gen_len": 4, "backend": "nccl",
                        "device": "cuda", "dtype": "bf16", "repeats": 1, "warmup": 0} | opts))
    stack = cfg.stack()
    plans = [build("standard", cfg.model_spec(), cfg.model_tp, step, stack) for step in cfg.steps()]
    msgs = hs.all_reduce_messages(plans)
    cap = car.symm_mem_buffer_bytes(msgs, cfg.tp)
    ran = {str(b): hs.dispatch(b, cfg.tp, multicast=True, single_node=True, dtype=cfg.dtype, capacity_bytes=cap).kernel
           for b in msgs} if cfg.collective == "symm-mem" else {str(b): "nccl" for b in msgs}
    per_rank = [{"samples": {"standard": [(0.010, 0.030, 0.0)]}, "records": {"standard": []},
                 "env": {"rank": r, "hostname": "gpu-box", "device": "NVIDIA H100 80GB HBM3", "cores": None,
                         "probe_s": [0.01, 0.01], "inductor_flags": None, "collective_notes": [],
                         "collective_kernels": ran}} for r in range(cfg.tp)]
    return json.loads(json.dumps(assemble(cfg, "tiny", ["standard"], per_rank, {})))   # as the file holds it


def _cli_price(profile: str, impl: str, nbytes: int) -> dict:
    """`tpsim collective --impl IMPL` for one eager bf16 all-reduce of `nbytes` over TP ranks."""
    r = CliRunner().invoke(collective_cmd, ["--profile", profile, "--group", str(TP), "--impl", impl, "--bytes",
                                            str(nbytes), "--mode", "eager", "--dtype", "bf16", "--json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)["rows"]
    return row


def _simulated_comm_s(point) -> dict[tuple[str, str], float]:
    """(phase, op) -> the simulated comm-stream seconds of each all-reduce of the standard schedule."""
    return {(o.phase, o.op): o.predicted_s for o in point.schedules[0].ops
            if o.stream == "comm" and o.op.endswith("allreduce")}


@pytest.mark.parametrize("how", ["collective", "stack"])
def test_compare_prices_the_symm_mem_all_reduce_the_run_used(how):
    # bench --collective symm-mem; or bench --stack vllm on a GPU: vllm-custom mapped onto symm-mem
    # (hw.bench.stack_harness_options: eager passes, bf16), as commands/bench.py applies it
    if how == "collective":
        rec = _run_record(collective="symm-mem")
    else:
        opts, _ = stack_harness_options(load_stack("vllm").values, "cuda")
        assert opts["collective"] == "symm-mem"
        rec = _run_record(**opts)
    assert (rec["stack"]["collective"], rec["env"]["backend"]) == ("symm-mem", "nccl")
    prof = load_profile("h100-sxm")
    w = workload_of(rec, prof)
    assert w.stack.collective == "symm-mem"
    pt = compare_point(rec, prof)
    sim = _simulated_comm_s(pt)
    # 2 layers x (attn, mlp) per phase (the vllm preset's vocab-parallel embedding adds embed.allreduce)
    assert {(ph, f"L{i}.{b}.allreduce") for ph in ("prefill", "decode") for i in (0, 1) for b in ("attn", "mlp")} \
        <= set(sim)
    for phase, nbytes in (("prefill", 2048), ("decode", 128)):
        symm, nccl = _cli_price("h100-sxm", "symm-mem", nbytes), _cli_price("h100-sxm", "nccl", nbytes)
        assert symm["path"].startswith("symm-mem:multimem") and not nccl["path"].startswith("symm-mem")
        assert symm["time_us"] != pytest.approx(nccl["time_us"], rel=1e-3)
        for (ph, op), t_s in sim.items():
            if ph == phase:       # the simulated all-reduce is what `tpsim collective --impl symm-mem` prices
                assert t_s * 1e6 == pytest.approx(symm["time_us"], abs=1e-3), (ph, op)
    # the run's kernels (multimem at both sizes) are the ones priced: nothing to say
    assert rec["stack"]["collective_kernels"] == {"128": "multimem", "2048": "multimem"}
    assert pt.notes == ()


def test_a_run_on_the_backend_still_prices_the_backend():
    rec = _run_record()                          # --collective auto: the process group's NCCL
    prof = load_profile("h100-sxm")
    assert workload_of(rec, prof).stack.collective == "nccl"
    pt = compare_point(rec, prof)
    nccl = _cli_price("h100-sxm", "nccl", 2048)
    assert all(t * 1e6 == pytest.approx(nccl["time_us"], abs=1e-3)
               for (ph, _), t in _simulated_comm_s(pt).items() if ph == "prefill")
    assert pt.notes == ()


def test_a_symm_mem_run_the_profile_cannot_price_says_so(tmp_path):
    """h100-sxm without the vLLM kernel constants the symmetric-memory price is built on: the simulator
    prices NCCL where the run ran multimem, and the compared point says so in one line."""
    data, _ = read_raw("h100-sxm")
    del data["collectives"]["custom_allreduce"]["vllm"]
    path = tmp_path / "no-vllm-consts.json"
    path.write_text(json.dumps(data))
    prof = load_profile(str(path))
    pt = compare_point(_run_record(collective="symm-mem"), prof)
    (note,) = pt.notes
    assert "\n" not in note and "multimem" in note and "NCCL" in note and "symm-mem" in note, note
    assert "128" in note and "2048" in note, note
    assert pt.to_dict()["notes"] == [note]               # compare.json keeps it


def test_a_collective_the_simulator_has_no_implementation_of_fails_the_point():
    rec = _run_record(collective="symm-mem")
    rec["stack"]["collective"] = "nvshmem"          # no harness writes it: nothing may stand in for it
    with pytest.raises(CompareError, match="all-reduce ran 'nvshmem', which the simulator cannot price"):
        compare_point(rec, load_profile("h100-sxm"))


def test_compare_command_prints_the_note(tmp_path):
    """`tpsim compare --measured`: the note in the summary, report.md and compare.json."""
    from tpsim.cli import main
    data, _ = read_raw("h100-sxm")
    del data["collectives"]["custom_allreduce"]["vllm"]
    (tmp_path / "p.json").write_text(json.dumps(data))
    (tmp_path / "run.json").write_text(json.dumps(_run_record(collective="symm-mem")))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["compare", "--profile", str(tmp_path / "p.json"), "--measured",
                                  str(tmp_path / "run.json"), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    assert "not priced as run" in r.output and "ran multimem" in " ".join(r.output.split())
    (pt,) = json.loads((out / "compare.json").read_text())["points"]
    assert len(pt["notes"]) == 1 and "**Not priced as run**" in (out / "report.md").read_text()
