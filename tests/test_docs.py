"""Every `$ tpsim ...` example in README.md and docs/*.md, run through the CLI in-process and
checked against the output printed under it, so the docs stay true; and every `$ python bench/X.py`
example (the validation scripts whose numbers the docs quote), run as a process the same way; and every
```python snippet followed by a plain block (its printed output), run with this checkout as tpsim.

How an example is checked: the output's text (headers, row labels, units, error messages) must
match exactly; numbers may drift by NUMBER_RTOL (the predictions move as the cost model improves).
Lines starting with "Error:" must match exactly, numbers included. Whitespace runs and the
repeated box-drawing characters of a table collapse, so a wider number does not fail a table.

An example that cannot run here (it needs torch and real process groups, or hardware) carries an
HTML comment on the line before its code block, which this test reads:

    <!-- docs-test: skip recorded measurement: needs torch and 2 gloo ranks -->

Refresh every runnable example's output in place after a change that moves the numbers:

    python tests/test_docs.py --update
"""
from __future__ import annotations

import atexit
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NUMBER_RTOL = 0.02
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s+(.*?)\s*-->")
NEEDS_TORCH = {"bench", "check", "calibrate", "compare", "spd-plan"}
# a number standing alone (not part of a name such as TP8 or a path): sign, digits, decimals, exponent
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\d.])")
# a ```python snippet runs as `python -c`, with this checkout as the package tpsim, as a reader's would
SNIPPET_PRELUDE = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import _checkout; _checkout.load()\n"
RUNS = re.compile(r"([ ━─┃│┏┓┗┛┡┩┣┫╇┳┻╋└┘┌┐┬┴├┤┼])\1+")


@dataclass
class Example:
    path: Path
    line: int                  # 1-based line of the `$ tpsim` command
    argv: list[str]
    expected: list[str]
    out_span: tuple[int, int]  # [start, end) of the output lines in the file (0-based)
    skip: str | None


def examples(path: Path) -> list[Example]:
    """The `$ tpsim` commands of every fenced block of `path`, each with the output under it."""
    lines = path.read_text().splitlines()
    out: list[Example] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        skip = None
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and (m := SKIP.search(lines[j])):
            skip = m.group(1)
        end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
        if lines[i].strip() == "```python":      # a Python snippet; the plain block right after it is its output
            o = end + 1
            while o < len(lines) and not lines[o].strip():
                o += 1
            if o < len(lines) and lines[o].strip() == "```":
                o_end = next(k for k in range(o + 1, len(lines)) if lines[k].startswith("```"))
                code = "\n".join(lines[i + 1:end])
                out.append(Example(path, i + 2, ["python", "-c", SNIPPET_PRELUDE + code], lines[o + 1:o_end],
                                   (o + 1, o_end), skip))
                end = o_end
            i = end + 1
            continue
        k = i + 1
        while k < end:
            if not lines[k].startswith(("$ tpsim ", "$ python bench/")):
                k += 1
                continue
            start, cmd = k, lines[k][2:]
            while cmd.endswith("\\"):
                k += 1
                cmd = cmd[:-1] + lines[k].strip()
            k += 1
            o = k
            while k < end and not lines[k].startswith("$ "):
                k += 1
            argv = shlex.split(cmd, comments=True)
            out.append(Example(path, start + 1, argv[1:] if argv[0] == "tpsim" else argv, lines[o:k], (o, k), skip))
        i = end + 1
    return out


ALL = [e for p in DOCS for e in examples(p)]


_SCRATCH: dict[Path, str] = {}
LINKED = ("tests", "bench", "docs")


def scratch(doc: Path) -> str:
    """The directory the examples of page `doc` run in: one per page, so an example may read what an
    earlier one on the page wrote (import a profile, then predict with it); the repository's tests/,
    bench/ and docs/ are linked into it, so an example names a checked-in file by its repository
    path, as a reader in a checkout would."""
    if doc not in _SCRATCH:
        tmp = tempfile.mkdtemp(prefix="tpsim-docs-")
        atexit.register(shutil.rmtree, tmp, True)
        for name in LINKED:
            os.symlink(ROOT / name, os.path.join(tmp, name))
        _SCRATCH[doc] = tmp
    return _SCRATCH[doc]


def run(argv: list[str], doc: Path) -> list[str]:
    """The CLI's output lines for `argv` (or a bench script's, argv = python bench/X.py ...), run in
    page `doc`'s scratch directory."""
    from click.testing import CliRunner

    from tpsim.cli import main
    if argv[0] == "python":              # a bench script loads its own checkout (bench/ is linked in)
        r = subprocess.run([sys.executable, *argv[1:]], cwd=scratch(doc), capture_output=True, text=True,
                           timeout=600)
        output = r.stdout + (r.stderr if r.returncode else "")
    else:
        cwd = os.getcwd()
        os.chdir(scratch(doc))
        try:
            output = CliRunner().invoke(main, argv).output
        finally:
            os.chdir(cwd)
    lines = [ln.rstrip() for ln in output.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def skeleton(line: str) -> str:
    return RUNS.sub(r"\1", NUMBER.sub("#", line.rstrip()))


def close(a: str, b: str) -> bool:
    x, y = float(a), float(b)
    last_digit = 10.0 ** -len(a.split(".")[1].split("e")[0]) if "." in a else 1.0
    return math.isclose(x, y, rel_tol=NUMBER_RTOL, abs_tol=last_digit * 1.01)


def mismatch(expected: list[str], actual: list[str]) -> str | None:
    """None when `actual` shows what `expected` shows; else the first differing line, explained."""
    if len(expected) != len(actual):
        return f"{len(actual)} lines printed, {len(expected)} in the docs:\n" + "\n".join(actual)
    for e, a in zip(expected, actual):
        e, a = e.rstrip(), a.rstrip()
        if e.startswith("Error:") and e != a:
            return f"error line differs:\n  docs: {e}\n  now:  {a}"
        if skeleton(e) != skeleton(a):
            return f"text differs:\n  docs: {e}\n  now:  {a}"
        for x, y in zip(NUMBER.findall(e), NUMBER.findall(a)):
            if not close(x, y):
                return f"number {x} is now {y} (run `python tests/test_docs.py --update`):\n  docs: {e}\n  now:  {a}"
    return None


def test_no_example_documents_a_missing_file():
    """An example that names a checked-in file must find it: its documented output is the file's
    result, not a 'No such file' error (the examples once ran where tests/fixtures/ did not exist).
    A file meant to be missing says so in its name (nope.json)."""
    missing = [f"{e.path.name}:{e.line}" for e in ALL
               if any(("No such file" in x or "not found:" in x) and "nope" not in x for x in e.expected)]
    assert not missing, missing


# a `python -c "..."` one-liner in a doc's prose (not run: it reads the reader's own files) and its imports
PYTHON_C = re.compile(r'python -c "([^"]+)"')
TPSIM_IMPORT = re.compile(r"from (tpsim[\w.]*) import ([\w, ]+)")


def test_prose_one_liners_import_what_exists():
    """Every `python -c "..."` in the docs is Python and every name it imports from tpsim exists:
    traces.md's imported write_json_atomic from tpsim.sim.engine.record, which has none (ImportError)."""
    import importlib
    snippets = [(doc.name, code) for doc in DOCS for code in PYTHON_C.findall(doc.read_text())]
    assert snippets
    missing = []
    for doc, code in snippets:
        compile(code, doc, "exec")
        for module, names in TPSIM_IMPORT.findall(code):
            m = importlib.import_module(module)
            missing += [f"{doc}: {module}.{n.strip()}" for n in names.split(",") if not hasattr(m, n.strip())]
    assert not missing, missing


def test_every_example_is_found_and_torch_ones_are_marked():
    assert len(ALL) >= 8, [str(p) for p in DOCS]
    for e in ALL:
        if e.argv and e.argv[0] in NEEDS_TORCH:
            assert e.skip, f"{e.path.name}:{e.line}: `tpsim {e.argv[0]}` needs torch: mark it <!-- docs-test: skip ... -->"


@pytest.mark.parametrize("ex", ALL, ids=[f"{e.path.name}:{e.line}" for e in ALL])
def test_example(ex: Example):
    if ex.skip:
        pytest.skip(ex.skip)
    problem = mismatch(ex.expected, run(ex.argv, ex.path))
    assert problem is None, f"{ex.path.relative_to(ROOT)}:{ex.line} `{_cmd(ex.argv)}`: {problem}"


def _cmd(argv: list[str]) -> str:
    if argv[:2] == ["python", "-c"]:
        return "python snippet"
    return " ".join(argv if argv[0] == "python" else ["tpsim", *argv])


def test_mismatch_is_strict_on_text_and_loose_on_numbers():
    doc = ["│ ladder      │       62.8 │  1.217x │", "Error: TP 16 does not divide the 40 heads"]
    assert mismatch(doc, ["│ ladder │ 63.0 │ 1.219x │", doc[1]]) is None         # within 2%, wider columns
    assert "number" in mismatch(doc, ["│ ladder │ 70.0 │ 1.217x │", doc[1]])
    assert "text" in mismatch(doc, ["│ spd    │ 62.8 │ 1.217x │", doc[1]])
    assert "error line" in mismatch(doc, [doc[0], "Error: TP 16 does not divide the 41 heads"])


def _opt(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# examples whose outputs are committed next to the docs (`--out docs/...`): the files are that command's
# output, regenerated by running it from the repository root, and the tests below rerun it
COMMITTED = [e for e in ALL if e.argv[0] == "sweep" and (_opt(e.argv, "--out") or "").startswith("docs/")]


def _rerun_sweep(ex: Example, tmp: Path, first_model_only: bool) -> tuple[list[str], Path]:
    """Run example `ex` with its outputs in `tmp` (no plot: an image is not compared), optionally on its first
    --model only; returns the printed lines (paths written back as the docs name them) and the CSV written."""
    from click.testing import CliRunner

    from tpsim.cli import main
    argv, out, models = [], tmp / "sweep.csv", 0
    i = 0
    while i < len(ex.argv):
        a = ex.argv[i]
        if a == "--plot":
            i += 2
            continue
        if a == "--model":
            models += 1
            if first_model_only and models > 1:
                i += 2
                continue
        argv.append(a)
        i += 1
    argv[argv.index("--out") + 1] = str(out)
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 0, r.output
    doc_out = _opt(ex.argv, "--out")
    # a summary line wraps at 80 columns (commands/console.py echo_wrapped) around this run's longer paths:
    # joined, the paths put back as the docs name them, and wrapped again, it is what the documented command prints
    joined: list[str] = []
    for ln in r.output.splitlines():
        if ln.startswith("  ") and joined:
            joined[-1] += " " + ln.strip()
        else:
            joined.append(ln.rstrip())
    lines = [textwrap.fill(ln.replace(str(out), doc_out).replace(str(out.with_suffix(".json")), doc_out[:-4] + ".json"),
                           80, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
             for ln in joined]
    return [x for ln in lines for x in ln.splitlines() if x], out


def _sweep_rows_mismatch(committed: Path, fresh: Path) -> str | None:
    """None when every row of `fresh` is in `committed` (same point and schedule) with the same text and its
    numbers within NUMBER_RTOL; else the first difference."""
    import csv
    key = ("model", "tp", "batch", "prompt_len", "gen_len", "profile", "bw_scale", "lat_scale", "schedule")
    old = {tuple(r[k] for k in key): r for r in csv.DictReader(committed.open())}
    new = list(csv.DictReader(fresh.open()))
    if not new:
        return "the rerun wrote no rows"
    for r in new:
        k = tuple(r[c] for c in key)
        if k not in old:
            return f"row {k} is not in {committed.name}"
        for col, v in r.items():
            w = old[k][col]
            if NUMBER.fullmatch(v or "x") and NUMBER.fullmatch(w or "x"):
                if not close(w, v):
                    return f"{k} {col}: {committed.name} has {w}, the command now gives {v}"
            elif v != w:
                return f"{k} {col}: {committed.name} has {w!r}, the command now gives {v!r}"
    return None


def _regenerate_hint(ex: Example) -> str:
    return f"regenerate with `python cli.py {' '.join(shlex.quote(a) for a in ex.argv)}` from the repository root"


@pytest.mark.parametrize("ex", COMMITTED, ids=[f"{e.path.name}:{e.line}" for e in COMMITTED])
def test_committed_sweep_rows_are_the_documented_commands_output(ex: Example, tmp_path: Path):
    """The documented command's first model (a fast subset of the same grid) gives the committed CSV's rows."""
    _, fresh = _rerun_sweep(ex, tmp_path, first_model_only=True)
    problem = _sweep_rows_mismatch(ROOT / _opt(ex.argv, "--out"), fresh)
    assert problem is None, f"{ex.path.relative_to(ROOT)}:{ex.line}: {problem}; {_regenerate_hint(ex)}"


@pytest.mark.slow
@pytest.mark.parametrize("ex", COMMITTED, ids=[f"{e.path.name}:{e.line}" for e in COMMITTED])
def test_committed_sweep_is_the_documented_commands_whole_output(ex: Example, tmp_path: Path):
    """The whole documented command: every committed row, and the lines it prints."""
    printed, fresh = _rerun_sweep(ex, tmp_path, first_model_only=False)
    committed = ROOT / _opt(ex.argv, "--out")
    plot = _opt(ex.argv, "--plot")
    expected = [ln for ln in ex.expected if not (plot and plot in ln)]      # rerun without the plot
    problem = _sweep_rows_mismatch(committed, fresh) or mismatch(expected, printed)
    assert problem is None, f"{ex.path.relative_to(ROOT)}:{ex.line}: {problem}; {_regenerate_hint(ex)}"
    assert sum(1 for _ in fresh.open()) == sum(1 for _ in committed.open()), _regenerate_hint(ex)


def update() -> int:
    """Rewrite each runnable example's output in place; returns how many changed."""
    changed = 0
    for path in DOCS:
        lines = path.read_text().splitlines()
        runnable = [e for e in examples(path) if not e.skip]
        outputs = [run(e.argv, path) for e in runnable]  # in page order: a later example may read an earlier one's file
        for ex, now in reversed(list(zip(runnable, outputs))):   # replaced bottom-up: earlier spans stay valid
            if mismatch(ex.expected, now) is not None:
                lines[ex.out_span[0]:ex.out_span[1]] = now
                changed += 1
                print(f"updated {path.relative_to(ROOT)}:{ex.line} {_cmd(ex.argv)}")
        text = "\n".join(lines) + "\n"
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return changed


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import _checkout                  # this checkout as the package tpsim, whatever is installed
    _checkout.load()
    if sys.argv[1:] != ["--update"]:
        raise SystemExit("usage: python tests/test_docs.py --update   (or run it with pytest)")
    print(f"{update()} example(s) refreshed")
