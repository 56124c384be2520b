"""`tpsim profiles import-engine-bench`: engine benchmark outputs (vLLM bench latency JSON and its
PyTorch-format sibling, SGLang bench_one_batch lines; shapes in tests/fixtures/engine_bench/README.md)
-> a deployment's host step terms in a stack file, and back through `predict --stack FILE`."""
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.calib.engine_bench import parse_file_spec
from tpsim.calib.engine_bench_read import parse_engine_bench
from tpsim.cli import main
from tpsim.sim.stack.presets import load_stack

FIX = Path(__file__).parent / "fixtures" / "engine_bench"


def _make():
    import importlib.util
    spec = importlib.util.spec_from_file_location("engine_bench_make", FIX / "make.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_fixtures_parse_in_the_engines_shapes():
    d = json.loads((FIX / "vllm_latency_tp4.json").read_text())
    assert set(d) == {"avg_latency", "std_latency", "latencies", "percentiles"}
    assert list(d["percentiles"]) == ["10", "25", "50", "75", "90", "99"]
    (r,) = parse_engine_bench((FIX / "vllm_latency_tp4.json").read_text(), "f.json", tp=4)
    # no run parameters in the file: the TP given, the rest vllm bench latency's defaults
    assert (r.engine, r.layout, r.tp, r.batch, r.input_len, r.output_len) == ("vllm", "vllm-latency-json", 4, 8, 32, 128)
    assert r.latency_s == d["avg_latency"] and r.decode_step_s is None
    (s,) = parse_engine_bench((FIX / "sglang_one_batch_tp8.jsonl").read_text(), "s.jsonl", tp=8)
    assert (s.engine, s.tp, s.batch, s.output_len) == ("sglang", 8, 8, 128) and s.decode_step_s > 0


def test_the_pytorch_format_sibling_carries_its_own_tp():
    """vllm/benchmarks/lib/utils.py convert_to_pytorch_benchmark_format: one record per metric,
    args = vars(args) (tensor_parallel_size, batch_size, input_len, output_len)."""
    rec = [{"benchmark": {"name": "vLLM benchmark", "extra_info": {"args": {
        "tensor_parallel_size": 2, "batch_size": 4, "input_len": 64, "output_len": 16, "model": "m"}}},
        "model": {"name": "m"}, "metric": {"name": "latency", "benchmark_values": [1.0, 1.2],
                                           "extra_info": {"avg_latency": 1.1, "percentiles": {}}}}]
    (r,) = parse_engine_bench(json.dumps(rec), "p.json")
    assert (r.layout, r.tp, r.batch, r.input_len, r.output_len, r.latency_s) == ("vllm-pytorch-json", 2, 4, 64, 16, 1.1)
    with pytest.raises(ValueError, match="says tp 2, but tp=4"):
        parse_engine_bench(json.dumps(rec), "p.json", tp=4)


def test_bad_benchmark_files_are_one_line_errors():
    for text, msg in (('{"avg_latency": 1.0, "latencies": [], "percentiles": {}}', "non-empty list"),
                      ('{"avg_latency": -1, "latencies": [1.0], "percentiles": {}}', "avg_latency"),
                      ('{"x": 1}', "neither"),
                      ('{"median_decode_latency": 0.01, "batch_size": 8}\n{oops', "line 2")):
        with pytest.raises(ValueError, match=msg):
            parse_engine_bench(text, "bad", tp=2)
    with pytest.raises(ValueError, match="does not say its tp"):
        parse_engine_bench((FIX / "vllm_latency_tp2.json").read_text(), "f.json")
    assert parse_file_spec("a/b.json:tp=4,batch=2") == ("a/b.json", {"tp": 4, "batch": 2})
    assert parse_file_spec("c:/x.json") == ("c:/x.json", {})
    with pytest.raises(ValueError, match="after ':'"):
        parse_file_spec("b.json:tp=four")


def test_round_trip_recovers_known_host_terms_and_predict_uses_them(tmp_path):
    """Files written in vLLM's shape from tpsim's GPU-only prediction + 1.2 ms + 0.3 ms x (TP-1) per
    step: the fit recovers both terms; `predict --stack FILE --schedule ladder` then runs with them."""
    mk = _make()
    specs = []
    for tp in (2, 4, 8):
        p = mk.predicted("vllm", tp, 8, 32, 128)
        f = tmp_path / f"lat{tp}.json"
        with open(f, "w") as fh:
            json.dump(mk.vllm_latency_json(p.prefill_s + p.decode_s + 128 * (mk.STEP_S + mk.PER_RANK_S * (tp - 1))),
                      fh, indent=4)
        specs.append(f"{f}:tp={tp}")
    out = tmp_path / "my-vllm.json"
    r = CliRunner().invoke(main, ["profiles", "import-engine-bench", *specs, "--model", "llama-3.1-70b",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["extends"] == "vllm" and doc["host"]["overlap"] is False
    assert doc["host"]["schedule_s"] == pytest.approx(mk.STEP_S, rel=1e-6)
    assert doc["host"]["handoff_per_rank_s"] == pytest.approx(mk.PER_RANK_S, rel=1e-6)
    assert "import-engine-bench" in doc["sources"]["host.schedule_s"] and str(tmp_path) in doc["sources"]["host.schedule_s"]
    assert [row["tp"] for row in doc["fit"]["runs"]] == [2, 4, 8]
    st = load_stack(str(out))
    assert st.values["host"]["schedule_s"] == doc["host"]["schedule_s"]
    r = CliRunner().invoke(main, ["predict", "--stack", str(out), "--schedule", "ladder", "--model", "llama-3.1-70b",
                                  "--tp", "8", "--batch", "8", "--prompt", "32", "--gen", "128", "--json"])
    assert r.exit_code == 0, r.output
    js = json.loads(r.output)
    assert js["stack"]["preset"] == "my-vllm" and js["stack"]["host"]["handoff_per_rank_s"] > 0
    # the predicted standard run at TP 4 is the file's measured latency again (the fit's residual is 0)
    r = CliRunner().invoke(main, ["predict", "--stack", str(out), "--schedule", "standard", "--model", "llama-3.1-70b",
                                  "--tp", "4", "--batch", "8", "--prompt", "32", "--gen", "128", "--json",
                                  "--no-memory-check"])
    s = json.loads(r.output)["schedules"][0]
    measured = json.loads((tmp_path / "lat4.json").read_text())["avg_latency"]
    assert s["prefill_s"] + s["decode_s"] == pytest.approx(measured, rel=2e-3)
    # the fit replaces every ranged host term of the preset: the stack carries no host range, so predict's
    # interval is the profile's and the stack's own numbers' (the layer's Python, DBO's threads: not what
    # the fit sets), and it no longer calls the stack uncalibrated
    assert any(k.startswith("host.") for k in load_stack("vllm").ranges)
    assert not any(k.startswith("host.") for k in st.ranges)
    assert {k for k in st.ranges} == {k for k in load_stack("vllm").ranges if k.startswith("stack.")}
    assert json.loads(r.output)["stack"]["host_ranges"] == []
    fields = json.loads(r.output)["sensitivity"]["fields"]
    assert fields and not any(k.startswith("host.") for k in fields)
    text = CliRunner().invoke(main, ["predict", "--stack", str(out), "--schedule", "ladder", "--model", "llama-3.1-70b",
                                     "--tp", "8", "--batch", "8", "--prompt", "32", "--gen", "128"]).output
    vllm = CliRunner().invoke(main, ["predict", "--stack", "vllm", "--schedule", "ladder", "--model", "llama-3.1-70b",
                                     "--tp", "8", "--batch", "8", "--prompt", "32", "--gen", "128"]).output
    assert "uncalibrated: stack vllm@0.11 has 11 host terms given as ranges" in vllm
    assert "uncalibrated" not in text and "host." not in text.split("interval:")[-1]


def test_one_tp_degree_or_mixed_engines_are_refused(tmp_path):
    f = str(FIX / "vllm_latency_tp2.json")
    r = CliRunner().invoke(main, ["profiles", "import-engine-bench", f"{f}:tp=2", "--model", "llama-3.1-70b",
                                  "--out", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "two or more TP degrees" in r.output
    r = CliRunner().invoke(main, ["profiles", "import-engine-bench", f"{f}:tp=2",
                                  f"{FIX / 'sglang_one_batch_tp8.jsonl'}:tp=8", "--model", "llama-3.1-70b",
                                  "--out", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "mixing" in r.output
    r = CliRunner().invoke(main, ["profiles", "import-engine-bench", str(tmp_path / "missing.json") + ":tp=2",
                                  "--model", "llama-3.1-70b", "--out", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "cannot read" in r.output


def test_sglang_fixture_fits_the_runner_step(tmp_path):
    out = tmp_path / "my-sgl.json"
    r = CliRunner().invoke(main, ["profiles", "import-engine-bench", f"{FIX / 'sglang_one_batch_tp2.jsonl'}:tp=2",
                                  f"{FIX / 'sglang_one_batch_tp8.jsonl'}:tp=8", "--model", "llama-3.1-70b",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["extends"] == "sglang" and doc["host"]["schedule_s"] >= 0 and doc["host"]["handoff_per_rank_s"] >= 0


PUBLIC = FIX / "public"


def test_real_public_outputs_round_trip_through_the_importer(tmp_path):
    """Real files from public repositories (sources in tests/fixtures/engine_bench/public/README.md).
    Each is exactly its engine's writer: vLLM's json.dump(results, f, indent=4), SGLang's
    json.dumps(result) + "\\n" per line, so re-serialising what was read gives the file back. The
    importer reads the numbers the file holds. The vLLM runs are all TP 1 (NPUs), so the command
    refuses to fit them, in one line, exit 2."""
    for name in ("vllm_latency_llama8B_tp1_npu_a.json", "vllm_latency_llama8B_tp1_npu_b.json"):
        text = (PUBLIC / name).read_text()
        d = json.loads(text)
        assert json.dumps(d, indent=4) == text
        assert set(d) == {"avg_latency", "latencies", "percentiles"} and len(d["latencies"]) == 15
        (r,) = parse_engine_bench(text, name, tp=1)
        # benchmark_latency's defaults (batch 8, in 32, out 128): the file holds no run parameters
        assert (r.engine, r.layout, r.tp, r.batch, r.input_len, r.output_len) == ("vllm", "vllm-latency-json", 1, 8, 32, 128)
        assert r.latency_s == d["avg_latency"] and r.decode_step_s is None
    for name, n in (("sglang_one_batch_frgossen.jsonl", 9), ("sglang_one_batch_deepseek_simulator.jsonl", 2)):
        text = (PUBLIC / name).read_text()
        lines = [json.loads(ln) for ln in text.splitlines()]
        assert [json.dumps(d) for d in lines] == text.splitlines() and len(lines) == n
        runs = parse_engine_bench(text, name, tp=2)
        assert [(r.batch, r.input_len, r.output_len, r.decode_step_s) for r in runs] == \
            [(d["batch_size"], d["input_len"], d["output_len"], d["median_decode_latency"]) for d in lines]
        assert {r.engine for r in runs} == {"sglang"}
    specs = [f"{PUBLIC / n}:tp=1" for n in ("vllm_latency_llama8B_tp1_npu_a.json", "vllm_latency_llama8B_tp1_npu_b.json")]
    r = CliRunner().invoke(main, ["profiles", "import-engine-bench", *specs, "--model", "llama-3.1-8b",
                                  "--out", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "all at TP 1" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()


def _bench(*args):
    return CliRunner().invoke(main, ["profiles", "import-engine-bench", *map(str, args)])


def _one_error(r) -> str:
    """The run failed with exit 2 and one `Error:` line (no traceback)."""
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), (r.output, r.exception)
    return lines[0]


def _two_tps(tmp_path) -> list[str]:
    """Copies of the TP 2 and TP 4 vLLM fixtures in tmp_path, as FILE:tp=N specs."""
    specs = []
    for tp in (2, 4):
        f = tmp_path / f"lat{tp}.json"
        f.write_text((FIX / f"vllm_latency_tp{tp}.json").read_text())
        specs.append(f"{f}:tp={tp}")
    return specs


def test_out_naming_an_input_is_refused_and_the_input_kept(tmp_path):
    """Before: --out naming a benchmark file, the --profile or the --stack file overwrote it (a stack
    file then extended itself). import-nccl-tests' refusal, reused."""
    specs = _two_tps(tmp_path)
    model = ["--model", "llama-3.1-70b"]
    lat2 = tmp_path / "lat2.json"
    before = lat2.read_text()
    assert "is an input" in _one_error(_bench(*specs, *model, "--out", lat2)) and lat2.read_text() == before
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "p", "extends": "h100-sxm"}))
    before = prof.read_text()
    line = _one_error(_bench(*specs, *model, "--profile", prof, "--out", prof))
    assert "is the --profile" in line and prof.read_text() == before
    stack = tmp_path / "s.json"
    assert _bench(*specs, *model, "--out", stack).exit_code == 0
    before = stack.read_text()
    assert "is an input" in _one_error(_bench(*specs, *model, "--stack", stack, "--out", stack))
    assert stack.read_text() == before
    # a stack file the --stack file extends is read too (writing it would make a cycle)
    (tmp_path / "d").mkdir()
    top = tmp_path / "d" / "top.json"
    top.write_text(json.dumps({"format": "tpsim-stack", "extends": "../s.json"}))
    assert "is an input" in _one_error(_bench(*specs, *model, "--stack", top, "--out", stack))
    assert stack.read_text() == before


def test_out_naming_the_model_config_is_refused_however_model_names_it(tmp_path):
    """--out naming the config.json --model reads is refused and the config kept, whether --model names
    the file, its folder or either with [:K]. Before: only the argument as given was checked, so
    `--model DIR --out DIR/config.json` overwrote the model's config with the stack file."""
    specs = _two_tps(tmp_path)
    folder = tmp_path / "llama"
    folder.mkdir()
    config = folder / "config.json"
    before = (FIX.parent / "hf" / "llama-3.1-8b" / "config.json").read_text()
    config.write_text(before)
    for model in (config, folder, f"{folder}/", f"{folder}[:2]", f"{config}[:4]"):
        line = _one_error(_bench(*specs, "--model", model, "--out", config))
        assert line == (f"Error: --out {config} is an input ({config}): the import would overwrite what it reads; "
                        f"choose another --out"), (model, line)
        assert config.read_text() == before, model
    # another --out beside the config is written
    assert _bench(*specs, "--model", folder, "--out", folder / "stack.json").exit_code == 0
    assert config.read_text() == before


def test_out_is_checked_before_any_work_like_every_writer(tmp_path):
    """Before: `--out -` printed the stack between the summary lines. A missing folder is made when the
    stack file is written, as by every writer (fileio/policy.py check_output), and not for a run that
    fails; a file on the way is refused up front."""
    specs = _two_tps(tmp_path)
    (tmp_path / "f").write_text("")
    line = _one_error(_bench(*specs, "--model", "llama-3.1-70b", "--out", tmp_path / "f" / "x.json"))
    assert "Not a directory" in line
    line = _one_error(_bench(*specs, "--model", "nope", "--out", tmp_path / "nodir" / "x.json"))
    assert "nope" in line and not (tmp_path / "nodir").exists()
    assert _bench(*specs, "--model", "llama-3.1-70b", "--out", tmp_path / "new" / "x.json").exit_code == 0
    assert (tmp_path / "new" / "x.json").is_file()
    line = _one_error(_bench(*specs, "--model", "llama-3.1-70b", "--out", "-"))
    assert "--out -: this command writes a file" in line


def test_special_input_files_are_refused_by_the_input_policy(tmp_path):
    """Before: /dev/zero read until a MemoryError, a FIFO hung the import."""
    (_, spec4) = _two_tps(tmp_path)
    line = _one_error(_bench("/dev/zero:tp=2", spec4, "--model", "llama-3.1-70b", "--out", tmp_path / "o.json"))
    assert "engine benchmark /dev/zero is a character device" in line
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    line = _one_error(_bench(f"{fifo}:tp=2", spec4, "--model", "llama-3.1-70b", "--out", tmp_path / "o.json"))
    assert f"engine benchmark {fifo} is a FIFO" in line
    bad = tmp_path / "latin.json"
    bad.write_bytes(b'{"avg_latency": 1.0, "latencies": [1.0], "percentiles": {"\xe9": 1}}')
    line = _one_error(_bench(f"{bad}:tp=2", spec4, "--model", "llama-3.1-70b", "--out", tmp_path / "o.json"))
    assert "not UTF-8 text (byte 0xe9" in line


def test_a_missing_shape_names_the_file_spec_to_write(tmp_path):
    """Before: 'give it as sg.jsonl line 1:batch=N', which is no file spec."""
    sg = tmp_path / "sg.jsonl"
    sg.write_text('{"median_decode_latency": 0.01, "input_len": 32, "output_len": 8}\n')
    (_, spec4) = _two_tps(tmp_path)
    line = _one_error(_bench(f"{sg}:tp=2", spec4, "--model", "llama-3.1-70b", "--out", tmp_path / "o.json"))
    assert f"{sg} line 1: the file does not say its batch; give it as {sg}:tp=2,batch=N (or --batch N" in line


@pytest.mark.parametrize("spec_tail, extra, says", [
    (":tp=2,batch=99999999", [], "{f}:tp=2,batch=99999999: batch must be in 1..65536"),
    (":tp=2,tp=4", [], "{f}:tp=2,tp=4: tp is given twice"),
    (":tp=2", ["--batch", "0"], "Error: --batch must be in 1..65536"),
    (":tp=2", ["--output-len", "0"], "Error: --output-len must be in 1..1048576"),
    (":tp=2000", [], "{f}:tp=2000: tp must be in 1..1024"),
])
def test_file_spec_and_option_values_name_their_bound_and_their_source(tmp_path, spec_tail, extra, says):
    """Before: no upper bound in the message, a repeated key silently kept its last value, and a bad
    --batch blamed the first file."""
    (spec2, spec4) = _two_tps(tmp_path)
    f = spec2.rpartition(":")[0]
    line = _one_error(_bench(f + spec_tail, spec4, *extra, "--model", "llama-3.1-70b", "--out", tmp_path / "o.json"))
    assert says.format(f=f) in line
