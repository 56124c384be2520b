"""No silent zeros: the terms that cost nothing at TP 1 or grow with the TP degree, and a walker that finds
any of them left at zero without the code proving the work absent.

A term a source cannot pin gets a value and a range from the best evidence (a trace, the code's
structure, a measurement of the same code path); zero stays only where the engine's or the library's
code shows the work is not done, and then its source starts CODE_PROOF ("code: <file@version what
proves it>"). A zero that says "no public measurement found" is the most optimistic value there is,
and for these terms it overstates what Ladder or SPD gain (host work that does not shrink with TP
dilutes them).

"TP-dependent" is a list, in code:
- a stack's host lane: sim.stack.host_lane.TP_DEPENDENT (the hand-off, its growth with the batch, the
  ranks' order in it, tree hops, wake-ups, GPU-side input broadcasts, the ranks' spread);
- a profile: PROFILE_TP_DEPENDENT below (per-collective costs that exist only across ranks: the ranks'
  arrival jitter at a collective, the graph nodes and copies NCCL or Inductor add per collective, the
  eager call's extra over a graph replay).

tests/test_silent_zeros.py walks every built-in preset and profile with these.
"""
from __future__ import annotations

from tpsim.sim.stack.host_lane import TP_DEPENDENT
from tpsim.sim.stack.presets import Preset

CODE_PROOF = "code:"

# profile fields (dotted paths into the profile JSON, its `extends` chain merged) that act only on
# collectives, i.e. only at TP > 1
PROFILE_TP_DEPENDENT = (
    "jitter.arrival.node.mean_us",           # a rank's late arrival at a one-node collective
    "jitter.arrival.net.mean_us",            # ... at a collective across nodes
    "collectives.graph_extra_us",            # a copy kernel beside a captured collective
    "collectives.graph_nccl_node_us",        # NCCL's graph-mixing event node per captured NCCL kernel
    "collectives.graph_net_host_us",         # NCCL's host node per captured collective across the network
    "collectives.eager_extra_us",            # an eager collective call over its graph replay
)


def code_proved(source: str) -> bool:
    return str(source).lstrip().startswith(CODE_PROOF)


def preset_silent_zeros(p: Preset) -> list[str]:
    """The preset's TP-dependent host terms that are zero (or absent: HostStep's default is zero)
    without a code-proof source, as "host.FIELD: its source"."""
    host = p.values.get("host", {})
    out = []
    for f in TP_DEPENDENT:
        src = p.sources.get(f"host.{f}", "(no source: HostStep's default)")
        if not host.get(f, 0) and not code_proved(src):
            out.append(f"host.{f}: {src}")
    return out


def profile_silent_zeros(raw: dict) -> list[str]:
    """The profile's TP-dependent numbers (PROFILE_TP_DEPENDENT) that are zero without a code-proof
    source, as "PATH: its source". `raw`: the profile's JSON with its `extends` chain merged
    (sim.hardware.profile.read_raw). A path the profile does not hold is its parser's default, zero."""
    out = []
    for path in PROFILE_TP_DEPENDENT:
        parts = path.split(".")
        arrival = raw.get("jitter", {}).get("arrival") if isinstance(raw.get("jitter"), dict) else None
        if parts[:2] == ["jitter", "arrival"] and isinstance(arrival, dict) and arrival and parts[2] not in arrival:
            parts[2] = next(iter(arrival))      # a scope left out takes the first given one's (the parser's rule)
        cur = raw
        for part in parts:
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is None:
            out.append(f"{path}: (absent: the parser's default, 0)")
            continue
        value, src = (cur.get("value"), cur.get("source", "")) if isinstance(cur, dict) else (cur, "(bare number)")
        if not value and not code_proved(src):
            out.append(f"{path}: {src}")
    return out
