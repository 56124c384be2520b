"""No silent zeros (sim/silent_zeros.py): every built-in preset and profile gives each TP-dependent term a
value (with a range where the evidence is an interval) or a source that starts "code:" proving the work
absent. The walker itself is checked on toys first."""
import pytest

from tpsim.sim.hardware.profile import builtin_names, read_raw
from tpsim.sim.silent_zeros import PROFILE_TP_DEPENDENT, code_proved, preset_silent_zeros, profile_silent_zeros
from tpsim.sim.stack.host_lane import TP_DEPENDENT, HostStep
from tpsim.sim.stack.presets import PRESETS, Preset

# Terms another branch owns, each with who settles it (remove an entry when it no longer fires: the
# last test fails until then, so a stale excuse cannot stay).
PENDING: dict[tuple[str, str], str] = {}


def _toy(host: dict, sources: dict) -> Preset:
    return Preset("toy", "toy engine", {"host": host}, {f"host.{k}": v for k, v in sources.items()})


def test_the_walker_flags_a_zero_tp_term_without_a_code_proof_and_nothing_else():
    """handoff_s 0 'no public measurement' -> flagged; rank_spread_s 0 'code: ...' -> fine; handoff_wake_s
    0.5 (a value) -> fine; schedule_s 0 without a source -> fine (not TP-dependent); every TP-dependent
    field the toy leaves out is HostStep's default zero -> flagged."""
    p = _toy({"handoff_s": 0.0, "rank_spread_s": 0.0, "handoff_wake_s": 0.5, "schedule_s": 0.0},
             {"handoff_s": "no public measurement found", "rank_spread_s": "code: one process, shm_x.py L3",
              "handoff_wake_s": "measured"})
    flagged = {z.split(":")[0] for z in preset_silent_zeros(p)}
    assert "host.handoff_s" in flagged
    assert not flagged & {"host.rank_spread_s", "host.handoff_wake_s", "host.schedule_s"}
    assert flagged == {f"host.{f}" for f in TP_DEPENDENT} - {"host.rank_spread_s", "host.handoff_wake_s"}
    # the count field too: step_broadcasts 0 needs a code proof, 9 needs none
    assert "host.step_broadcasts" not in {z.split(":")[0] for z in preset_silent_zeros(
        _toy({"step_broadcasts": 9}, {"step_broadcasts": "code: 9 tensors"}))}


def test_the_walker_reads_profile_paths_bare_or_sourced_and_absent_as_zero():
    raw = {"jitter": {"arrival": {"node": {"mean_us": {"value": 0.0, "source": "not modelled"}},
                                  "net": {"mean_us": {"value": 2.0, "source": "measured"}}}},
           "collectives": {"graph_extra_us": {"value": 0.0, "source": "code: no copy kernel (comm_lowering.py)"},
                           "graph_nccl_node_us": 0.0, "eager_extra_us": 4.4}}
    flagged = {z.split(":")[0] for z in profile_silent_zeros(raw)}
    assert flagged == {"jitter.arrival.node.mean_us", "collectives.graph_nccl_node_us",
                       "collectives.graph_net_host_us"}       # the last: absent, the parser's default 0
    assert code_proved("  code: x") and not code_proved("derived: code: x")


def test_tp_dependent_names_real_fields():
    names = {f for f in HostStep.__dataclass_fields__}
    assert set(TP_DEPENDENT) <= names
    assert len(PROFILE_TP_DEPENDENT) == len(set(PROFILE_TP_DEPENDENT))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_gives_each_tp_term_a_value_or_a_code_proof(name):
    assert preset_silent_zeros(PRESETS[name]) == []


def _profile_zeros() -> dict[tuple[str, str], str]:
    out = {}
    for name in builtin_names():
        for z in profile_silent_zeros(read_raw(name)[0]):
            path, _, src = z.partition(": ")
            out[(name, path)] = src
    return out


def test_every_profile_gives_each_tp_term_a_value_or_a_code_proof_or_an_owner():
    zeros = _profile_zeros()
    unowned = {k: v for k, v in zeros.items() if k not in PENDING and ("*", k[1]) not in PENDING}
    assert not unowned, "\n".join(f"{n} {p}: {s[:120]}" for (n, p), s in unowned.items())


def test_each_pending_excuse_still_fires():
    zeros = _profile_zeros()
    stale = [k for k in PENDING if not any(k == z or (k[0] == "*" and k[1] == z[1]) for z in zeros)]
    assert not stale, f"remove from PENDING (now valued or code-proved): {stale}"
