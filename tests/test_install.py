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


@pytest.mark.slow              # builds a wheel: ~5-15 s
@pytest.mark.skipif(not _can_build_wheels(), reason="needs setuptools >= 70.1 (or the wheel package) to build")
def test_a_wheel_holds_only_tpsim(tmp_path):
    """What `pip install .` would put into site-packages: tpsim/ and its dist-info, with the data
    files read at run time. (.ci/run installs into a fresh virtualenv and checks the same.)"""
    # built from a copy: setuptools writes build/ and tpsim.egg-info into the tree it builds, and an
    # egg-info in the checkout makes tpsim's metadata visible from it (calib.plan.code_version)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "build", "*.egg-info", ".venv", ".hypothesis", ".pytest_cache"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (whl,) = tmp_path.glob("tpsim-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert {n.split("/")[0] for n in names} == {"tpsim", whl.name.split("-py")[0] + ".dist-info"}
    for f in ("tpsim/__init__.py", "tpsim/__main__.py", "tpsim/cli.py", "tpsim/_checkout.py",
              "tpsim/sim/predict.py", "tpsim/sim/compiled_kernels.json", "tpsim/sim/profiles/h100-sxm.json",
              "tpsim/hw/dist.py", "tpsim/calib/imports.py", "tpsim/commands/lazy.py", "tpsim/commands/predict.py",
              "tpsim/sim/profiles/_data/nccl-graph-mixing-ablation-jacobi.csv"):
        assert f in names
    assert not any(n.startswith(("tpsim/tests/", "tpsim/bench/", "tpsim/docs/", "tpsim/tools/")) for n in names)
    assert not any("_derive" in n for n in names)              # the profile derivation lives in tools/
    entry = zipfile.ZipFile(whl).read(whl.name.split("-py")[0] + ".dist-info/entry_points.txt").decode()
    assert "tpsim = tpsim.cli:main" in entry
