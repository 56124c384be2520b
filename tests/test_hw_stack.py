"""`tpsim bench --stack NAME`: a preset mapped onto the harness options PyTorch can run, with a note
for each it cannot; one real 2-rank gloo run checks the plumbing (explicit flags win)."""
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from tpsim.hw.bench import stack_harness_options  # noqa: E402
from tpsim.commands.bench import bench_cmd  # noqa: E402
from tpsim.sim.stack.presets import PRESETS  # noqa: E402


def test_presets_map_onto_harness_options():
    opts, notes = stack_harness_options(PRESETS["vllm"].values, "cpu")
    assert opts == {"attention": "flash", "kv": "filled", "expand_gqa": False, "prefill_logits": "last",
                    "head": "vocab-parallel", "embed": "vocab-parallel", "compile": False, "decode_graphs": False,
                    "mm_decompose_m1": False}
    assert any(n.startswith("compile: the harness compiles a pass over a static KV cache only") for n in notes)
    assert any("CUDA graphs need a GPU" in n for n in notes)
    assert any("symmetric-memory" in n and "gloo measured" in n for n in notes)
    assert any("host lane" in n for n in notes)
    assert not any(n.startswith("embed") for n in notes)            # runs as the engines run it
    assert any(n.startswith("graph_scope forward: not run") for n in notes)
    assert any(n.startswith("sampler vllm-v1-random: the engine's sampler kernels") for n in notes)
    gpu, gnotes = stack_harness_options(PRESETS["sglang"].values, "cuda")
    assert gpu["attention"] == "flash" and gpu["compile"] is False and gpu["decode_graphs"] is False
    assert any("need a static KV cache" in n for n in gnotes)    # filled KV: the harness cannot graph it
    assert any("FlashAttention-3 is not part of PyTorch" in n for n in gnotes)     # SGLang on Hopper: FA3
    assert any(n.startswith("engine kernels: the engine's fused CUDA ops") for n in gnotes)
    fi, finotes = stack_harness_options(PRESETS["sglang"].values | {"attention": "flashinfer"}, "cuda")
    assert any("FlashInfer is not part of PyTorch" in n for n in finotes)
    assert gpu["collective"] == "symm-mem" and any("--collective symm-mem" in n for n in gnotes)   # GPU: symm-mem
    ref, rnotes = stack_harness_options(PRESETS["reference"].values, "cpu")
    assert not any(n.startswith("sampler") for n in rnotes)       # the reference's argmax is what the harness runs
    assert ref["attention"] == "math" and ref["kv"] == "static" and ref["compile"] is True
    assert ref["mm_decompose_m1"] is True and gpu["mm_decompose_m1"] is True     # reference, sglang: on
    assert ref["embed"] == "replicated" and gpu["embed"] == "vocab-parallel"
    eager, _ = stack_harness_options(PRESETS["eager"].values, "cuda")
    assert eager["compile"] is False and eager["decode_graphs"] is False and eager["mm_decompose_m1"] is False
    refgpu, _ = stack_harness_options(PRESETS["reference"].values, "cuda")
    assert refgpu["decode_graphs"] is True                        # static KV on a GPU: graphs as the preset says


def test_a_flag_given_beside_a_preset_maps_in_its_place():
    """bench --stack: what the user gave replaces the preset's value before the mapping, so the notes
    describe what runs: --attention math under trtllm (xqa) leaves no flash note, --kv static lets
    vllm's compile run (no 'filled KV runs eager' note), --collective auto keeps gloo/NCCL's own."""
    from tpsim.commands.bench import _preset_under_flags
    flags = {"attention": "math", "kv": "static", "collective": "auto", "head": None}
    values = _preset_under_flags(PRESETS["vllm"].values, flags, None)
    assert (values["attention"], values["kv"], values["collective"]) == ("math", "static", "auto")
    assert values["head"] == PRESETS["vllm"].values["head"]                 # not given: the preset's
    opts, notes = stack_harness_options(values, "cuda")
    assert opts["attention"] == "math" and opts["compile"] is True and "collective" not in opts
    assert not any(n.startswith(("attention", "compile:", "collective")) for n in notes), notes
    off = _preset_under_flags(PRESETS["reference"].values, {}, False)
    assert stack_harness_options(off, "cpu")[0]["compile"] is False


def test_one_definition_of_the_reference_inductor_flags():
    """The harness and both kernel-table derivations read the same dict; the derivations' own
    settings only turn caching off, never a flag that changes what Inductor generates."""
    from tpsim.hw import inductor_flags as F
    from tpsim.hw.derive import inductor_gpu, inductor_kernels
    assert F.REFERENCE_INDUCTOR_FLAGS == {"coordinate_descent_tuning": True, "triton.unique_kernel_names": True,
                                          "fx_graph_cache": True,
                                          "reorder_for_compute_comm_overlap": True}
    assert inductor_kernels.REFERENCE_INDUCTOR_FLAGS is F.REFERENCE_INDUCTOR_FLAGS
    assert inductor_gpu.REFERENCE_INDUCTOR_FLAGS is F.REFERENCE_INDUCTOR_FLAGS
    for extra in (inductor_gpu.DERIVATION_FLAGS, inductor_kernels.derivation_flags("cuda"),
                  inductor_kernels.derivation_flags("cpu")):
        assert set(extra) & set(F.REFERENCE_INDUCTOR_FLAGS) == {"fx_graph_cache"}
    assert inductor_gpu.FLAGS == F.REFERENCE_INDUCTOR_FLAGS | inductor_gpu.DERIVATION_FLAGS
    assert F.harness_inductor_flags(False) == F.REFERENCE_INDUCTOR_FLAGS | {"coordinate_descent_tuning": False}
    assert F.harness_inductor_flags() == F.REFERENCE_INDUCTOR_FLAGS


def test_a_nested_inductor_flag_is_set_and_read_back():
    """"triton.unique_kernel_names" (a key of the config's nested triton class) goes through
    apply_inductor_flags' setattr, reads back through current_inductor_flags, and icfg.patch (the
    derivations') takes it too."""
    import torch._inductor.config as icfg
    from tpsim.hw.inductor_flags import apply_inductor_flags, current_inductor_flags
    before = icfg.triton.unique_kernel_names
    try:
        assert apply_inductor_flags({"triton.unique_kernel_names": False}) == {"triton.unique_kernel_names": False}
        assert icfg.triton.unique_kernel_names is False
        with icfg.patch({"triton.unique_kernel_names": True}):
            assert current_inductor_flags()["triton.unique_kernel_names"] is True
        assert current_inductor_flags()["triton.unique_kernel_names"] is False
    finally:
        icfg.triton.unique_kernel_names = before


def test_run_config_carries_mm_decompose_m1_to_the_ranks():
    from tpsim.hw.run_config import RunConfig
    cfg = RunConfig(compile=True, mm_decompose_m1=False)
    back = RunConfig.from_dict(cfg.to_dict())          # what a rank process receives
    assert back == cfg and back.stack().mm_decompose_m1 is False
    assert RunConfig().mm_decompose_m1 is True and RunConfig().stack().mm_decompose_m1 is True
    with pytest.raises(ValueError, match="mm_decompose_m1 must be true or false"):
        RunConfig(mm_decompose_m1="yes")


def test_compiled_or_graphed_passes_need_the_static_kv_cache():
    """--compile or --graphs over --kv filled (given, or from a --stack preset) is refused before any
    rank starts, naming the option; it was a Dynamo error in every rank (the compiled pass's position
    is a device tensor, which filled-KV attention cannot slice the cache by)."""
    from tpsim.commands.bench import check_cmd
    from tpsim.hw.run_config import RunConfig
    with pytest.raises(ValueError, match="--compile needs --kv static"):
        RunConfig(compile=True, kv="filled")
    with pytest.raises(ValueError, match="--graphs needs --kv static"):
        RunConfig(device="cuda", backend="nccl", decode_graphs=True, kv="filled")
    for cmd, args in ((bench_cmd, ["--stack", "vllm", "--compile"]), (check_cmd, ["--compile", "--kv", "filled"])):
        res = CliRunner().invoke(cmd, [*args, "--device", "cpu", "--schedule", "standard"])
        assert res.exit_code == 2, res.output
        assert res.output.strip().splitlines()[-1] == ("Error: --compile needs --kv static (one compiled graph serves "
                                                       "every decode position), got --kv filled: give --kv static, "
                                                       "or --no-compile")


@pytest.mark.hw
@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_bench_stack_vllm_on_gloo():
    # no --no-compile: the preset compiles, and with its filled KV the harness runs eager and says so
    res = CliRunner().invoke(bench_cmd, ["--stack", "vllm", "--attention", "math", "--model", "tiny",
                                         "--tp", "2", "--prompt", "16", "--gen", "4", "--device", "cpu",
                                         "--backend", "gloo", "--repeats", "1", "--warmup", "0", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    st = d["stack"]
    assert (st["kv"], st["expand_gqa"], st["head"], st["prefill_logits"]) == ("filled", False, "vocab-parallel", "last")
    assert st["attention"] == "math" and st["compile"] is False        # the explicit flag won; compile: the note
    assert not any(n.startswith("attention") for n in st["notes"])      # and no note says fa3 or flash ran
    assert any(n.startswith("compile: the harness compiles a pass over a static KV cache only") for n in st["notes"])
    # the preset's mm_decompose_m1 reached the ranks' RunConfig; eager: no Inductor flags recorded
    assert st["mm_decompose_m1"] is False and d["env"]["inductor_flags"] is None
    assert st["preset"] == "vllm" and any("gloo measured" in n for n in st["notes"])
    # the preset's vocab-parallel embedding ran: no note, and every rank's embed.allreduce in both phases
    assert st["embed"] == "vocab-parallel" and not any(n.startswith("embed") for n in st["notes"])
    recs = d["schedules"][0]["records"]
    assert {(x["rank"], x["phase"]) for x in recs if x["op"] == "embed.allreduce" and x["stream"] == "comm"} == \
        {(r, ph) for r in (0, 1) for ph in ("prefill", "decode")}
    assert d["memory"]["embed_head_bytes"] == 2 * 128 * 64 * 4 + 64 * 4      # tiny: two 128-row shards + norm
    # compare prices the run's stack: the simulator's schedule has the op the records join on
    from tpsim.calib.compare_measure import workload_of
    from tpsim.sim.hardware.profile import load_profile
    w = workload_of(d, load_profile("h100-sxm"))
    assert w.stack.embed == "vocab-parallel"
    assert "embed.allreduce" in {op.name for op in w.schedule("standard", w.decode_step(1)).collectives}
    bad = CliRunner().invoke(bench_cmd, ["--stack", "nope", "--device", "cpu"])
    assert bad.exit_code == 2 and "unknown stack 'nope'" in bad.output


@pytest.mark.hw
def test_compare_reuses_a_compiled_run_only_with_the_same_inductor_flags(tmp_path):
    """calib.compare_measure.measure: a saved compiled run whose env.inductor_flags are this harness's
    is reused; one without them (an older run) is measured again: here a real launch, stopped by
    a 0.5 s deadline, shows it was not reused. workload_of prices the run's mm_decompose_m1."""
    from tpsim.calib.compare_measure import Point, measure, workload_of
    from tpsim.hw.inductor_flags import harness_inductor_flags
    from tpsim.hw.dist import WorkerFailed
    from tpsim.sim.hardware.profile import load_profile
    point = Point("tiny", 2, 1, 8, 2)
    saved = tmp_path / "measured" / f"{point.key}.json"
    saved.parent.mkdir()
    old = {"model": "tiny", "tp": 2, "batch": 1, "prompt_len": 8, "gen_len": 2, "schedules": [{"schedule": "standard"}],
           "env": {"backend": "gloo", "device": "cpu", "inductor_flags": harness_inductor_flags()},
           "repeats": 1, "stack": {"compile": True, "mm_decompose_m1": False}}
    saved.write_text(json.dumps(old))
    assert measure(point, ("standard",), tmp_path, repeats=1, compile=True) == old
    assert workload_of(old, load_profile("h100-sxm")).stack.mm_decompose_m1 is False
    saved.write_text(json.dumps(old | {"env": old["env"] | {"inductor_flags": None}}))
    with pytest.raises(WorkerFailed, match="deadline"):
        measure(point, ("standard",), tmp_path, repeats=1, compile=True, deadline_s=0.5)


FIX = Path(__file__).resolve().parent / "fixtures" / "compare"


def _gathered(wait_s) -> list[dict]:
    """What each of 2 ranks gathers for hw.bench.assemble: standard's (prefill, decode, wait) per repeat,
    as `generation` returns them (wait None: a compiled pass, whose waits are not timed)."""
    env = {"hostname": "h", "device": "cpu", "cores": None, "probe_s": [1.0, 1.0], "inductor_flags": None,
           "collective_notes": [], "collective_kernels": {}}
    return [{"samples": {"standard": [(0.01, 0.02, wait_s), (0.011, 0.021, wait_s)]}, "records": {"standard": []},
             "env": env | {"rank": r}} for r in range(2)]


@pytest.mark.hw              # hw.bench imports torch
def test_a_compiled_run_reports_its_exposed_communication_as_not_measured():
    """--compile: the waits happen inside the compiled graph, so exposed_comm_s is null and printed '-'
    with a line saying why; it was a false 0 (CPU), or the eager recorded passes' figure (CUDA)."""
    from tpsim.hw.bench import assemble, format_result
    from tpsim.hw.run_config import RunConfig
    cfg = RunConfig(model="tiny", tp=2, prompt_len=8, gen_len=2, repeats=2, schedules=("standard",), compile=True)
    result = assemble(cfg, "tiny", ["standard"], _gathered(None), {})
    assert result["schedules"][0]["exposed_comm_s"] is None and result["stack"]["compile"] is True
    assert json.loads(json.dumps(result))["schedules"][0]["exposed_comm_s"] is None        # JSON: null
    lines = format_result(result).splitlines()
    assert _row(lines, "standard")[-1] == "-"
    assert "exposed comm ms -: not measured with --compile (its waits are inside the graph)" in lines
    assert max(map(len, lines)) <= 80, lines
    # eager: the ranks' blocked time, as before (mean over ranks, median over repeats)
    eager = assemble(replace(cfg, compile=False), "tiny", ["standard"], _gathered(0.004), {})
    assert eager["schedules"][0]["exposed_comm_s"] == pytest.approx(0.004)
    assert _row(format_result(eager).splitlines(), "standard")[-1] == "4.00"
    assert not any(ln.startswith("exposed comm ms -") for ln in format_result(eager).splitlines())


def _row(lines: list[str], schedule: str) -> list[str]:
    """The cells of a table's row (hw/report.py draws the table: a row starts after the edge's space)."""
    return next(ln.split() for ln in lines if ln.split()[:1] == [schedule])


def test_compare_reads_a_saved_compiled_run_with_exposed_communication_null(tmp_path, monkeypatch):
    """`tpsim compare --measured` on a compiled run (exposed_comm_s null): compared, the null kept in
    compare.json; it was refused ('must be a finite number >= 0, got None')."""
    from tpsim.cli import main
    run = json.loads((FIX / "measured-tiny-tp2.json").read_text())
    run["stack"]["compile"] = True
    for row in run["schedules"]:
        row["exposed_comm_s"] = None
    (tmp_path / "m.json").write_text(json.dumps(run))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["compare", "--measured", "m.json", "--profile", str(FIX / "profile.json"),
                                    "--out-dir", "cmp"])
    assert res.exit_code == 0, res.output
    (pt,) = json.loads((tmp_path / "cmp" / "compare.json").read_text())["points"]
    assert [s["measured"]["exposed_comm_s"] for s in pt["schedules"]] == [None, None]


@pytest.mark.hw
@pytest.mark.slow          # compiles standard's 2 passes on 2 gloo ranks: 20-40 s
def test_bench_compile_prints_exposed_not_measured_and_compare_reads_it(tmp_path, monkeypatch):
    """The real thing: `bench --compile` on 2 gloo ranks prints '-' and saves null; compare reads the file."""
    out = tmp_path / "m.json"
    res = CliRunner().invoke(bench_cmd, ["--model", "tiny", "--tp", "2", "--prompt", "8", "--gen", "2", "--repeats",
                                         "1", "--warmup", "0", "--schedule", "standard", "--device", "cpu",
                                         "--backend", "gloo", "--compile", "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert _row(lines, "standard")[-1] == "-"
    assert "exposed comm ms -: not measured with --compile (its waits are inside the graph)" in res.output
    assert json.loads(out.read_text())["schedules"][0]["exposed_comm_s"] is None
    from tpsim.cli import main
    monkeypatch.chdir(tmp_path)
    cmp = CliRunner().invoke(main, ["compare", "--measured", str(out), "--profile", str(FIX / "profile.json"),
                                    "--out-dir", "cmp"])
    assert cmp.exit_code == 0, cmp.output


def test_check_takes_the_stack_option_bench_takes():
    """`check --stack NAME|FILE`: the one --stack definition (commands.options.preset_option), mapped
    onto the harness as bench's; refused before any rank starts as bench's. check had no --stack."""
    from tpsim.commands.bench import check_cmd
    opt = {cmd.name: next(p for p in cmd.params if p.name == "stack_name") for cmd in (bench_cmd, check_cmd)}
    assert opt["check"].opts == opt["bench"].opts == ["--stack"] and opt["check"].help == opt["bench"].help
    for cmd in (bench_cmd, check_cmd):
        # the preset's filled KV reached the options: a compiled pass needs the static cache
        res = CliRunner().invoke(cmd, ["--stack", "vllm", "--compile", "--device", "cpu", "--schedule", "standard"])
        assert res.exit_code == 2 and res.output.strip().splitlines()[-1].startswith(
            "Error: --compile needs --kv static"), (cmd.name, res.output)
        bad = CliRunner().invoke(cmd, ["--stack", "nope", "--device", "cpu"])
        assert bad.exit_code == 2 and "unknown stack 'nope'" in bad.output, (cmd.name, bad.output)


@pytest.mark.hw
@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_check_stack_vllm_on_gloo():
    """check runs the vllm preset's stack as bench does (filled KV, vocab-parallel head and embedding,
    last-position prefill logits, eager), every schedule within tolerance, the notes beside it."""
    from tpsim.commands.bench import check_cmd
    res = CliRunner().invoke(check_cmd, ["--stack", "vllm", "--attention", "math", "--model", "tiny", "--tp", "2",
                                         "--prompt", "8", "--gen", "3", "--device", "cpu", "--backend", "gloo",
                                         "--schedule", "standard", "--schedule", "ladder", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["ok"] and [r["schedule"] for r in d["schedules"]] == ["standard", "ladder"]
    st = d["stack"]
    assert (st["kv"], st["expand_gqa"], st["head"], st["embed"], st["prefill_logits"]) == \
        ("filled", False, "vocab-parallel", "vocab-parallel", "last")
    assert st["attention"] == "math" and st["compile"] is False and st["mm_decompose_m1"] is False
    assert st["preset"] == "vllm" and not any(n.startswith("attention") for n in st["notes"])
    assert any(n.startswith("compile: the harness compiles a pass over a static KV cache only") for n in st["notes"])
    text = CliRunner().invoke(check_cmd, ["--stack", "vllm", "--model", "tiny", "--tp", "2", "--prompt", "8", "--gen",
                                          "3", "--device", "cpu", "--schedule", "standard"])
    assert text.exit_code == 0, text.output
    assert "all schedules match their references\nstack vllm: attention fa3: " in text.output
