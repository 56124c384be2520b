"""The CPU launch chain of an eager step (sim/engine/simpy_engine.py `issue_s`): one Python thread per rank launches
the pass's ops in order, asynchronously (CUDA C++ Programming Guide, "Asynchronous Concurrent
Execution"), and an op starts on the GPU no earlier than its launch. Timelines pinned by hand on
integer toy costs, both engines held to the same numbers; then the pricing side (sim.price.cost: an eager
op's GPU time has no launch floor, its launches are issue_s; graph phases and CPU devices unchanged)."""
import dataclasses

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import op_work, roofline_s
from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.schedule.ir import COMM, COMPUTE
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload, predict
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import Schedule
from tpsim.sim.stack.spec import Stack, Step, make_stack
from tpsim.sim.stack.presets import PRESETS
from toy import ONE_LAYER, STACK, no_jitter, toy_op

STEP = Step.decode(1, 8, 4, 1, STACK)
H100 = load_profile("h100-sxm")
EAGER = Stack(compile_prefill=False, compile_decode=False, decode_graphs=False)


def _pass(*ops):
    return Schedule("pass", ONE_LAYER, 2, STEP, STACK, tuple(ops))


def _both(sched, gpu, cpu, ranks=1, delay=(), inter=Interference()):
    """SimPy's result, after checking the rank engine gives the same duration and exposed comm."""
    t, i = (lambda op: gpu[op.name]), (lambda op: cpu[op.name])
    a = simulate(sched, t, ranks=ranks, interference=inter, rank_delay_s=delay, issue_s=i)
    d, e = simulate_ranks(compile_schedule(sched, t, inter, issue_s=i), ranks, inter, start_s=delay)
    assert d == pytest.approx(a.duration_s, rel=1e-12, abs=1e-12)
    assert e == pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-12)
    return a


def _span(res, name, stream=COMPUTE, rank=0):
    r = next(r for r in res.records if r.op == name and r.stream == stream and r.rank == rank)
    return r.start_s, r.end_s


# a long GEMM g (GPU 10), then four short kernels s1..s4 (GPU 1 each), in a chain; every op 2 to launch
LONG_THEN_SHORT = _pass(toy_op("g", "gemm", ["tokens"]), *(toy_op(f"s{i}", "gemm", [f"s{i - 1}" if i > 1 else "g"])
                                                           for i in range(1, 5)))
LTS_GPU = {"g": 10.0, "s1": 1.0, "s2": 1.0, "s3": 1.0, "s4": 1.0}


def test_the_cpu_runs_ahead_of_a_long_kernel():
    """g launched at 2, runs 2-12; s1..s4 launched at 4, 6, 8, 10, all before g ends: they run back to
    back 12-13, 13-14, 14-15, 15-16. 16 = the first launch + the GPU's 14, below the per-op max
    max(10, 2) + 4 x max(1, 2) = 18 the old floor charged (plus nothing for the first launch)."""
    r = _both(LONG_THEN_SHORT, LTS_GPU, dict.fromkeys(LTS_GPU, 2.0))
    assert r.duration_s == 16.0
    assert [_span(r, n) for n in LTS_GPU] == [(2, 12), (12, 13), (13, 14), (14, 15), (15, 16)]
    # the trace's CPU lane: the thread launching g 0-2, s1 2-4, s2 4-6, s3 6-8, s4 8-10
    assert [_span(r, n, "launch") for n in LTS_GPU] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert r.last_held_op == 0          # only g waited for its launch; s1..s4 were launched in time


def test_a_chain_of_tiny_kernels_is_cpu_bound():
    """Five kernels of GPU 1 each, 3 to launch: launched at 3, 6, 9, 12, 15, each runs as soon as it is
    ([3,4], [6,7], ..., [15,16]): 16 = 5 x 3 of launches + the last kernel's 1."""
    tiny = _pass(*(toy_op(f"k{i}", "gemm", [f"k{i - 1}" if i else "tokens"]) for i in range(5)))
    names = [f"k{i}" for i in range(5)]
    r = _both(tiny, dict.fromkeys(names, 1.0), dict.fromkeys(names, 3.0))
    assert r.duration_s == 16.0
    assert [_span(r, n) for n in names] == [(3, 4), (6, 7), (9, 10), (12, 13), (15, 16)]


# a (GPU 2) -> ar (all-reduce 4, reads a) ; x (GPU 1, reads only the tokens: overlaps ar) ; y (GPU 1, reads ar)
MID_AR = _pass(toy_op("a", "gemm", ["tokens"]), toy_op("ar", "all_reduce", ["a"]),
               toy_op("x", "gemm", ["tokens"]), toy_op("y", "gemm", ["ar"]))
MID_GPU = {"a": 2.0, "ar": 4.0, "x": 1.0, "y": 1.0}


def test_a_collective_in_the_middle_on_two_ranks():
    """Each op 1 to launch. a launched 1, runs 1-3; ar launched 2, handed to the comm stream when a
    is done, 3-7; x launched 3, runs 3-4 beside it; y launched 4, waits for ar: 7-8. Rank 0 waits
    4-7 on ar: exposed 3."""
    cpu = dict.fromkeys(MID_GPU, 1.0)
    r = _both(MID_AR, MID_GPU, cpu, ranks=2)
    assert r.duration_s == 8.0 and r.exposed_comm_s == 3.0
    assert _span(r, "ar", COMM) == (3, 7) and _span(r, "x") == (3, 4) and _span(r, "y") == (7, 8)
    # launching ar takes 5: launched at 6, it runs 6-10; x launched 7, runs 7-8; y launched 8, waits
    # 8-10 for ar, runs 10-11 (exposed 2: the launch gap before ar is the CPU's, not the collective's)
    r = _both(MID_AR, MID_GPU, dict(cpu, ar=5.0), ranks=2)
    assert r.duration_s == 11.0 and r.exposed_comm_s == 2.0 and _span(r, "ar", COMM) == (6, 10)


def test_a_late_rank_starts_its_launch_chain_late():
    """Rank 1 starts 2 late (a host lane's hand-off): its chain launches a at 3 (runs 3-5), ar at 4,
    handed at 5; ar starts when both ranks are there: 5-9. Rank 0: x 3-4, y 9-10; rank 1: x launched
    5, 5-6; y 9-10. 10 in all; rank 0 waits 4-9 on ar: exposed 5."""
    r = _both(MID_AR, MID_GPU, dict.fromkeys(MID_GPU, 1.0), ranks=2, delay=(0.0, 2.0))
    assert r.duration_s == 10.0 and r.exposed_comm_s == 5.0
    assert _span(r, "ar", COMM) == (5, 9) and _span(r, "x", rank=1) == (5, 6)


@pytest.mark.parametrize("inter", [Interference(), Interference(2.0, 1.5), Interference(1.3, 1.2, 0.3)])
@pytest.mark.parametrize("launch", [0.25, 1.0, 3.0])
def test_engines_agree_with_launches_interference_and_late_ranks(inter, launch):
    for delay in ((), (0.0, 0.7, 2.5)):
        _both(MID_AR, MID_GPU, dict(dict.fromkeys(MID_GPU, launch), ar=launch / 2), 3, delay, inter)
        _both(LONG_THEN_SHORT, LTS_GPU, dict.fromkeys(LTS_GPU, launch), 3, delay, inter)


def test_without_launches_nothing_changes():
    """issue_s all 0 (graph phases, CPU devices): the pass of today, and no launch times compiled."""
    t = lambda op: MID_GPU[op.name]  # noqa: E731
    a = simulate(MID_AR, t, ranks=2)
    b = simulate(MID_AR, t, ranks=2, issue_s=lambda op: 0.0)
    assert a.duration_s == b.duration_s == 7.0 and a.records == b.records
    assert compile_schedule(MID_AR, t, issue_s=lambda op: 0.0) == compile_schedule(MID_AR, t)


def _gemm(m, name="L0.mlp.up"):
    return dataclasses.replace(toy_op(name, "gemm", ["x"]), attrs=(("m", m), ("n", 8192), ("k", 8192)), dtype="fp16",
                               layer=0)


def _rmsnorm():
    return dataclasses.replace(toy_op("L0.attn.norm", "rmsnorm", ["x"]), kind="rmsnorm",
                               attrs=(("rows", 1), ("width", 8192)), dtype="fp16", layer=0)


def test_an_eager_gpu_op_pays_the_device_floor_and_its_launches_go_to_the_chain():
    eager = CostModel(H100, EAGER)
    norm = _rmsnorm()
    works = op_work(norm, fused=False)                   # six fp32 passes: 6 kernels
    assert sum(w.kernels for w in works) == 6
    # 8192 fp16 elements per pass: each kernel is under the device floor (2.49 us), launched ahead or not
    assert roofline_s(H100, works, "fp16") < 6 * H100.launch_s["graph"]
    assert eager.compute_s(norm, "decode") == pytest.approx(6 * H100.launch_s["graph"])
    assert eager.issue_s(norm, "decode") == pytest.approx(6 * H100.launch_s["eager"])
    ar = dataclasses.replace(toy_op("L0.attn.allreduce", "all_reduce", ["x"]), dtype="fp16")
    assert eager.issue_s(ar, "decode") == H100.launch_s["eager"]                        # one launch


def test_an_eager_engine_layer_pays_its_python_once_at_its_attention():
    """Stack.layer_host_s: the layer's Python beyond its launches (module calls, views, custom-op
    dispatch) goes on the launch chain once per layer, at its attention op, in an eager phase only; a
    compiled phase holds those ops in Inductor's graph, a graph replay launches nothing. Toy 8B TP2
    decode, 7 us a layer: the attention's launches plus 7 us, the other ops' untouched."""
    step = Step.decode(1, 64, 8, 1, Stack())
    from tpsim.sim.schedule.language import build
    ops = {o.name: o for o in build("standard", get_model("llama-3.1-8b"), 2, step, Stack()).ops}
    sdpa, norm = ops["L0.attn.sdpa"], ops["L0.mlp.norm"]
    plain = CostModel(H100, EAGER)
    py = CostModel(H100, dataclasses.replace(EAGER, layer_host_s=7e-6))
    assert py.issue_s(sdpa, "decode") == pytest.approx(plain.issue_s(sdpa, "decode") + 7e-6)
    assert py.issue_s(norm, "decode") == plain.issue_s(norm, "decode")
    compiled = dataclasses.replace(EAGER, layer_host_s=7e-6, compile_decode=True)
    assert CostModel(H100, compiled).issue_s(sdpa, "decode") == CostModel(
        H100, dataclasses.replace(compiled, layer_host_s=0.0)).issue_s(sdpa, "decode")
    assert CostModel(H100, Stack(layer_host_s=7e-6)).issue_s(sdpa, "decode") == 0.0      # a graph replay
    with pytest.raises(ValueError, match="layer_host_s must be seconds"):
        Stack(layer_host_s=-1e-6)
    # a mixed step (serving): decodes and two chunks are three attention ops of one layer; its Python once
    mixed = Step.mixed([(3, 1, 100), (1, 16, 16), (1, 16, 48)], EAGER)
    ops = {o.name: o for o in build("standard", get_model("llama-3.1-8b"), 2, mixed, EAGER).ops}
    parts = [ops["L0.attn.sdpa"], ops["L0.attn.sdpa.part1"], ops["L0.attn.sdpa.part2"]]
    assert [py.issue_s(o, "prefill") - plain.issue_s(o, "prefill") for o in parts] == pytest.approx([7e-6, 0, 0])


def test_graph_phases_and_cpu_devices_keep_their_launch_rule():
    ref = CostModel(H100, Stack())                       # the reference replays a CUDA graph in decode
    norm, g = _rmsnorm(), _gemm(1, "head")
    assert ref.issue_s(norm, "decode") == 0.0
    assert ref.compute_s(norm, "decode") >= H100.launch_s["graph"]                      # the graph floor stays
    # vLLM's graph covers the forward: the LM head launches eagerly after the replay (Stack.graphs)
    vllm = CostModel(H100, Stack(graph_scope="forward"))
    assert vllm.issue_s(g, "decode") == pytest.approx(H100.launch_s["eager"])
    assert vllm.issue_s(_gemm(1), "decode") == 0.0
    # a CPU device: launch and compute add up in the op, nothing on a chain
    cpu = dataclasses.replace(H100, device="cpu")
    c = CostModel(cpu, EAGER)
    works = op_work(norm, fused=False)
    assert c.issue_s(norm, "decode") == 0.0
    assert c.compute_s(norm, "decode") == pytest.approx(roofline_s(cpu, works, "fp16") + 6 * cpu.launch_s["eager"])


def test_a_graph_replayed_decode_step_is_bit_identical_without_the_chain():
    """The reference stack's decode step (one CUDA graph): the simulator's pass with its issue_s equals
    the pass simulated with none at all, to the bit."""
    w = Workload(get_model("llama-3.1-8b").truncated(2), 2, no_jitter(H100), gen_len=4)
    sim = Simulator(w)
    for spec in ("standard", "ladder"):
        sched = w.schedule(spec, w.decode_step(1))
        plain = simulate(sched, lambda op: sim._op_time(op, "decode", sched), interference=sim.interference,
                         record=False)
        assert sim._simulate(sched, record=False).duration_s == plain.duration_s


def test_an_eager_step_is_launch_bound_only_where_the_cpu_falls_behind():
    """Eager 8B decode (32 layers): at batch 1 small kernels, more launch time than GPU time; at batch 64
    the reverse. Either way the step lies between the longer of the two and their sum (the old per-op
    max charged more than the longer wherever long and short kernels mix)."""
    model = get_model("llama-3.1-8b")
    for batch, bound in ((1, True), (64, False)):
        w = Workload(model, 1, H100, batch=batch, gen_len=4, stack=EAGER)
        sim = Simulator(w)
        sched = w.schedule("standard", w.decode_step(1))
        launches = sum(sim.cost.issue_s(op, "decode", sched) for op in sched.ops)
        gpu = sum(sim._op_time(op, "decode", sched) for op in sched.ops)
        step = sim._simulate(sched, record=False).duration_s
        assert max(launches, gpu) <= step <= launches + gpu
        assert (launches > gpu) is bound


def test_a_negative_launch_time_is_refused_by_both_engines():
    t = lambda op: MID_GPU[op.name]  # noqa: E731
    with pytest.raises(ValueError, match="launch time"):
        simulate(MID_AR, t, issue_s=lambda op: -1.0)
    with pytest.raises(ValueError, match="launch time"):
        compile_schedule(MID_AR, t, issue_s=lambda op: -1.0)


@pytest.mark.parametrize("preset, model, tp, batch", [
    ("vllm", "llama-3.1-8b", 4, 1),     # eager prefill near launch-bound: a few layers' slope misses
    ("eager", "llama-3.2-1b", 2, 16),   # launch-bound decode: the chain holds ops back in every layer
    ("reference", "llama-3.2-1b", 2, 1),  # compiled prefill without graphs, GPU-bound: extrapolated
])
def test_fast_path_is_exact_with_the_launch_chain(preset, model, tp, batch):
    """A pass the launch chain holds back after its first layer is simulated whole, one that it does
    not is extrapolated from compressed layers; either way the fast path equals brute force (every
    layer, every rank; the host lane's stagger off: it is added, not simulated, on the fast path)."""
    prof = no_jitter(load_profile("h100-sxm"))          # brute force would draw it: equal only in expectation
    st = make_stack({}, prof.stack_defaults, preset=PRESETS[preset].values)
    st = dataclasses.replace(st, host=dataclasses.replace(st.host, handoff_per_rank_s=0.0, rank_spread_s=0.0))
    w = Workload(get_model(model), tp, prof, batch=batch, prompt_len=64, gen_len=4, stack=st)
    scheds = ["standard", "ladder", "spd:0.4"]
    for f, e in zip(predict(w, scheds, record=False), predict(w, scheds, mode="brute", record=False)):
        assert f.prefill_s == pytest.approx(e.prefill_s, rel=1e-12), f.schedule
        assert f.decode_s == pytest.approx(e.decode_s, rel=1e-12), f.schedule


def test_dbo_threads_pay_their_start_once_and_a_hand_off_after_each_micro_batch_all_reduce():
    """vLLM's DBO runs its two ubatches on two Python threads (Stack.ubatch_start_s once a step, at the first
    split; Stack.ubatch_switch_s after each micro-batch all-reduce, where a thread hands over), on the launch
    chain of an eager phase only; a graph replay runs neither, and token-split (one thread) pays neither.
    Toy 8B TP2 prefill of 4 x 256 tokens (DBO splits from 512), 2 layers: 2 layers x 2 halves x 2
    micro-batches = 8 hand-offs of 3 us and one 40 us start over the plain eager launches."""
    from tpsim.sim.schedule.language import build
    model = get_model("llama-3.1-8b").truncated(2)
    step = Step.prefill(4, 256, 8, EAGER)
    dbo = build("dbo", model, 2, step, EAGER)
    plain = CostModel(H100, EAGER)
    threads = CostModel(H100, dataclasses.replace(EAGER, ubatch_switch_s=3e-6, ubatch_start_s=40e-6))
    extra = [threads.issue_s(o, "prefill") - plain.issue_s(o, "prefill") for o in dbo.ops]
    assert sum(extra) == pytest.approx(8 * 3e-6 + 40e-6)
    assert sorted(round(e * 1e6, 6) for e in extra if e)[-1] == 40.0
    assert sum(1 for o in dbo.ops if o.get("yield", 0)) == 8
    split = build("token-split", model, 2, step, EAGER)
    assert all(threads.issue_s(o, "prefill") == plain.issue_s(o, "prefill") for o in split.ops)
    graphs = dataclasses.replace(Stack(), ubatch_switch_s=3e-6, ubatch_start_s=40e-6)    # decode replays a graph
    dec = build("dbo", model, 2, Step.decode(64, 128, 8, 1, graphs), graphs)
    assert any(o.get("yield", 0) for o in dec.ops)
    assert all(CostModel(H100, graphs).issue_s(o, "decode") == 0.0 for o in dec.ops)
    for bad in (dict(ubatch_switch_s=-1e-6), dict(ubatch_start_s=2.0)):
        with pytest.raises(ValueError, match="must be seconds"):
            Stack(**bad)
