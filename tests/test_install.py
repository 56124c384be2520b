"""One importable name, `tpsim` (issue 17): `python -m tpsim`, `import tpsim` alone, `python cli.py`
from a checkout whatever else is installed, and what a wheel would put into site-packages."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def py(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_python_m_tpsim_is_the_command(tmp_path):
    r = py("-m", "tpsim", "--help", cwd=tmp_path)          # PYTHONPATH (conftest): this checkout as tpsim
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: tpsim [OPTIONS] COMMAND")
    for cmd in ("predict", "sweep", "collective", "profiles", "models"):
        assert f"  {cmd} " in r.stdout
    r = py("-m", "tpsim", "predict", "--model", "zzz", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_import_tpsim_imports_nothing_else(tmp_path):
    code = ("import sys; before = set(sys.modules); import tpsim; "
            "print(sorted(m for m in set(sys.modules) - before if m != 'tpsim'))")
    r = py("-c", code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_old_top_level_names_are_gone(tmp_path):
    """From outside the checkout, `sim`, `hw`, `calib` and `cli` are not importable names."""
    r = py("-c", "import tpsim.sim.predict, tpsim.calib.imports\n"
                 "import importlib.util as u\n"
                 "print([n for n in ('sim', 'hw', 'calib', 'cli') if u.find_spec(n)])", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", (f"importable here: {r.stdout.strip()}; an install of tpsim from before "
                                      "issue 17 provides them: reinstall it (pip install -e .)")


def test_cli_py_runs_its_own_checkout_whatever_tpsim_is_installed(tmp_path):
    """`python cli.py` loads the checkout it is in as tpsim (by path), not a `tpsim` found by name."""
    other, marker = tmp_path / "other" / "tpsim", tmp_path / "TRAP_RAN"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(99)\n")
    env = dict(os.environ, PYTHONPATH=str(other.parent))
    r = py(str(ROOT / "cli.py"), "models", cwd=tmp_path, env=env)
    assert r.returncode == 0 and not marker.exists(), r.stderr
    assert "llama-3.1-8b" in r.stdout
    r = py("-c", "import tpsim", cwd=tmp_path, env=env)     # the trap is real: by name it is found
    assert r.returncode == 99 and marker.exists()


def _can_build_wheels() -> bool:
    """--no-build-isolation builds with this environment's setuptools: bdist_wheel is built in from
    setuptools 70.1, earlier ones need the wheel package (a fresh venv's bundled setuptools has neither)."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    if importlib.util.find_spec("wheel") is not None:
        return True
    from importlib.metadata import version
    major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    return (major, minor) >= (70, 1)


# the folders installed as tpsim.<folder> (pyproject's packages); tests/, bench/, docs/, tools/ are not
PACKAGE_DIRS = ("sim", "hw", "calib", "commands", "fileio")
NOT_SHIPPED = {"__pycache__"}


def package_files() -> list[str]:
    """Every file under the package folders (and the root's modules), as the wheel names it."""
    out = [f"tpsim/{p.name}" for p in ROOT.glob("*.py")]
    for d in PACKAGE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and not NOT_SHIPPED & set(p.parts) and p.suffix != ".pyc":
                out.append("tpsim/" + p.relative_to(ROOT).as_posix())
    return out


def test_pyproject_lists_every_package():
    """pyproject's package list names every folder holding an __init__.py, and nothing else: a new
    folder left out of it would be missing from the wheel (and from `pip install .`)."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"tpsim"} | {"tpsim." + ".".join(p.parent.relative_to(ROOT).parts)
                         for d in PACKAGE_DIRS for p in (ROOT / d).rglob("__init__.py")
                         if not NOT_SHIPPED & set(p.parts)}
    assert listed == found, f"missing from pyproject: {sorted(found - listed)}; listed but no package: {sorted(listed - found)}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The checkout's wheel, as `pip install .` builds it (from a copy: setuptools writes build/ and
    tpsim.egg-info into the tree it builds, and an egg-info in the checkout makes tpsim's metadata
    visible from it, calib.plan.code_version)."""
    if not _can_build_wheels():
        pytest.skip("needs setuptools >= 70.1 (or the wheel package) to build")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "build", "*.egg-info", ".venv", ".hypothesis", ".pytest_cache"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (whl,) = tmp.glob("tpsim-*.whl")
    return whl


@pytest.mark.slow              # builds a wheel: ~5-15 s
def test_a_wheel_holds_only_tpsim(wheel):
    """What `pip install .` would put into site-packages: tpsim/ and its dist-info, with every file of
    the package folders (modules and the data read at run time). (.ci/run installs into a fresh
    virtualenv and checks the same.)"""
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tpsim", wheel.name.split("-py")[0] + ".dist-info"}
    missing = sorted(set(package_files()) - set(names))
    assert not missing, f"in the package folders but not in the wheel (pyproject's package-data): {missing}"
    for f in ("tpsim/sim/price/compiled_kernels_gpu.json", "tpsim/sim/hardware/profiles/h100-sxm.json", "tpsim/cli.py"):
        assert f in names
    assert not any(n.startswith(("tpsim/tests/", "tpsim/bench/", "tpsim/docs/", "tpsim/tools/")) for n in names)
    assert not any("_derive" in n for n in names)              # the profile derivation lives in tools/
    entry = zipfile.ZipFile(wheel).read(wheel.name.split("-py")[0] + ".dist-info/entry_points.txt").decode()
    assert "tpsim = tpsim.cli:main" in entry


# Run in a process of its own from the checkout: every file under the checkout that a run of these
# commands opens (an audit hook sees each open), printed one per line.
OPENED = r"""
import sys, os
root = os.path.realpath(sys.argv[1])
seen = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], str):
        p = os.path.realpath(args[0])
        if p.startswith(root + os.sep):
            seen.add(os.path.relpath(p, root))
sys.addaudithook(hook)
from click.testing import CliRunner
from tpsim.cli import main
for argv in ([ "predict", "--model", "llama-3.1-70b", "--tp", "8", "--profile", "h100-sxm"],
             ["predict", "--model", "llama-3.1-8b", "--tp", "2", "--stack", "vllm", "--json"],
             ["predict", "--model", "llama-3.1-8b", "--tp", "4", "--no-compile", "--profile", "h100-sxm-p2p-off"],
             ["predict", "--model", "llama-3.2-1b", "--tp", "2", "--gen", "8", "--exact", "--profile", "a100-sxm"],
             ["show", "--model", "llama-3.1-8b", "--tp", "2", "--schedule", "ladder"],
             ["collective", "--profile", "h200-sxm-coschedule", "--group", "8"],
             ["profiles", "show", "l40s-pcie"], ["models"]):
    r = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert r.exit_code == 0, (argv, r.output)
print("\n".join(sorted(seen)))
"""


@pytest.mark.slow              # builds a wheel, runs 8 commands
def test_every_file_a_run_opens_is_in_the_wheel(wheel):
    """The files that predict, show, collective, profiles and models open at run time (an audit hook
    records them) are all in the wheel: the installed copy prices with the same data as the checkout."""
    r = py("-c", OPENED, str(ROOT), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    # not tpsim's files: fixtures named on a command line, the environment, an editable install's metadata
    opened = [f for f in r.stdout.split() if not f.startswith(("tests/", ".venv/")) and ".egg-info/" not in f]
    assert any(f.endswith("compiled_kernels_gpu.json") for f in opened) and any(f.endswith(".json") for f in opened)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in opened if not f.endswith(".pyc") and f"tpsim/{f}" not in names]
    assert not missing, f"opened at run time but not in the wheel: {missing}"


def readme_example(command: str) -> str:
    """The output printed under `$ COMMAND` in README.md, as the README shows it."""
    lines = (ROOT / "README.md").read_text().splitlines()
    i = lines.index(f"$ {command}")
    end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
    return "\n".join(lines[i + 1:end]) + "\n"


@pytest.mark.slow              # builds a wheel
def test_the_installed_copy_prints_the_readmes_first_example(wheel, tmp_path):
    """The README's first command, run from the wheel's files alone (unpacked as pip would install
    them, nothing of the checkout on the path), prints the README's output byte for byte."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    command = "tpsim predict --model llama-3.1-70b --tp 8 --profile h100-sxm"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-m", "tpsim", *command.split()[1:]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == readme_example(command)
