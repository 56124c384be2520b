"""What a benchmark's timing loop measures for one collective, given the kernel's device time.

Public collective numbers time the same NCCL kernel through different loops, and a loop can put
host work inside what it reports. `loop_time` turns the device time the profile prices (mode
"nccl": the bare kernel, back to back) into what one loop measures, from the loop's mechanism and
sourced host constants only; where the mechanism has no sourced constant, the point is returned
`unpriced` with the reason, so a validation can keep the whole class out of its medians by rule.

Loops (`Timing.kind`; each bench/data source cites where its loop was read):
  back_to_back_stream   nccl-tests default with one GPU per launching thread (mpirun -g 1, or -t N):
                        `iters` calls enqueued back to back, CPU timer around them and the final
                        stream sync, divided by iters (nccl-tests src/common.cu BenchTime). The host
                        enqueues ahead of the GPU, so it measures the device time. The profile's
                        NCCL tables are timed this way (aiconfigurator collector/collect_nccl.py
                        runs all_reduce_perf -t num_gpus: one thread per GPU).
  single_thread_n_gpus  nccl-tests -g N (N > 1): one thread issues ncclGroupStart, N collectives
                        (one per GPU), ncclGroupEnd each iteration (common.cu startColl), so an
                        iteration costs max(device, N host launches). No public microbenchmark
                        gives the C++ host cost of one NCCL launch on H100 (NVIDIA only says -g N
                        pays "the CUDA latency overheads of single process jobs", nccl-tests#333),
                        so the floor is not priced; a point is device-bound -- priced as device --
                        only when the device time covers N launches at an upper bound of one launch,
                        the profile's compute.launch_us.eager (one eager kernel launch from Python,
                        Python dispatch included: a C++ ncclAllReduce in a group has no Python
                        on its path). Otherwise unpriced.
  graph_replay_batched  nccl-tests -G k: all `iters` calls of an iteration loop are captured in one
                        graph per GPU, launched k times; the time is divided by iters * k
                        (common.cu BenchTime). Each captured call pays NCCL's graph-mixing nodes
                        (NCCL_GRAPH_MIXING_SUPPORT=1, the default: strongstream.cc adds an
                        event-record node after every captured NCCL kernel and the next captured
                        kernel waits on it, so in this back-to-back chain every call has it on its
                        path): device + collectives.graph_nccl_node_us. The launches: BenchTime
                        instantiates a fresh graph per size and starts the timer right before
                        launching it, with no cudaGraphUpload, so the graph's first launch -- in
                        which the runtime uploads the executable graph to the device unless
                        cudaGraphUpload or cudaGraphInstantiateFlagUpload did so before (CUDA runtime
                        API docs of both), one graph per GPU in turn from one thread with -g N -- is
                        inside every timed sample. With k = 1 it is the whole sample's launch, shared
                        by only `iters` calls, and no public microbenchmark prices an H100 graph
                        upload: unpriced. With k > 1 the upload is spread over k * iters calls and
                        later launches of an uploaded graph cost about one kernel launch each: not
                        added.
  eager_sync_per_call   torch: start event, one eager dist.all_reduce, end event, synchronize, per
                        timed call. The GPU idles before each call, so the events take in the whole
                        host path of the call (Python dispatch, ProcessGroupNCCL, ncclAllReduce,
                        the kernel launch) that a back-to-back loop hides behind the previous
                        kernel: device + compute.launch_us.eager (the profile's cost of one eager
                        launch from Python, H100: aiconfigurator's eager vs graph vLLM all-reduce).
                        Not device + eager_extra: eager_extra is what a back-to-back eager loop
                        leaves unhidden of that same path.
  graph_replay_per_call torch: start event, one replay of a graph holding the single collective,
                        end event, synchronize. The events take in one Python-dispatched
                        cudaGraphLaunch (and the collective's graph_nccl_node, added to the shown
                        time); no sourced H100 constant for the launch (compute.launch_us.graph is
                        a kernel node's back-to-back floor inside a graph, not a graph launch from
                        the host): unpriced. The reference stack never pays it per collective (its
                        all-reduce is one node of the whole decode-step graph).
  unstated              the source does not show its loop: priced as its mode says, nothing added.
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("back_to_back_stream", "single_thread_n_gpus", "graph_replay_batched", "eager_sync_per_call",
         "graph_replay_per_call", "unstated")


@dataclass(frozen=True)
class Timing:
    """How a source's loop timed each call: `kind` (KINDS), the GPUs one launching thread drives
    (nccl-tests -g; nThread x nGpus in its header is the process), the calls captured per graph
    (nccl-tests -n iters) and the launches of each timed graph (nccl-tests -G k; header 'graph: k')."""

    kind: str
    gpus_per_thread: int = 1
    calls_per_graph: int = 1
    graph_launches: int = 1

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown timing {self.kind!r}; choose from {', '.join(KINDS)}")
        if self.gpus_per_thread < 1 or self.calls_per_graph < 1 or self.graph_launches < 1:
            raise ValueError(f"timing {self.kind}: gpus_per_thread, calls_per_graph and graph_launches must be >= 1")
        one_gpu = self.kind in ("back_to_back_stream", "eager_sync_per_call", "graph_replay_per_call")
        several = self.gpus_per_thread > 1
        if (one_gpu and several) or (self.kind == "single_thread_n_gpus" and not several):
            raise ValueError(f"timing {self.kind} with {self.gpus_per_thread} GPUs per thread: one thread driving "
                             f"several GPUs with stream launches is single_thread_n_gpus, and only that")

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        return cls(d["kind"], int(d.get("gpus_per_thread", 1)), int(d.get("calls_per_graph", 1)),
                   int(d.get("graph_launches", 1)))


@dataclass(frozen=True)
class HostCosts:
    """The host constants the loops use, all from the profile (each states its source there)."""

    eager_launch_s: float          # compute.launch_us.eager: one eager kernel launch from Python
    graph_nccl_node_s: float = 0.0  # collectives.graph_nccl_node_us: NCCL's mixing nodes per captured call

    @classmethod
    def from_profile(cls, profile) -> "HostCosts":
        return cls(profile.launch_s["eager"], profile.graph_nccl_node_s)


@dataclass(frozen=True)
class LoopTime:
    time_s: float                  # what the loop measures; the device time where `unpriced`
    path: str                      # appended to the path column ("" when nothing is added)
    unpriced: str | None = None    # why the loop's time has no sourced price (None: priced)


def loop_time(device_s: float, timing: Timing, host: HostCosts) -> LoopTime:
    """What `timing`'s loop measures per call for a kernel of `device_s` seconds (module docstring)."""
    k = timing.kind
    if k in ("back_to_back_stream", "unstated"):
        return LoopTime(device_s, "")
    if k == "graph_replay_batched":
        node = (host.graph_nccl_node_s, "+graph_nccl_node") if host.graph_nccl_node_s > 0 else (0.0, "")
        if timing.graph_launches > 1:
            return LoopTime(device_s + node[0], node[1])
        n, calls = timing.gpus_per_thread, timing.calls_per_graph
        return LoopTime(device_s + node[0], node[1] + "+first-launch?",
                        f"each timed sample is the first launch of {n} freshly instantiated graph"
                        f"{'s' if n > 1 else ''}{f' of {calls} captured calls' if calls > 1 else ''} "
                        f"(nccl-tests -G 1, no cudaGraphUpload "
                        f"before the timer{', one thread launching all ' + str(n) if n > 1 else ''}): the launch "
                        f"uploads the graph, and no sourced constant prices that; the reference stack replays an "
                        f"uploaded graph")
    if k == "single_thread_n_gpus":
        n = timing.gpus_per_thread
        bound_s = n * host.eager_launch_s      # N launches, each at most one Python-dispatched launch
        if device_s >= bound_s:
            return LoopTime(device_s, "")
        return LoopTime(device_s, f"+host-floor?(g{n})",
                        f"one thread launches {n} GPUs' kernels per call (nccl-tests -g {n}); below "
                        f"{n} x compute.launch_us.eager = {bound_s * 1e6:.1f} us of device time the host "
                        f"launch floor can set the time, and no sourced constant prices it; the reference "
                        f"stack (one process per GPU) never pays it")
    if k == "eager_sync_per_call":
        return LoopTime(device_s + host.eager_launch_s, "+eager_launch")
    # graph_replay_per_call: the captured collective pays NCCL's mixing nodes too; the launch stays unpriced
    node = (host.graph_nccl_node_s, "+graph_nccl_node") if host.graph_nccl_node_s > 0 else (0.0, "")
    return LoopTime(device_s + node[0], node[1] + "+graph_launch?",
                    "one Python-dispatched cudaGraphLaunch of a single-collective graph inside every "
                    "timed call; no sourced H100 constant for it, and the reference stack's all-reduce "
                    "is one node of the whole decode-step graph, which never pays it per collective")
