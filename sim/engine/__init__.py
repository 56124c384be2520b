"""The engines that run a Schedule's priced ops on every rank: simpy_engine.py (SimPy, one process per
rank and stream), heap_engine.py (the same timeline without SimPy, for speed, on a schedule compiled
by compiled.py), sampled.py (`--exact`: the mean step under per-rank arrival jitter, by sampling) and
estimate.py (what it reports), and the per-op records both emit (record.py, shared with the harness).

Each mechanism is one method of the same name in both engines (the SimPy engine's _Rank or _Pass, the
heap engine's _Pass), so a new mechanism is one method in each; tests/test_sampled.py,
test_engine_launch.py, test_host_lane.py and test_coschedule_rendezvous.py hold the two together:

    start_delay_s        the host lane's per-rank start offset (sim.stack.host_lane)
    compute_stream       compute ops in issue order; collectives handed to the comm stream
    wait_for_launch      the eager launch chain: the GPU waits for the CPU thread to launch an op
    wait_for_inputs      a compute op blocks on a collective's result ...
    wake                 ... and resumes once woken after it (Interference.wake_s)
    end_compute          a compute op ends: its outputs exist
    compute_slowdown     interference on compute, beside a collective or a spinning kernel
    comm_slowdown        interference on a collective: its slowest rank's
    comm_stream          collectives in issue order, up to the rank's arrival at the rendezvous
    host_node_ready_s    NCCL's per-collective host-node chain in a captured graph
    arrival_delay_s      the rank's delay before it arrives at a collective's rendezvous (per
                         collective and rank: the hook for whatever makes ranks arrive apart)
    sm_wait_s, spin      co-scheduling: a collective's kernel waits for SMs, or holds them and spins
    rendezvous           a rank arrives; the last one starts the collective
    start_collective, end_collective   a collective runs on every rank at once

Owns: Record, the engines. May import: schedule/, stack/ and the sim leaves: the ops come in priced
(as seconds, by the top's Simulator), so an engine imports no pricing and never the top.
"""
