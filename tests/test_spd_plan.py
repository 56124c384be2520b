"""`tpsim spd-plan` on tiny random Hugging Face Llamas (4 blocks, Llama-3 rope scaling) written by
transformers' save_pretrained, run by the real launcher on 2 gloo ranks: the per-block table,
the chosen spd:LIST and the predicted speedup; the baseline perplexity against transformers' own
loss on the same windows; a planted sensitive block ranked first; a kill mid-run and the resume;
and the one-line errors (exit 2) that come before any rank starts."""
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch  # noqa: E402

from tpsim.cli import main  # noqa: E402
from tpsim.hw.spd.select import (Budget, choose, distill, parse_budget, partial_path,  # noqa: E402
                                 read_partial, spd_spec)
from tpsim.sim.schedule.schedules.spd import blocks as spd_blocks  # noqa: E402
from tpsim.hw.spd.text import load_tokens  # noqa: E402

import hf_models  # noqa: E402
import procs  # noqa: E402

pytestmark = [pytest.mark.hw]
ROOT = Path(__file__).resolve().parent.parent
LAYERS, PLANTED = 4, 1
RUN = ["--tp", "2", "--device", "cpu", "--backend", "gloo", "--seq-len", "32", "--windows", "2"]


def _llama(layers: int, plant: int | None = None, train_on: torch.Tensor | None = None):
    """hf_models' tiny Llama with `layers` blocks, initialized as hf_models.build does. With `plant`,
    that block's o_proj and down_proj are scaled x20: its attention output dominates the residual
    and the MLP reading it dominates what the block adds, so feeding the MLP rank r's partial P_r
    instead of the summed P (what SPD does) changes the block's output the most. With `train_on`
    ([windows, seq] ids), 40 Adam steps memorize those windows (ppl ~1.03): a random model's
    perplexity is noise that a dropped sync moves either way; a trained one's only rises."""
    cfg_cls, model_cls, kw = hf_models.classes("llama")
    torch.manual_seed(0)
    model = model_cls(cfg_cls(**dict(kw, num_hidden_layers=layers), dtype="float32")).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in n:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
        if plant is not None:
            block = model.model.layers[plant]
            block.self_attn.o_proj.weight.mul_(20.0)
            block.mlp.down_proj.weight.mul_(20.0)
    if train_on is not None:
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(40):
            loss = model(input_ids=train_on, labels=train_on).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
    return model


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    d = tmp_path_factory.mktemp("spd-plan")
    rng = random.Random(0)
    text = d / "text.txt"
    text.write_text(" ".join("".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 8))) for _ in range(60)))
    windows = torch.tensor(list(text.read_bytes()[:64])).view(2, 32)    # what RUN measures (bytes mod 256)
    models = {"plain": _llama(LAYERS), "planted": _llama(LAYERS, PLANTED, train_on=windows)}
    for name, m in models.items():
        m.save_pretrained(d / name)
    return d, models, text


def _plan(*args) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["spd-plan", *args])
    return r.exit_code, r.output


@pytest.mark.slow
def test_plan_prints_table_list_and_speedup(fixture, tmp_path):
    d, models, text = fixture
    out = tmp_path / "plan.json"
    code, text_out = _plan("--checkpoint", str(d / "plain"), "--text", str(text), *RUN, "--out", str(out),
                           "--plot", str(tmp_path / "s.png"), "--max-ppl-increase", "2%")
    assert code == 0, text_out
    r = json.loads(out.read_text())
    # the table: a row per block, then the chosen list and its price
    rows = [line for line in text_out.splitlines() if line.startswith("│")]
    assert [int(line.split("│")[1]) for line in rows] == list(range(LAYERS))
    assert max(len(line) for line in text_out.splitlines() if line[:1] in "┏┃┡│└") <= 80   # fits 80 columns
    assert f"chosen: {r['schedule']}" in text_out and "x faster" in text_out and "bytes mod 256" in text_out
    assert r["price"]["speedup"] > 1.0 if r["chosen"] else r["price"]["speedup"] == 1.0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    assert not Path(partial_path(str(out))).exists()            # written: nothing left to resume
    # the harness's baseline perplexity (2 gloo ranks, standard) is transformers' on the same windows
    tok = load_tokens(str(text), str(d / "plain"), 256, 32, 2)
    ids = torch.tensor(tok.ids).view(tok.windows, tok.seq_len)
    with torch.no_grad():
        nll = sum(models["plain"](input_ids=ids[w:w + 1], labels=ids[w:w + 1]).loss.item() * 31 for w in range(2))
    assert r["baseline_ppl"] == pytest.approx(math.exp(nll / 62), rel=1e-4)
    # the greedy sets: each chosen block's set perplexity is measured and within the budget
    limit = r["baseline_ppl"] * 1.02
    chosen = sorted((b for b in r["blocks"] if b["chosen"]), key=lambda b: b["order"])
    assert [b["layer"] for b in chosen] == r["chosen"]
    assert all(b["cumulative_ppl"] <= limit for b in chosen)
    assert r["final_ppl"] == (chosen[-1]["cumulative_ppl"] if chosen else r["baseline_ppl"])
    assert r["distill"] == [b["layer"] for b in r["blocks"] if b["ppl"] > limit]


@pytest.mark.slow
def test_planted_sensitive_block_ranks_first(fixture):
    d, _, text = fixture
    code, out = _plan("--checkpoint", str(d / "planted"), "--text", str(text), *RUN, "--blocks", "2", "--json")
    assert code == 0, out
    r = json.loads(out)
    by_layer = {b["layer"]: b for b in r["blocks"]}
    assert by_layer[PLANTED]["rank"] == 1, [(b["layer"], b["sensitivity_pct"]) for b in r["blocks"]]
    # trained, the planted block costs ~200% alone, every other block under ~3% (measured 2.9, 0, 0)
    others = max(b["sensitivity_pct"] for b in r["blocks"] if b["layer"] != PLANTED)
    assert by_layer[PLANTED]["sensitivity_pct"] > 10 * max(others, 1.0)
    assert PLANTED not in r["chosen"] and len(r["chosen"]) == 2 and r["distill"] == []   # --blocks: no ppl budget


@pytest.mark.slow
def test_resume_after_kill(fixture, tmp_path):
    """Rank 1 hangs at the start of its 4th pass (test hook); the launcher is SIGKILLed there, with
    the baseline and 2 blocks in the partial file. The rerun reads those 3 back and measures the rest."""
    d, _, text = fixture
    out = tmp_path / "plan.json"
    part = partial_path(str(out))
    args = [sys.executable, str(ROOT / "cli.py"), "spd-plan", "--checkpoint", str(d / "plain"), "--text", str(text),
            *RUN, "--out", str(out), "--blocks", "1"]
    p = subprocess.Popen(args + ["--fault", "1:pass3:hang"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end and p.poll() is None:
            if os.path.exists(part) and len(Path(part).read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        assert p.poll() is None, p.stdout.read().decode()
        time.sleep(0.5)                                      # rank 1 is hanging: no 4th line comes
    finally:
        os.kill(p.pid, signal.SIGKILL)                       # the launcher we started; its ranks follow it
        p.wait()
    lines = Path(part).read_text().splitlines()
    assert len(lines) == 3 and not out.exists()
    before = {json.loads(x)["rows"][0]["spec"]: json.loads(x)["rows"][0]["ppl"] for x in lines}
    assert set(before) == {"standard", "spd:[0]", "spd:[1]"}
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    # 1 + 4 blocks + 1 set = 6 passes, 3 read back
    assert res["resumed"] == 3 and res["passes"] == 6
    assert res["baseline_ppl"] == before["standard"]
    assert [b["ppl"] for b in res["blocks"][:2]] == [before["spd:[0]"], before["spd:[1]"]]
    assert not os.path.exists(part) and json.loads(out.read_text())["schedule"] == res["schedule"]


@pytest.mark.slow
@pytest.mark.parametrize("given_out", [False, True], ids=["no --out", "--out"])
def test_ctrl_c_exits_130_and_keeps_only_the_users_partial_file(fixture, tmp_path, given_out):
    """Ctrl-C (SIGINT) of a real spd-plan launcher with 3 passes done (rank 1 hangs at its 4th, a test
    hook, so the ranks are surely at work): every rank is stopped, `Aborted! ...` and exit 130, as bench.
    The partial file it made for itself (no --out) is removed; the one --out names stays (the user's
    resumable state), and the message says so. Before: click's bare "Aborted!", exit 1, and
    /tmp/tpsim-spd-plan-*.partial.jsonl left behind."""
    d, _, text = fixture
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "plan.json"
    args = ["spd-plan", "--checkpoint", str(d / "plain"), "--text", str(text), *RUN, "--blocks", "1",
            "--timeout-s", "120", "--fault", "1:pass3:hang", *(["--out", str(out)] * given_out)]
    found = {"part": Path(partial_path(str(out))) if given_out else None}

    def three_passes_done(ranks: list[int]) -> bool:
        found["part"] = found["part"] or next(tmp.glob("tpsim-spd-plan-*.partial.jsonl"), None)
        part = found["part"]
        return len(ranks) == 2 and bool(part) and part.exists() and len(part.read_text().splitlines()) >= 3

    rc, stdout, err, _ = procs.ctrl_c_when(args, tmp_path, tmp, three_passes_done, within_s=240)
    part = found["part"]
    assert rc == 130, err
    (run,) = tmp.glob("tpsim-run-*")              # kept and named: rank 1 said it was hanging ([tpsim] line)
    said = [f"Aborted! all ranks stopped; rank logs: {run}/rank*.log"]
    if given_out:
        said.append(f"3 finished pass(es) are kept in {part}: rerun the same command to continue")
        assert len(part.read_text().splitlines()) == 3 and not out.exists()
    else:
        assert list(tmp.glob("tpsim-spd-plan-*")) == []
    assert err.strip().splitlines() == said and stdout == ""


@pytest.mark.parametrize("layers, spec", [((), "standard"), ((7,), "spd:[7]"), ((2, 3), "spd:2-3"),
                                          ((5, 1, 3, 4), "spd:1,3-5"), ((0, 2, 4), "spd:0,2,4")])
def test_spd_spec_round_trips_through_the_registry_parser(layers, spec):
    assert spd_spec(layers) == spec
    if layers:
        assert spd_blocks(spec, spec.partition(":")[2], 8) == tuple(sorted(layers))


def test_greedy_choice_measures_sets_and_stops_at_the_budget():
    """Baseline 10, +5% budget: limit 10.5. Order by solo ppl: 3 (10.01), 1 (10.05), 0 (10.5), 2 (12).
    Sets measured: {3} 10.02, {1,3} 10.3, {0,1,3} 10.6 > 10.5: stop there; block 2 (12 alone) is
    the one over the budget on its own (block 0, exactly at the limit, is not)."""
    solo = {0: 10.5, 1: 10.05, 2: 12.0, 3: 10.01}
    sets = {"spd:[3]": 10.02, "spd:1,3": 10.3, "spd:0-1,3": 10.6}
    asked = []
    budget = parse_budget("5%", None, 4)
    chosen, cum, stopped = choose(10.0, solo, budget, lambda spec: asked.append(spec) or sets[spec])
    assert (chosen, cum, asked) == ([3, 1], {3: 10.02, 1: 10.3}, list(sets))
    assert stopped == {"layer": 0, "ppl": 10.6, "why": "the measured set would exceed the budget"}
    assert distill(10.0, solo, budget) == [2]
    # absolute points: +0.2 -> limit 10.2; block 1's set (10.3) is over it
    chosen, _, stopped = choose(10.0, solo, parse_budget("0.2", None, 4), lambda spec: sets[spec])
    assert chosen == [3] and stopped["layer"] == 1
    # a block count: no perplexity limit, no distill marks
    chosen, _, stopped = choose(10.0, solo, Budget(blocks=3), lambda spec: sets[spec])
    assert chosen == [3, 1, 0] and stopped is None and distill(10.0, solo, Budget(blocks=3)) == []


def test_partial_file_keeps_only_matching_digest(tmp_path):
    p = tmp_path / "x.partial.jsonl"
    row = {"spec": "standard", "phase": "baseline", "nll": 10.0, "tokens": 7}       # as append_partial writes it
    p.write_text(json.dumps({"key": "aaa/standard", "rows": [row | {"ppl": 2.0}]}) + "\n"
                 + json.dumps({"key": "bbb/standard", "rows": [row | {"ppl": 3.0}]}) + "\n"
                 + '{"key": "aaa/spd:[0]", "ro')                           # torn by a kill
    assert read_partial(str(p), "aaa") == {"standard": row | {"ppl": 2.0}}


def test_the_documented_price_is_the_simulators(tmp_path):
    """docs/spd-plan.md's example (skip-marked: it needs its trained model and 2 ranks) prints a price,
    which is the simulator's alone: the config its snippet builds, priced now, gives the documented
    numbers (to test_docs' 2%; they had drifted 15% when the cost model moved)."""
    import ast
    import re
    from tpsim.hw.spd.select import price
    from tpsim.sim.model.presets import get_model
    text = (ROOT / "docs" / "spd-plan.md").read_text()
    call = ast.parse(re.search(r"transformers\.(LlamaConfig\(.*?\))\n", text, re.S).group(1)).body[0].value
    # the config the doc's snippet builds: its keyword arguments, read as literals
    transformers.LlamaConfig(**{k.arg: ast.literal_eval(k.value) for k in call.keywords}).save_pretrained(tmp_path)
    line = re.search(r"priced on h100-sxm \(TP 2, batch 1, prompt 1024, gen 512, fp16\): standard ([\d.]+) "
                     r"tok/s, (spd:1,3) ([\d.]+) tok/s: ([\d.]+)x faster \(prefill ([\d.]+)x\)", text)
    got = price(get_model(str(tmp_path)), 2, "h100-sxm", 1, 1024, 512, line.group(2))
    documented = [float(line.group(i)) for i in (1, 3, 4, 5)]
    now = [got[k] for k in ("standard_tokens_per_s", "tokens_per_s", "speedup", "prefill_speedup")]
    assert all(math.isclose(d, n, rel_tol=0.02) for d, n in zip(documented, now)), (documented, now)


@pytest.mark.parametrize("extra, message", [
    (["--text", "NOPE"], "Error: cannot read --text NOPE: No such file or directory"),
    (["--text", "DIR"], "Error: --text DIR is a directory, not a regular file"),        # was 'no such file'
    (["--text", "SHORT"], "Error: --text SHORT gives 5 tokens (bytes mod 256); 2 window(s) of --seq-len 32 need at "
                          "least 64: give a longer text or a smaller --seq-len"),
    (["--text", "TEXT", "--blocks", "5"], "Error: --blocks must be in 1..4 (the model's blocks), got 5"),
    # 0 chose no block and printed a 1.000x plan after measuring every block on the ranks
    (["--text", "TEXT", "--blocks", "0"], "Error: --blocks must be in 1..4 (the model's blocks), got 0"),
    (["--text", "TEXT", "--blocks", "-1"], "Error: --blocks must be in 1..4 (the model's blocks), got -1"),
    (["--text", "TEXT", "--blocks", "1", "--max-ppl-increase", "1%"],
     "Error: give one budget: --max-ppl-increase X or --blocks K, not both"),
    (["--text", "TEXT", "--max-ppl-increase", "lots"],
     "Error: --max-ppl-increase must be a number >= 0, X% (relative to the baseline) or X (perplexity points), "
     "got 'lots'"),
    (["--text", "TEXT", "--tp", "1"], "Error: --tp must be in 2..1024 (at TP 1 there is no all-reduce to drop), got 1"),
    ([], "Error: --text FILE is required: the text perplexity is measured on"),
])
def test_bad_inputs_one_line_exit_2(fixture, tmp_path, extra, message):
    d, _, text = fixture
    (tmp_path / "short.txt").write_text("hello")
    sub = {"NOPE": str(tmp_path / "nope.txt"), "SHORT": str(tmp_path / "short.txt"), "TEXT": str(text),
           "DIR": str(tmp_path)}
    extra = [sub.get(x, x) for x in extra]
    code, out = _plan("--checkpoint", str(d / "plain"), *RUN, *extra)
    for k, v in sub.items():
        message = message.replace(f" {k}", f" {v}")
    assert code == 2 and out.strip().splitlines() == [message], out


def test_a_partial_line_that_is_not_its_pass_is_measured_again(tmp_path):
    """Issue 48 item 3, spd-plan's partial file as the sweep's checkpoint: a line under a pass's key that
    says another spec, or holds a NaN, negative or missing number, is not read into the plan."""
    part = str(tmp_path / "p.partial.jsonl")
    row = {"spec": "spd:[1]", "phase": "solo", "nll": 10.0, "tokens": 7, "ppl": 4.2}
    bad = {"spd:[2]": dict(row),                                   # another pass's row under this key
           "spd:[3]": dict(row, spec="spd:[3]", nll=float("nan")), "spd:[4]": dict(row, spec="spd:[4]", ppl=-1.0),
           "spd:[5]": dict(row, spec="spd:[5]", tokens=0), "spd:[6]": dict(row, spec="spd:[6]", tokens=True),
           "spd:[7]": {k: v for k, v in dict(row, spec="spd:[7]").items() if k != "ppl"},
           "spd:[8]": dict(row, spec="spd:[8]", phase="x")}
    lines = [{"key": "d/spd:[1]", "rows": [row]}] + [{"key": f"d/{k}", "rows": [r]} for k, r in bad.items()]
    Path(part).write_text("".join(json.dumps(x, allow_nan=True) + "\n" for x in lines))
    assert read_partial(part, "d") == {"spd:[1]": row}
