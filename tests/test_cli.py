"""The CLI as users call it: outputs, JSON shape, and one-line errors with exit code 2."""
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_the_lazy_table_lists_every_command_with_its_own_short_help():
    """`tpsim --help` shows the stored short help (cli.COMMANDS) without importing the commands: each
    stored line is the command's own, its name is the table's, and --help lists every command."""
    from tpsim.cli import COMMANDS
    from tpsim.commands.lazy import load
    from tpsim.commands.profiles import IMPORTS
    for table in (COMMANDS, IMPORTS):
        for name, (path, short) in table.items():
            cmd = load(path)
            assert (cmd.name, short) == (name, cmd.get_short_help_str(200)), name
    listed = [line.split()[0] for line in run("--help").output.split("Commands:")[1].strip().splitlines()]
    assert listed == sorted(COMMANDS) and len(listed) >= 12
    assert run("profiles", "--help").exit_code == 0 and "import-nccl-tests" in run("profiles", "--help").output
    assert run("no-such-command").exit_code == 2


def test_every_command_turns_user_errors_into_one_line_exit_2(tmp_path):
    """One user-error path (commands.errors.user_errors) on every command of the table and its groups;
    it prints the message as raised and names the path of an OSError."""
    import click

    from tpsim.cli import COMMANDS
    from tpsim.commands.errors import UserError, user_errors
    from tpsim.commands.lazy import load

    def leaves(cmd):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            return [leaf for n in cmd.list_commands(ctx) for leaf in leaves(cmd.get_command(ctx, n))]
        return [cmd]
    cmds = [leaf for path, _ in COMMANDS.values() for leaf in leaves(load(path))]
    assert len(cmds) >= 15 and [c.name for c in cmds if not getattr(c.callback, "user_errors", False)] == []

    @click.command()
    @click.argument("what")
    @user_errors
    def probe(what):
        if what == "value":
            raise UserError("a --flag  that is wrong")
        open(tmp_path / "no" / "such")
    for what, line in (("value", "Error: a --flag  that is wrong"), ("path", f"Error: cannot use {tmp_path / 'no' / 'such'}: "
                                                               f"No such file or directory")):
        r = CliRunner().invoke(probe, [what])
        assert (r.exit_code, r.output.strip()) == (2, line)


def test_predict_json_shape():
    r = run("predict", "--model", "llama-3.1-70b", "--tp", "8", "--profile", "h100-sxm", "--batch", "4",
            "--prompt", "1024", "--gen", "512", "--schedule", "standard", "--schedule", "ladder",
            "--schedule", "parallel", "--schedule", "upper-bound", "--schedule", "spd:0.7", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {k: out[k] for k in ("model", "tp", "profile", "batch", "prompt_len", "gen_len")} == {
        "model": "llama-3.1-70b", "tp": 8, "profile": "h100-sxm", "batch": 4, "prompt_len": 1024, "gen_len": 512}
    assert [s["schedule"] for s in out["schedules"]] == ["standard", "ladder", "parallel", "upper-bound", "spd:0.7"]
    for s in out["schedules"]:
        # a schedule that changes the model carries its gain over the best that keeps it (sim/baseline.py)
        gain = {"gain_over_best_free"} if s["model_change"] in ("retrain", "drops syncs") else set()
        assert set(s) == {"schedule", "prefill_s", "decode_s", "tokens_per_s", "speedup", "exposed_comm_s",
                          "model_change", "notes", "tokens_per_s_range", "speedup_range"} | gain
        assert s["tokens_per_s"] == pytest.approx(4 * 512 / (s["prefill_s"] + s["decode_s"]))
        # the interval h100-sxm's ranged numbers give (sim/sensitivity.py) holds the value
        assert s["tokens_per_s_range"][0] <= s["tokens_per_s"] <= s["tokens_per_s_range"][1]
    assert out["schedules"][0]["speedup"] == 1.0
    assert [s["model_change"] for s in out["schedules"]] == ["none", "retrain", "retrain", "n/a", "drops syncs"]


def test_predict_spd_that_drops_no_block_is_standard_and_says_none():
    """spd:0 (and spd:0.0) drops no all-reduce: the same pass, model and outputs as standard, so its model
    change is none, in --json and in the table's column; spd:0.5 still drops syncs."""
    specs = ["--schedule", "standard", "--schedule", "spd:0", "--schedule", "spd:0.0", "--schedule", "spd:0.5"]
    r = run("predict", "--model", "llama-3.1-8b", "--tp", "2", "--gen", "16", *specs, "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["schedules"]
    assert [s["model_change"] for s in rows] == ["none", "none", "none", "drops syncs"]
    assert rows[1]["tokens_per_s"] == rows[2]["tokens_per_s"] == rows[0]["tokens_per_s"]
    t = run("predict", "--model", "llama-3.1-8b", "--tp", "2", "--gen", "16", *specs)
    assert t.exit_code == 0, t.output
    table = t.output.split("tokens/s interval")[0]                      # the main table, not the intervals'
    change = {line.split()[0]: line.split()[-1] for line in table.splitlines()
              if line.split()[:1] in (["spd:0"], ["spd:0.0"], ["spd:0.5"])}
    assert change == {"spd:0": "none", "spd:0.0": "none", "spd:0.5": "syncs"}    # "drops syncs": its last word


def test_predict_no_retraining_schedules_say_so():
    """token-split and seq-parallel keep the model (model_change none); at batch 1 decode cannot be
    split, which the output says, and seq-parallel's padding to TP rows is shown with its cost."""
    r = run("predict", "--model", "llama-3.1-70b", "--tp", "8", "--schedule", "token-split",
            "--schedule", "seq-parallel", "--gen", "16", "--json")
    assert r.exit_code == 0, r.output
    ts, sp = json.loads(r.output)["schedules"]
    assert ts["model_change"] == sp["model_change"] == "none"
    assert ts["notes"] == ["decode of 1 sequence cannot be split along batch: runs standard"]
    assert sp["notes"][0] == ("decode pads 1 token row to 8 (TP 8): every all-gather / reduce-scatter moves "
                              "8 rows, 7 of them padding")
    assert sp["notes"][1].startswith("padding costs ")
    bad = run("predict", "--model", "llama-3.1-70b", "--tp", "8", "--schedule", "token-split:1")
    assert bad.exit_code == 2 and "token-split:N with N >= 2" in bad.output


def test_predict_without_standard_still_has_speedup():
    r = run("predict", "--model", "llama-3.1-8b", "--tp", "4", "--schedule", "ladder", "--json")
    out = json.loads(r.output)
    assert [s["schedule"] for s in out["schedules"]] == ["ladder"] and out["schedules"][0]["speedup"] > 1


def test_predict_table():
    r = run("predict", "--model", "llama-3.1-8b", "--tp", "2", "--gen", "16")
    assert r.exit_code == 0, r.output
    for s in ("standard", "ladder", "parallel", "spd:0.7", "upper-bound", "tokens/s", "speedup"):
        assert s in r.output


def test_predict_says_when_a_request_is_longer_than_the_models_context():
    """Llama 3 8B states 8192 tokens (max_position_embeddings): 8000 + 500 is priced, with a note; 7000 + 500
    has none."""
    r = run("predict", "--model", "llama-3-8b", "--tp", "1", "--prompt", "8000", "--gen", "500", "--schedule", "standard")
    assert r.exit_code == 0, r.output
    assert "prompt + gen = 8500 tokens is longer than llama-3-8b's context (8192," in " ".join(r.output.split())
    r = run("predict", "--model", "llama-3-8b", "--tp", "1", "--prompt", "7000", "--gen", "500", "--schedule", "standard")
    assert r.exit_code == 0 and "longer than" not in r.output


@pytest.mark.parametrize("args, msg", [
    (["--model", "llama-9", "--tp", "8"], "unknown model 'llama-9'; choose from: llama-3.2-1b"),
    (["--model", "llama-3.1-70b", "--tp", "8", "--profile", "nope"], "unknown profile 'nope': no built-in profile and no file of that name; built-in profiles:"),
    (["--model", "llama-2-13b", "--tp", "16"], "does not divide the 40 attention heads"),
    (["--model", "tiny", "--tp", "2", "--schedule", "ladderx"], "unknown schedule 'ladderx'; choose from"),
])
def test_user_errors_are_one_line_exit_2(args, msg):
    r = run("predict", *args)
    assert r.exit_code == 2
    assert msg in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


EMPTY_VALUES = [
    (["predict", "--model", "llama-3.1-8b", "--tp", "2", "--stack", ""], "--stack"),    # priced the default stack
    (["predict", "--model", "tiny", "--tp", "2", "--profile", ""], "--profile"),       # "unknown profile ''"
    (["predict", "--model", "", "--tp", "2"], "--model"),
    (["predict", "--model", "tiny", "--tp", "2", "--schedule", "ladder", "--schedule", ""], "--schedule"),
    (["trace", "--model", "tiny", "--tp", "2", "--collective", "", "--out", "{out}"], "--collective"),
    (["show", "--model", "tiny", "--profile", ""], "--profile"),
    (["sweep", "--model", "tiny", "--tp", "2", "--stack", "", "--out", "{out}"], "--stack"),   # ran the default
    (["sweep", "--model", "tiny", "--tp", "2", "--out", "{out}", "--plot", ""], "--plot"),     # no plot, no word
    (["sweep", "--model", "tiny", "--tp", "2", "--profile", "h100-sxm", "--profile", "", "--out", "{out}"],
     "--profile"),
    (["collective", "--group", "2", "--compare", ""], "--compare"),                    # printed no comparison
    (["models", "--show", ""], "--show"),                                              # listed every model
    (["profiles", "show", ""], "NAME"),
    (["compare", "--measured", "{out}", "--out-dir", ""], "--out-dir"),                # Path("") is "."
    # the harness commands (refused while click parses: no torch, no rank)
    (["bench", "--model", ""], "--model"),                                             # ran tiny, the default
    (["bench", "--schedule", "ladder", "--schedule", ""], "--schedule"),
    (["check", "--checkpoint", ""], "--checkpoint"),                                   # ran random weights
    (["check", "--stack", "vllm", "--fault", ""], "--fault"),
    (["spd-plan", "--checkpoint", "{out}", "--text", ""], "--text"),                   # "--text FILE is required"
    (["spd-plan", "--checkpoint", "{out}", "--text", "{out}", "--out", ""], "--out"),  # kept nothing to resume
    (["spd-plan", "--checkpoint", "{out}", "--text", "{out}", "--max-ppl-increase", ""], "--max-ppl-increase"),
    (["profiles", "import-engine-bench", "{out}", "--out", "{out}", "--model", ""], "--model"),
    (["profiles", "import-engine-bench", "", "--out", "{out}", "--model", "tiny"], "FILES..."),
    (["profiles", "import-engine-bench", "{out}", "--out", "{out}", "--model", "tiny", "--name", ""],
     "--name"),                                                                        # named it the --out's stem
]


@pytest.mark.parametrize("args, option", EMPTY_VALUES, ids=[f"{a[0]} {o}" for a, o in EMPTY_VALUES])
def test_an_empty_option_value_is_refused_naming_the_option(tmp_path, args, option):
    """An explicitly given empty value (often an unset shell variable) is a mistake, not "not given":
    one click error naming the option, from the one callback every free-text option runs
    (commands.options.not_empty), before any work and before a lookup's message about ''."""
    out = tmp_path / "out.csv"
    r = run(*[str(out) if a == "{out}" else a for a in args])
    assert (r.exit_code, r.output) == (2, f"Error: Invalid value for '{option}': must not be empty\n")
    assert not out.exists()


# parameters whose "" means something (so not_empty would be wrong): "command path param name" -> why.
# None today; an entry needs its reason.
EMPTY_ALLOWED: dict[str, str] = {}


def test_every_free_text_parameter_refuses_an_empty_value():
    """Every option and argument of the whole command tree (the `tpsim` group, recursively through its
    groups) that takes free text, a STRING or a click.Path that may not exist yet, runs
    commands.options.not_empty, so an option added later cannot read "" as "not given" again (bench,
    check, spd-plan and import-engine-bench did: `check --checkpoint ""` ran random weights). A
    click.Path(exists=True) needs none: click refuses "" itself (Path '' does not exist)."""
    import click

    from tpsim.commands.options import not_empty

    def leaves(cmd, path):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            return [leaf for n in cmd.list_commands(ctx) for leaf in leaves(cmd.get_command(ctx, n), f"{path} {n}")]
        return [(path.strip(), cmd)]
    text, missing = [], []
    for path, cmd in leaves(main, ""):
        for p in cmd.params:
            if p.type is click.STRING or (isinstance(p.type, click.Path) and not p.type.exists):
                key = f"{path} {p.name}"
                text.append(key)
                if p.callback is not not_empty and key not in EMPTY_ALLOWED:
                    missing.append(f"{key} ({'/'.join(p.opts)})")
    assert len(text) >= 60 and "bench checkpoint" in text and "profiles import-engine-bench files" in text
    assert missing == [], f"add callback=not_empty (commands/options.py) or an EMPTY_ALLOWED entry: {missing}"
    assert set(EMPTY_ALLOWED) <= set(text), "an EMPTY_ALLOWED entry names no parameter"
    with pytest.raises(click.BadParameter, match="does not exist"):          # why exists=True needs no callback
        click.Path(exists=True).convert("", None, None)


def test_out_of_memory_is_refused_with_the_numbers():
    r = run("predict", "--model", "llama-3.1-405b", "--tp", "8", "--profile", "h100-sxm")
    assert r.exit_code == 2 and "needs" in r.output and "GiB per rank" in r.output and "80.00 GiB" in r.output
    assert "Traceback" not in r.output
    assert run("predict", "--model", "llama-3.1-405b", "--tp", "8", "--profile", "h200-sxm", "--json").exit_code == 0
    assert run("predict", "--model", "llama-3.1-405b", "--tp", "8", "--no-memory-check", "--json").exit_code == 0


def test_malformed_profile(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "tpsim-profile", "version": 1, "name": ')
    r = run("predict", "--model", "tiny", "--tp", "2", "--profile", str(bad))
    assert r.exit_code == 2 and str(bad) in r.output and "not valid JSON" in r.output
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "x",
                                   "compute": {"memory_gbps": {"value": 1000, "source": "test"}}}))
    r = run("predict", "--model", "tiny", "--tp", "2", "--profile", str(partial))
    assert r.exit_code == 2 and "field '" in r.output and str(partial) in r.output


def test_partial_profile_extends_builtin(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "mine", "extends": "h100-sxm",
                             "collectives": {"tables": [{"collective": "all_reduce", "group": 8, "scope": "node",
                                                         "mode": "graph", "impl": "nccl", "bytes": [1024, 1 << 20],
                                                         "time_us": [100.0, 200.0], "source": "test"}]}}))
    slow = json.loads(run("predict", "--model", "llama-3.1-70b", "--tp", "8", "--profile", str(p), "--json").output)
    base = json.loads(run("predict", "--model", "llama-3.1-70b", "--tp", "8", "--json").output)
    assert slow["profile"] == "mine"
    assert slow["schedules"][0]["decode_s"] > base["schedules"][0]["decode_s"]


def test_show_ladder_marks_async_waits():
    r = run("show", "--schedule", "ladder", "--model", "tiny")
    assert r.exit_code == 0, r.output
    assert "L1.attn.allreduce" in r.output and "async, awaited here" in r.output


def test_show_takes_the_profile_whose_stack_defaults_its_help_names(tmp_path):
    """show's stack flags say "Default: the profile's stack_defaults, else ...": show takes the shared
    --profile (commands.options.profile_option), and the profile's stack_defaults set the ops it prints,
    under the flags, as predict prices them."""
    prof = tmp_path / "filled.json"
    prof.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "filled", "extends": "h100-sxm",
                                "stack_defaults": {"kv": "filled"}}))
    help_text = run("show", "--help").output
    assert "--profile" in help_text and "[default: h100-sxm]" in help_text
    point = ("show", "--model", "tiny", "--tp", "2")
    plain, mine, flag = run(*point), run(*point, "--profile", str(prof)), run(*point, "--profile", str(prof),
                                                                            "--kv", "static")
    for r in (plain, mine, flag):
        assert r.exit_code == 0, r.output
    # decode step 1 over the whole static cache (1024 + 512) or its filled part (1024 + 1)
    assert "kv_len=1536" in plain.output and "kv_len=1025" not in plain.output
    assert "kv_len=1025" in mine.output and "kv_len=1536" not in mine.output
    assert "kv_len=1536" in flag.output                                    # a flag wins over the profile
    p = run("predict", "--model", "tiny", "--tp", "2", "--profile", str(prof), "--schedule", "standard", "--json")
    assert json.loads(p.output)["stack"]["kv"] == "filled"
    bad = run(*point, "--profile", "nope")
    assert bad.exit_code == 2 and "unknown profile 'nope'" in bad.output


def test_trace_writes_perfetto_json(tmp_path):
    out = tmp_path / "t.json"
    r = run("trace", "--model", "tiny", "--tp", "2", "--schedule", "ladder", "--prompt", "8", "--gen", "4",
            "--out", str(out))
    assert r.exit_code == 0, r.output
    ev = json.loads(out.read_text())["traceEvents"]
    spans = [e for e in ev if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1}                       # a track per rank
    assert {e["tid"] for e in spans} >= {0, 1}                       # and per stream
    assert {e["args"]["phase"] for e in spans} == {"prefill", "decode"}


def test_trace_holds_the_host_lane_predict_prices(tmp_path):
    """A serving stack's host lane is on the trace (a "host" track per rank) and in its step times,
    which equal predict's: vLLM's in series (the lead before the pass, the output work after),
    TensorRT-LLM's overlapped (the lane beside the pass, preparing the next step)."""
    point = ["--model", "llama-3.1-8b", "--tp", "2", "--batch", "8", "--prompt", "32", "--gen", "2", "--schedule", "ladder"]
    for stack, names in (("vllm", {"host.lead", "host.output"}), ("trtllm", {"host.next"})):
        out = tmp_path / f"{stack}.json"
        r = run("trace", "--stack", stack, *point, "--out", str(out))
        assert r.exit_code == 0, r.output
        p = json.loads(run("predict", "--stack", stack, *point, "--json").output)["schedules"][0]
        decode_ms = float(r.output.split("decode ")[1].split(" ms")[0])
        assert decode_ms == pytest.approx(p["decode_s"] * 1e3, abs=1e-3)
        spans = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
        host = [e for e in spans if e["name"].startswith("host.")]
        assert {e["name"] for e in host} == names and {e["pid"] for e in host} == {0, 1}
        dec = [e for e in spans if e["args"]["phase"] == "decode"]
        first_gpu = min(e["ts"] for e in dec if not e["name"].startswith("host."))
        lead = [e for e in host if e["name"] == "host.lead" and e["args"]["phase"] == "decode" and e["pid"] == 0]
        if stack == "vllm":                     # in series: the pass starts after the lead
            assert lead[0]["dur"] > 0 and first_gpu == pytest.approx(lead[0]["ts"] + lead[0]["dur"], abs=1e-6)


def test_profiles_and_models_list():
    r = run("profiles", "list")
    assert r.exit_code == 0 and "h100-sxm" in r.output
    r = run("profiles", "show", "h100-sxm")
    assert r.exit_code == 0 and "datasheet" in r.output
    r = run("models")
    assert r.exit_code == 0 and "llama-3.1-405b" in r.output


def test_sweep_and_show_take_the_stack_flags(tmp_path):
    """The stack flags are declared once (commands.options) and reach sweep's points and show's ops."""
    flags = ("--no-compile", "--attention", "flash", "--kv", "filled")
    r = run("sweep", "--model", "tiny", "--tp", "2", "--schedule", "ladder", "--out", str(tmp_path / "s.csv"), *flags)
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "s.json").read_text())
    p = run("predict", "--model", "tiny", "--tp", "2", "--schedule", "standard", "--schedule", "ladder", "--json", *flags)
    assert p.exit_code == 0, p.output
    want = {s["schedule"]: s["tokens_per_s"] for s in json.loads(p.output)["schedules"]}
    assert {r["schedule"]: r["tokens_per_s"] for r in rows} == pytest.approx(want)
    plain = run("sweep", "--model", "tiny", "--tp", "2", "--schedule", "ladder", "--out", str(tmp_path / "p.csv"))
    assert plain.exit_code == 0, plain.output
    assert json.loads((tmp_path / "p.json").read_text())[0]["tokens_per_s"] != pytest.approx(want["standard"])
    # decode step 1 reads the filled KV (prompt 1024 + 1 token), not the whole static cache (1536)
    s = run("show", "--model", "tiny", "--tp", "2", *flags)
    assert s.exit_code == 0, s.output
    assert "kv_len=1025" in s.output and "kv_len=1536" not in s.output
