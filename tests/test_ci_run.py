""".ci/run's exit trap: the CI script's exit status is its steps' status, never the trap's.

A bare `kill $(jobs -p)` with no jobs left exits 2, and under `set -e` an EXIT trap's failing command
becomes the script's status: a run whose every step passed reported exit 2. The trap here is the one
line of .ci/run that defines it, run in bash under the same `set -euo pipefail`."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _on_exit_line() -> str:
    (line,) = [l for l in (ROOT / ".ci/run").read_text().splitlines() if re.match(r"on_exit\(\) ", l)]
    return line


def _run(tmp_path: Path, body: str) -> tuple[int, Path]:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    script = "\n".join(["set -euo pipefail", f"fresh={fresh}", _on_exit_line(), "trap on_exit EXIT", body])
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    return r.returncode, fresh


@pytest.mark.parametrize("body, rc", [
    ("true", 0),                                  # every step passed, no background job left
    ("sleep 30 & true", 0),                       # a background install still running is ended, status kept
    ("sleep 0.1 & wait $!; true", 0),             # every job waited for: the bare-kill case of stop 34
    ("false", 1),                                 # a failed step keeps its own status
    ("sleep 30 & exit 3", 3),
])
def test_exit_status_is_the_steps_and_the_scratch_dir_goes(tmp_path, body, rc):
    got, fresh = _run(tmp_path, body)
    assert got == rc
    assert not fresh.exists()
