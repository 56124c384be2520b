"""How the modules import each other (issues #16, #28): no import cycles; the arrows point one way
(cli -> commands -> calib -> hw -> sim); sim/ imports neither click nor rich; `import tpsim.cli`
loads the command table only (no command module, no sweep, scipy or networkx); torch stays behind
one door (`hw.harness`), so tpsim predict, collective and models run without torch; and every
other import inside a function says why it is there (`# lazy: <reason>`).

Pure Python: the AST of every source file, and subprocesses in which torch cannot be imported."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sim", "hw", "calib", "commands", "fileio")
MARKER = "# lazy:"
# The one door: hw.harness imports torch-side modules by name. hw.rank's _worker_main is the
# rank process's entry: it imports the worker the launcher names (a MODULE:FUNCTION string that
# crosses the process boundary). commands.lazy imports the command a command line names (cli.py's
# table: "module:attr").
IMPORT_BY_NAME = {"hw/__init__.py", "hw/rank.py", "commands/lazy.py"}


def sources() -> list[Path]:
    """Every Python file of the project but the tests: cli.py, the packages, the bench and tools scripts."""
    out = [ROOT / "__init__.py", ROOT / "cli.py"]
    for top in (*PACKAGES, "bench", "tools"):
        out += sorted((ROOT / top).rglob("*.py"))
    return out


def module_name(path: Path) -> str:
    """The name a file is imported by: the repository root is the package tpsim (issue #17), so
    sim/predict.py is tpsim.sim.predict and cli.py is tpsim.cli."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(("tpsim",) + parts)


def function_local_imports(tree: ast.AST) -> list[ast.stmt]:
    found: dict[int, ast.stmt] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    found[id(sub)] = sub
    return sorted(found.values(), key=lambda n: n.lineno)


def justified(node: ast.stmt, lines: list[str]) -> bool:
    """`# lazy: <reason>` on the import's own line(s), or on a comment line right above it."""
    own = lines[node.lineno - 1:node.end_lineno]
    above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
    texts = own + ([above] if above.startswith("#") else [])
    return any(MARKER in t and t.split(MARKER, 1)[1].strip() for t in texts)


def test_every_function_local_import_says_why():
    bad = []
    for path in sources():
        text = path.read_text()
        lines = text.splitlines()
        for node in function_local_imports(ast.parse(text)):
            if not justified(node, lines):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bad, ("imports inside functions without a `# lazy: <reason>` comment (move them to the "
                     "module top; reach torch through hw.harness):\n" + "\n".join(bad))


def test_the_marker_test_can_fail():
    """A bare local import is caught, a marked one passes (the check above is not vacuous)."""
    src = "def f():\n    import json\n\ndef g():\n    import csv   # lazy: slow\n\ndef h():\n    # lazy:\n    import os\n"
    lines = src.splitlines()
    verdict = {n.lineno: justified(n, lines) for n in function_local_imports(ast.parse(src))}
    assert verdict == {2: False, 5: True, 9: False}          # a marker with no reason does not count


def test_modules_are_imported_by_name_only_at_the_door():
    """importlib.import_module / __import__ only in hw.harness and the rank entry (hw.rank)."""
    bad = []
    for path in sources():
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            name = (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)) \
                if isinstance(node, ast.Call) else None
            if name in ("import_module", "__import__") and rel not in IMPORT_BY_NAME:
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, "modules imported by name outside hw.harness: " + ", ".join(bad)


def import_graph() -> nx.DiGraph:
    """module -> every project module it imports (at its top or inside a function; the packages on
    the way, whose __init__ runs first, included). Imports under `if TYPE_CHECKING:` never run."""
    paths = {module_name(p): p for p in sources()
             if not p.is_relative_to(ROOT / "bench") and not p.is_relative_to(ROOT / "tools")}
    known = set(paths)
    g = nx.DiGraph()
    for mod, path in paths.items():
        g.add_node(mod)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skip = {id(s) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
                for s in ast.walk(n)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for t in targets:
                parts = t.split(".")
                for i in range(1, len(parts) + 1):          # a.b.c runs a, then a.b, then a.b.c
                    dep = ".".join(parts[:i])
                    if dep in known and dep != mod:
                        g.add_edge(mod, dep)
    return g


def test_no_import_cycles():
    g = import_graph()
    assert {"tpsim.cli", "tpsim.sim.predict", "tpsim.commands.bench", "tpsim.calib.run"} <= set(g)
    # the graph is real: edges by absolute and by relative import, and to a package's __init__
    assert g.has_edge("tpsim.calib.run", "tpsim.hw.dist") and g.has_edge("tpsim.commands.bench", "tpsim.hw")
    assert g.has_edge("tpsim.cli", "tpsim.commands.lazy") and g.has_edge("tpsim.sim.predict", "tpsim.sim.engine.simpy_engine")
    assert g.has_edge("tpsim.commands.predict", "tpsim.sim.predict")
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


LAYERS = ("tpsim.sim", "tpsim.hw", "tpsim.calib", "tpsim.commands", "tpsim.cli")     # bottom to top


def layer(mod: str) -> int | None:
    return next((i for i, top in enumerate(LAYERS) if mod == top or mod.startswith(top + ".")), None)


def test_imports_point_down_the_layers():
    """cli -> commands -> calib -> hw -> sim: no module imports one of a layer above its own."""
    g = import_graph()
    up = [(a, b) for a, b in g.edges if layer(a) is not None and layer(b) is not None and layer(b) > layer(a)]
    assert g.number_of_edges() > 100 and not up, up
    assert layer("tpsim.commands.bench") == 3 and layer("tpsim.calib.run") == 2 and layer("tpsim.climb") is None


def test_click_only_at_the_front_door_and_no_rich_in_sim():
    """sim/ is the simulation only (no click, no rich); click is imported by commands/ and cli.py alone."""
    bad = []
    for path in sources():
        rel = path.relative_to(ROOT)
        front = rel.parts[0] in ("commands", "cli.py", "bench")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for n in names:
                top = n.split(".")[0]
                if (top == "click" and not front) or (top == "rich" and rel.parts[0] == "sim"):
                    bad.append(f"{rel}:{node.lineno}: {n}")
    assert not bad, bad


def _printed(code: str) -> list[str]:
    """The lines a fresh interpreter prints running `code` from the repository root (it must succeed)."""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_import_cli_loads_only_the_command_table():
    """`import tpsim.cli` (every start, `--help` included) imports no command module, no simulator, and
    none of the slow libraries; `tpsim predict` loads what predict runs, not the sweep nor calibration."""
    code = ("import sys, tpsim.cli\nprint(sorted(m for m in sys.modules if m.startswith(('tpsim.sim', 'tpsim.hw', "
            "'tpsim.calib', 'scipy', 'networkx', 'numpy', 'simpy', 'rich')) or (m.startswith('tpsim.commands.') "
            "and m != 'tpsim.commands.lazy')))\n"
            "from click.testing import CliRunner\n"
            "r = CliRunner().invoke(tpsim.cli.main, ['predict', '--model', 'tiny', '--tp', '2', '--gen', '4', "
            "'--prompt', '16', '--json'])\nassert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tpsim.commands.sweep_grid', 'tpsim.sim.grid', 'tpsim.hw', "
            "'tpsim.calib', 'tpsim.commands.sweep', 'tpsim.commands.bench', 'matplotlib'))))\n")
    assert _printed(code) == ["[]", "[]"]


def test_default_predict_imports_neither_numpy_nor_networkx():
    """A default `tpsim predict` (static cache, no jitter, every collective measured) runs on simpy
    alone: numpy is loaded where jitter is drawn or decode steps differ, networkx where a collective
    is priced on the topology graph (a filled cache does load numpy: the rule is not vacuous)."""
    code = ("import sys, tpsim.cli\nfrom click.testing import CliRunner\n"
            "args = ['predict', '--model', 'llama-3.1-70b', '--tp', '8', '--json']\n"
            "r = CliRunner().invoke(tpsim.cli.main, args)\nassert r.exit_code == 0, r.output\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'networkx', 'scipy'}))\n"
            "r = CliRunner().invoke(tpsim.cli.main, args + ['--kv', 'filled'])\nassert r.exit_code == 0, r.output\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'networkx', 'scipy'}))\n")
    assert _printed(code) == ["[]", "['numpy']"]


def test_sim_imports_nothing_above_it():
    """sim/ is the floor (above only fileio/, the I/O leaf that imports nothing of tpsim): it imports
    neither torch nor hw/ nor calib/ nor the commands."""
    g = import_graph()
    leaf = [(a, b) for a, b in g.edges if a.startswith("tpsim.fileio") and b != "tpsim" and not b.startswith("tpsim.fileio")]
    assert not leaf, leaf
    up = [(a, b) for a, b in g.edges if a.startswith("tpsim.sim") and b != "tpsim"
          and not b.startswith(("tpsim.sim", "tpsim.fileio"))]
    assert g.out_degree("tpsim.sim.predict") > 3 and not up, up
    for path in (ROOT / "sim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path}:{node.lineno}"


NO_TORCH = "import sys; sys.modules['torch'] = None  # any `import torch` now raises ImportError\n"


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_import_cli_imports_no_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, tpsim.cli; print(sorted(m for m in sys.modules "
                        "if m.split('.')[0] in ('torch', 'matplotlib')))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_simulator_commands_run_without_torch(tmp_path):
    """predict, collective, models (and compare on saved measurements) with torch unimportable; the
    harness commands say in one line that they need it (exit 2)."""
    code = f"""
import json
from click.testing import CliRunner
from tpsim.cli import main
out = {{}}
for name, args in {{
        "predict": ["predict", "--model", "tiny", "--tp", "2", "--gen", "8", "--prompt", "16", "--json"],
        "collective": ["collective", "--group", "8", "--bytes", "16K", "--json"],
        "models": ["models"],
        "show": ["models", "--show", "tiny"],
        "bench": ["bench", "--model", "tiny"],
        "calibrate": ["calibrate", "--out", {str(tmp_path / "p.json")!r}],
        "compare": ["compare", "--measured", {str(tmp_path / "nope.json")!r}, "--profile", "h100-sxm",
                    "--out-dir", {str(tmp_path / "cmp")!r}]}}.items():
    r = CliRunner().invoke(main, args)
    out[name] = [r.exit_code, r.output]
print(json.dumps(out))
"""
    r = run_without_torch(code)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    for name in ("predict", "collective", "models", "show"):
        assert out[name][0] == 0, (name, out[name][1])
    assert json.loads(out["predict"][1])["schedules"][0]["schedule"] == "standard"
    assert "tiny" in out["models"][1]
    for name in ("bench", "calibrate"):
        code, text = out[name]
        assert code == 2 and text.strip().splitlines() == [
            f"Error: tpsim {name} runs real PyTorch process groups and needs torch: pip install 'tpsim[hw]' "
            f"(on a CPU-only machine: pip install torch==2.13.0 first)"], (name, text)
    assert out["compare"][0] == 1 and "nothing could be compared" in out["compare"][1]     # ran, no torch needed
