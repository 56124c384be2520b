"""Fixtures shared by more than one test file; and the suite tests the checkout it lives in.

The code is imported as the package `tpsim` (the repository root is that package). An installed
tpsim could be another copy (a shared environment with another checkout installed in editable
mode): so `tpsim` here is a link to this checkout, first on sys.path and on PYTHONPATH, for the
tests and for every Python process they start (the launcher's ranks load their tpsim by path).
"""
import atexit
import getpass
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_LINKS = tempfile.mkdtemp(prefix="tpsim-tests-")
os.symlink(ROOT, os.path.join(_LINKS, "tpsim"), target_is_directory=True)
atexit.register(lambda: (os.unlink(os.path.join(_LINKS, "tpsim")), os.rmdir(_LINKS)))
sys.path.insert(0, _LINKS)
os.environ["PYTHONPATH"] = os.pathsep.join([_LINKS, *filter(None, [os.environ.get("PYTHONPATH")])])
assert "tpsim" not in sys.modules or Path(sys.modules["tpsim"].__file__).resolve().parent == ROOT, (
    f"another tpsim was imported before the tests: {sys.modules['tpsim'].__file__}")


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_under_pytests_basetemp(tmp_path_factory):
    """Every temporary file the tests and the processes they start make goes under pytest's own
    temporary directory (this worker's basetemp/tmp), not /tmp: hw.dist.launch keeps a run folder
    (/tmp/tpsim-run-*) where a rank failed, so its logs can be read, and many tests make ranks fail on
    purpose (the suite left ~300 behind per run). pytest keeps its last 3 basetemps and removes older
    ones. tempfile.tempdir is this process's (tempfile.gettempdir()); TMPDIR is every child's. Session
    scope: the module fixtures that start ranks run under it too. A test may still point TMPDIR
    elsewhere for its own child (tests/test_hw_dist.py's Ctrl-C test).

    Inductor's compile cache is no temporary file: it stays where it was (torch's default,
    cache_dir_utils.default_cache_dir: <tmp>/torchinductor_<user>), else every session would compile
    cold (tests/test_compiled.py: 34 s warm, 113 s cold on the 2-core box). The package link made at
    import (_LINKS, above) is made before this runs, in the real temporary directory, as before."""
    here = str(tmp_path_factory.mktemp("tmp", numbered=False))
    try:
        user = getpass.getuser()
    except (KeyError, OSError):           # no passwd entry (a container): torch's own fallback
        user = f"uid_{os.getuid()}"
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", inductor)
        mp.setattr(tempfile, "tempdir", here)
        mp.setenv("TMPDIR", here)
        yield here


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for `-n auto` (pyproject's addopts): one per core this process may run on, at most 4.
    A multi-process test starts 2-4 gloo ranks, each importing torch (about 0.5 GB), so a worker per
    core of a large box would hold tens of GB; 4 workers hold twice what the 2-core CI box does."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


@pytest.fixture
def no_nic_profile(tmp_path) -> str:
    """Path of h100-sxm with the topology's NICs removed: one box that cannot span nodes."""
    from tpsim.sim.hardware.profile import read_raw
    data, _ = read_raw("h100-sxm")
    for k in ("nic_gbps", "nics_per_node"):
        data["topology"].pop(k)
    p = tmp_path / "one-box.json"
    p.write_text(json.dumps(data))
    return str(p)
