"""Issue 48 item 2: one progress path for every phase that can take more than a few seconds
(commands/console.py progress_bar / PhaseBar): rich, on stderr, cleared when done, off where stderr
is not a terminal. `bench` was silent for 38-98 s; it now counts rank 0's progress marks (hw.beat,
read by the launcher a few times a second) to RunConfig.bench_marks. compare's two phases:
tests/test_compare.py test_progress_of_both_phases."""
from __future__ import annotations

import io

import pytest
from click.testing import CliRunner

from tpsim.commands import console


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_the_bar_draws_on_stderr_only_on_a_terminal(monkeypatch, tty):
    err, out = (Tty() if tty else io.StringIO()), io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdout", out)
    with console.PhaseBar() as bar:
        bar.update("bench: generations", 3, 8)
        bar.update("bench: generations", 8, 8)
    assert out.getvalue() == ""                      # stdout keeps the result alone (a table, --json)
    assert ("bench: generations" in err.getvalue() and "8/8" in err.getvalue()) == tty, err.getvalue()


def test_no_bar_is_drawn_before_the_first_report(monkeypatch):
    """An option refused before any work is one line with no bar above it."""
    monkeypatch.setattr("sys.stderr", Tty())
    with console.PhaseBar() as bar:
        pass
    assert bar.bar is None


@pytest.mark.hw
@pytest.mark.slow
def test_bench_counts_rank_0s_progress_marks(monkeypatch):
    """5 schedules x (1 warm-up + 1 repeat) x 4 steps (a prefill and 3 decode steps) = 40 marks."""
    seen = []

    class Recorder(console.PhaseBar):
        def update(self, what, done, total=None):
            seen.append((what, done, total))
    monkeypatch.setattr("tpsim.commands.bench.PhaseBar", Recorder)
    from tpsim.commands.bench import bench_cmd
    r = CliRunner().invoke(bench_cmd, ["--model", "tiny", "--tp", "2", "--prompt", "8", "--gen", "4",
                                       "--repeats", "1", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert seen[0] == ("bench: starting 2 ranks", 0, 40) and seen[-1] == ("bench: generations", 40, 40), seen
    assert all(b[1] <= a[1] for a, b in zip(seen[1:], seen))     # never backwards
