"""The inputs bench/fuzz_cli.py feeds tpsim (issue 48): a seed of every file kind (tests/fixtures/fuzz/README.md),
hostile values, and the mutations of a JSON document or a text file; `case` writes one mutated file of a
kind into a folder and returns the commands that read it. Deterministic in its random.Random."""
from __future__ import annotations

import copy
import json
import random
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
FZ = FIX / "fuzz"
SEEDS = {
    "profile": [FZ / "profile-small.json", FIX / "compare" / "profile.json", ROOT / "sim/hardware/profiles/l40s-pcie.json"],
    "hf_config": sorted(FIX.glob("hf/*/config.json")),
    "stack": [FZ / "stack-vllm-host.json", FZ / "stack-chain.json"],
    "nccl_text": sorted(FIX.glob("nccl_tests/*.txt")),
    "nccl_json": sorted(FIX.glob("nccl_tests/*.json")),
    "engine_bench": [FIX / "engine_bench" / "vllm_latency_tp2.json", FIX / "engine_bench" / "sglang_one_batch_tp2.jsonl"],
    "measured": [FIX / "compare" / "measured-tiny-tp2.json"],
    "sweep_checkpoint": [],            # made at the start (its keys digest this code)
    "state": [FIX / "calib" / "state-tiny-tp2.json"],
    "safetensors": [],                 # made at the start from tiny-llama3-v5's config
    "spd_text": [FZ / "spd-text.txt"],
    "cli": [],                         # random arguments to every command: bench/fuzz_cli.py cli_args
}

# ---------------------------------------------------------------- hostile values
NUMBERS = [0, -1, 1, 2, 3, 7, 0.5, 1.5, 1e-320, 1e-300, 1e-9, 1e9, 1e308, -1e308, 2 ** 31, 2 ** 63 - 1, 9.2e18]
LITERALS = ["NaN", "Infinity", "-Infinity", "1" + "0" * 5000, "1e400", "-0.0", "01"]
TEXTS = ["", " ", "x", "yes", "false", "null", "[/]", "[bold]x", "\x1b[2J", "\x1b]0;t\x07", "\u202e", "é漢", "a" * 3000,
         "../../etc/passwd", "/dev/zero", "-", "auto", "h100-sxm", "vllm", "tiny", "spd:0.5"]


def hostile(rng: random.Random):
    pick = rng.randrange(9)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick in (1, 2):
        return rng.choice(NUMBERS)
    if pick == 3:
        return ("@@literal", rng.choice(LITERALS))
    if pick in (4, 5):
        return rng.choice(TEXTS)
    if pick == 6:
        return rng.choice([[], {}, [1, 2], ["x"], {"a": 1}, [[]], [None]])
    if pick == 7:
        deep: list = []
        for _ in range(rng.choice([70, 200])):
            deep = [deep]
        return deep
    return [0] * rng.choice([3000, 120_000])


def dumps(doc) -> str:
    """JSON text with ("@@literal", text) written as that literal (NaN, a 5,000-digit number, ...)."""
    marks: dict[str, str] = {}

    def walk(v):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "@@literal":
            marks[f"@@{len(marks)}@@"] = v[1]
            return f"@@{len(marks) - 1}@@"
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return [walk(x) for x in v] if isinstance(v, list) else v
    text = json.dumps(walk(doc), ensure_ascii=False)
    for key, lit in marks.items():
        text = text.replace(f'"{key}"', lit)
    return text


def _nodes(v, out, parent=None, key=None, depth=0):
    out.append((parent, key, v))
    if depth < 12 and isinstance(v, dict):
        for k, x in v.items():
            _nodes(x, out, v, k, depth + 1)
    elif depth < 12 and isinstance(v, list):
        for i, x in enumerate(v[:40]):
            _nodes(x, out, v, i, depth + 1)
    return out


def nearby(v, rng: random.Random):
    """A value of the same type as `v`, moved: what a hand edit or a typo makes (often still valid)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return type(v)(v * rng.choice([0, -1, 2, 10, 1e6, 1e-6, 0.5])) if isinstance(v, float) else \
            v * rng.choice([0, -1, 2, 3, 10, 1000, 10 ** 9])
    if isinstance(v, str):
        return rng.choice([v.upper(), v + "x", v[:-1], "", v + "\x1b[2J", v * 50])
    return hostile(rng)


def mutate_json(doc, rng: random.Random) -> str:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        parent, key, v = rng.choice(_nodes(doc, [])[1:] or [(None, None, doc)])
        if parent is None:
            doc = hostile(rng)
            break
        op = rng.random()
        if op < 0.3:
            parent[key] = nearby(v, rng)
        elif op < 0.6:
            parent[key] = hostile(rng)
        elif op < 0.75:
            parent.pop(key) if isinstance(parent, dict) else parent.pop(key)
        elif op < 0.85 and isinstance(parent, dict):
            parent[rng.choice(["extra", "x\x1b[2J", "", str(key) + "_"])] = hostile(rng)
        elif isinstance(v, (dict, list)):
            parent[key] = list(v.values()) if isinstance(v, dict) else {str(i): x for i, x in enumerate(v)}
        else:
            parent[key] = [v]
    text = dumps(doc)
    if rng.random() < 0.1:
        text = mutate_text(text, rng).decode("utf-8", "replace")
    return text


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")


def mutate_text(text: str, rng: random.Random) -> bytes:
    lines = text.splitlines() or [""]
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        op = rng.randrange(8)
        if op in (0, 1) and _NUMBER.search(lines[i]):
            ms = list(_NUMBER.finditer(lines[i]))
            m = rng.choice(ms)
            new = rng.choice(["-1", "0", "nan", "inf", "1e300", "9" * 5000, "x", "1.5", "-0", "N/A", "99999999999"])
            lines[i] = lines[i][:m.start()] + new + lines[i][m.end():]
        elif op == 2:
            del lines[i]
            lines = lines or [""]
        elif op == 3:
            lines.insert(i, lines[i])
        elif op == 4:
            lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
        elif op == 5:
            lines.insert(i, rng.choice(["\x1b[2J", "# nThread 1 nGpus 1", "# Rank 0 Group 0 Pid 1 on h device 0 [0x1] X",
                                        "node01:1:1 [0] NCCL INFO x", "{", "[1,0]<stdout>: 8 2 float sum -1 1 1 1 0"]))
        elif op == 6:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] += rng.choice([" extra", "\t\t", " 0", "\x00", "\x1b]0;t\x07"])
    data = "\n".join(lines).encode()
    if rng.random() < 0.1:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice([b"\xff\xfe", b"\xe9", b"\x00" * 3]) + data[at:]
    if rng.random() < 0.05:
        data = data[:rng.randrange(len(data) + 1)]
    return data


# ---------------------------------------------------------------- cases: (files to write, argvs to run)

def _seed(kind: str, rng: random.Random) -> Path:
    return rng.choice(SEEDS[kind])


def mutated(src: Path, rng: random.Random, as_text: float = 0.2) -> bytes:
    """The seed `src` mutated as JSON (mostly) or as text (a JSON seed that does not parse: always)."""
    text = src.read_text()
    try:
        doc = json.loads(text)
    except ValueError:
        return mutate_text(text, rng)
    return mutate_text(text, rng) if rng.random() < as_text else mutate_json(doc, rng).encode()


def _json_case(kind: str, rng, w: Path) -> str:
    src = _seed(kind, rng)
    f = w / src.name
    f.write_bytes(mutated(src, rng) if rng.random() < 0.97 else b"")
    return str(f)


SMALL = ["--gen", "4", "--prompt", "8"]


def case(kind: str, rng: random.Random, w: Path, env: dict) -> list[list[str]]:
    if kind == "profile":
        f = _json_case(kind, rng, w)
        return [rng.choice([["predict", "--model", "tiny", "--tp", "2", *SMALL, "--profile", f, "--json"],
                            ["predict", "--model", "llama-3.1-8b", "--tp", "8", *SMALL, "--exact", "--profile", f],
                            ["profiles", "show", f],
                            ["collective", "--group", rng.choice(["2", "8", "16"]), "--bytes", "1K", "--bytes", "64M",
                             "--profile", f]])]
    if kind == "hf_config":
        (w / "m").mkdir()
        f = w / "m" / "config.json"
        shutil.move(_json_case(kind, rng, w), f)          # a snapshot folder holding the mutated config.json
        return [rng.choice([["predict", "--model", str(w / "m"), "--tp", rng.choice(["1", "2", "4"]), *SMALL, "--json"],
                            ["models", "--show", str(w / "m")],
                            ["show", "--model", str(f), "--tp", "2", "--gen", "4"],
                            ["predict", "--model", f"{w / 'm'}[:1]", "--tp", "1", *SMALL]])]
    if kind == "stack":
        shutil.copy(FZ / "stack-vllm-host.json", w / "stack-vllm-host.json")      # the chain's base, intact
        f = _json_case(kind, rng, w)
        return [rng.choice([["predict", "--model", "tiny", "--tp", "2", *SMALL, "--stack", f],
                            ["show", "--model", "tiny", "--gen", "4", "--stack", f],
                            ["trace", "--model", "tiny", "--tp", "2", *SMALL, "--stack", f, "--out", str(w / "t.json")]])]
    if kind in ("nccl_text", "nccl_json"):
        src = _seed(kind, rng)
        f = w / src.name
        f.write_bytes(mutated(src, rng, as_text=1.0 if kind == "nccl_text" else 0.3))
        return [rng.choice([["profiles", "import-nccl-tests", str(f), "--extends", "h100-sxm", "--out", str(w / "o.json")],
                            ["collective", "--group", rng.choice(["4", "8", "16"]), "--mode", "nccl", "--compare", str(f)]])]
    if kind == "engine_bench":
        src = _seed(kind, rng)
        f = w / src.name
        f.write_bytes(mutated(src, rng, as_text=1.0 if src.suffix == ".jsonl" else 0.2))
        other = FIX / "engine_bench" / ("vllm_latency_tp4.json:tp=4" if src.suffix == ".json" else "sglang_one_batch_tp8.jsonl:tp=8")
        return [["profiles", "import-engine-bench", f"{f}:tp=2", str(other), "--model", "llama-3.1-70b",
                 "--out", str(w / "s.json")]]
    if kind == "measured":
        f = _json_case(kind, rng, w)
        return [["compare", "--profile", str(FIX / "compare" / "profile.json"), "--measured", f,
                 "--out-dir", str(w / "cmp")]]
    if kind == "sweep_checkpoint":
        lines = env["checkpoint"].splitlines()
        i = rng.randrange(len(lines))
        lines[i] = mutate_json(json.loads(lines[i]), rng) if rng.random() < 0.8 else mutate_text(lines[i], rng).decode(
            "utf-8", "replace")
        (w / "s.csv.partial.jsonl").write_text("\n".join(lines) + "\n")
        return [[*SWEEP, "--out", str(w / "s.csv")]]
    if kind == "state":
        from tpsim.calib.plan import CalibConfig, state_path   # lazy: tpsim is loaded by fuzz_cli, after this module
        st = json.loads(_seed(kind, rng).read_text())
        st["fingerprint"] = CalibConfig(out=str(w / "p.json"), models=("tiny",), tps=(2,), prompt_lens=(8,),
                                        gen_lens=(4,), quick=True).fingerprint()
        Path(state_path(w / "p.json")).write_text(mutate_json(st, rng))
        return [["calibrate", "--quick", "--nproc", "2", "--models", "tiny", "--tp", "2", "--prompt", "8", "--gen", "4",
                 "--timeout-s", "60", "--out", str(w / "p.json")]]
    if kind == "safetensors":
        d = w / "ckpt"
        shutil.copytree(env["ckpt"], d)
        target = rng.choice([d / "config.json", d / "model.safetensors.index.json", d / "model-00001-of-00002.safetensors"])
        if target.suffix == ".safetensors":       # its header: 8 bytes of length, then JSON
            raw = target.read_bytes()
            n = int.from_bytes(raw[:8], "little")
            head = mutate_json(json.loads(raw[8:8 + n]), rng).encode()
            raw = (len(head) if rng.random() < 0.8 else rng.choice([0, 2 ** 40, n])).to_bytes(8, "little") + head + raw[8 + n:]
            target.write_bytes(raw[:rng.randrange(len(raw) + 1)] if rng.random() < 0.1 else raw)
        else:
            target.write_text(mutate_json(json.loads(target.read_text()), rng))
        return [[rng.choice(["bench", "check"]), "--checkpoint", str(d), "--tp", "2", "--device", "cpu", *SMALL]]
    if kind == "spd_text":
        f = w / "text.txt"
        f.write_bytes(mutate_text(_seed(kind, rng).read_text(), rng) if rng.random() < 0.7
                      else bytes(rng.randrange(256) for _ in range(rng.choice([0, 5, 2000]))))
        return [["spd-plan", "--checkpoint", str(env["ckpt"]), "--text", str(f), "--tp", "2", "--windows", "1",
                 "--seq-len", "8"]]
    raise ValueError(f"no such file kind {kind!r}")


SWEEP = ["sweep", "--model", "tiny", "--tp", "2", "--batch", "1", "--batch", "2", "--prompt", "8", "--gen", "4",
         "--schedule", "ladder"]
