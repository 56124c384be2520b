"""Predictions: the protocol's arithmetic and invariants across models, TP and batch."""
import itertools

import pytest

from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Workload, predict
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack
from toy import no_jitter

H100 = load_profile("h100-sxm")
SCHEDS = ["standard", "ladder", "ladder:4", "spd:0.5", "spd:1", "parallel", "upper-bound"]


def by_name(preds):
    return {p.schedule: p for p in preds}


def test_protocol_arithmetic():
    w = Workload(get_model("llama-3.1-8b"), 2, H100, batch=4, prompt_len=128, gen_len=17)
    p = by_name(predict(w, ["standard", "ladder"]))
    for x in p.values():
        assert x.tokens_per_s == pytest.approx(4 * 17 / (x.prefill_s + x.decode_s))
    assert p["standard"].speedup == 1.0
    assert p["ladder"].speedup == pytest.approx(p["ladder"].tokens_per_s / p["standard"].tokens_per_s)
    # static cache: the 16 decode steps are identical, so decode = 16 x one step
    assert p["standard"].decode_s == pytest.approx(16 * p["standard"].decode.duration_s)


@pytest.mark.parametrize("model, tp, batch", list(itertools.product(
    ["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "llama-2-13b"], [2, 4, 8], [1, 16])))
def test_invariants(model, tp, batch):
    w = Workload(get_model(model), tp, H100, batch=batch, prompt_len=256, gen_len=8)
    p = by_name(predict(w, SCHEDS, record=False))
    ub = p["upper-bound"].tokens_per_s
    for s in ("standard", "ladder", "ladder:4", "spd:0.5", "spd:1"):
        assert p[s].tokens_per_s <= ub * (1 + 1e-9), s
    # parallel may pass the bound only through saving one norm per layer
    assert p["parallel"].tokens_per_s <= ub * 1.03
    # ladder never loses to standard when communication costs something; hybrid sits in between
    assert p["ladder"].tokens_per_s >= p["standard"].tokens_per_s * (1 - 1e-9)
    assert p["ladder"].tokens_per_s >= p["ladder:4"].tokens_per_s * (1 - 1e-9)
    assert p["ladder:4"].tokens_per_s >= p["standard"].tokens_per_s * (1 - 1e-9)
    assert p["spd:1"].tokens_per_s >= p["spd:0.5"].tokens_per_s >= p["standard"].tokens_per_s * (1 - 1e-9)
    assert p["standard"].exposed_comm_s > p["ladder"].exposed_comm_s


@pytest.mark.parametrize("model", ["llama-3.2-1b", "llama-3.1-8b"])
def test_tp1_speedups_are_one(model):
    # eager: every schedule runs the same kernels at TP 1
    eager = Stack(compile_prefill=False, compile_decode=False)
    w = Workload(get_model(model), 1, H100, prompt_len=128, gen_len=8, stack=eager)
    for p in predict(w, SCHEDS, record=False):
        assert p.exposed_comm_s == 0
        if p.schedule.startswith("spd"):
            # SPD adds P_r + Z_r locally before its one all-reduce: a real (small) extra add
            assert 0.95 < p.speedup <= 1.0, p.schedule
        elif p.schedule.startswith("ladder"):
            # the same kernels, but ladder issues each residual add one module later: the eager prefill's
            # CPU launch chain (sim/engine/simpy_engine.py issue_s) overlaps the GPU a little differently
            assert p.speedup == pytest.approx(1.0, abs=1e-3), p.schedule
        elif p.schedule != "parallel":
            assert p.speedup == pytest.approx(1.0, abs=1e-12), p.schedule
    # compiled: Inductor fuses each schedule's adds and norms differently (docs/compiled-stack.md)
    w = Workload(get_model(model), 1, H100, prompt_len=128, gen_len=8)
    for p in predict(w, SCHEDS, record=False):
        assert p.exposed_comm_s == 0 and 0.95 < p.speedup < 1.05, p.schedule


def test_decode_follows_the_kv_length_attention_reads():
    m = get_model("llama-3.1-8b")
    static = Workload(m, 2, H100, prompt_len=1024, gen_len=512)
    filled = Workload(m, 2, H100, prompt_len=1024, gen_len=512, stack=Stack(kv="filled"))
    ps, pf = predict(static, ["standard"])[0], predict(filled, ["standard"])[0]
    assert pf.decode_s < ps.decode_s          # the filled part is shorter than the whole cache
    longer = Workload(m, 2, H100, prompt_len=4096, gen_len=512, stack=Stack(kv="filled"))
    assert predict(longer, ["standard"])[0].decode_s > pf.decode_s


def test_fast_path_matches_exact_on_sampled_decode():
    w = Workload(get_model("llama-3.2-1b"), 2, no_jitter(H100), prompt_len=64, gen_len=40, stack=Stack(kv="filled"))
    fast = by_name(predict(w, ["standard", "ladder"], record=False))
    exact = by_name(predict(w, ["standard", "ladder"], exact=True, record=False))
    for s in fast:
        assert fast[s].decode_s == pytest.approx(exact[s].decode_s, rel=5e-3)
        assert fast[s].prefill_s == pytest.approx(exact[s].prefill_s, rel=1e-12)


def test_workload_validation():
    with pytest.raises(ValueError, match="valid TP degrees"):
        Workload(get_model("llama-2-13b"), 16, H100)
    with pytest.raises(ValueError, match="batch"):
        Workload(get_model("tiny"), 2, H100, batch=0)


def test_multi_node_costs_more():
    m = get_model("llama-3.1-70b")
    one = predict(Workload(m, 8, H100, prompt_len=128, gen_len=4), ["standard"])[0]
    two = predict(Workload(m, 8, H100, gpus_per_node=4, prompt_len=128, gen_len=4), ["standard"])[0]
    assert two.decode_s > one.decode_s and two.prefill_s > one.prefill_s
    with pytest.raises(ValueError, match="nodes of 8 GPUs"):
        Workload(m, 16, H100, gpus_per_node=16)


def test_dtype_needs_a_peak_in_the_profile():
    import dataclasses
    no_fp32 = dataclasses.replace(H100, peak_flops={k: v for k, v in H100.peak_flops.items() if k != "fp32"})
    with pytest.raises(ValueError, match="no matrix peak for fp32"):
        Workload(get_model("llama-3.1-8b"), 2, no_fp32, stack=Stack(dtype="fp32"))
    Workload(get_model("llama-3.1-8b"), 2, H100, stack=Stack(dtype="fp32"))   # the datasheet's FP32 peak


def test_comm_group_one_prices_emulated_rank():
    # one rank of a TP8 job on one GPU: no peer to wait for; a measured group-1 table is used when present
    import dataclasses
    from tpsim.sim.hardware.profile import CollectiveTable
    m = get_model("llama-3.1-8b")
    eager = Stack(compile_prefill=False, compile_decode=False)    # same kernels in every schedule
    emu = by_name(predict(Workload(m, 8, H100, prompt_len=64, gen_len=4, comm_group=1, stack=eager),
                          ["standard", "ladder"]))
    assert emu["standard"].exposed_comm_s == 0 and emu["ladder"].speedup == pytest.approx(1.0)
    one = CollectiveTable("all_reduce", 1, "node", "graph", "nccl", (1024.0, 1 << 20), (5e-6, 6e-6), "test")
    prof = dataclasses.replace(H100, collective_tables=(one,) + H100.collective_tables)
    timed = by_name(predict(Workload(m, 8, prof, prompt_len=64, gen_len=4, comm_group=1, stack=eager),
                            ["standard"]))
    assert timed["standard"].decode_s > emu["standard"].decode_s
    with pytest.raises(ValueError, match="comm_group"):
        Workload(m, 8, H100, comm_group=9)


def test_make_stack_precedence():
    """Given (not None) beats the profile's stack_defaults beats the base; compile covers both phases;
    decode graphs follow compile_decode unless set; collective auto means not given."""
    from tpsim.sim.stack.spec import Stack, make_stack
    s = make_stack({"compile": False, "attention": None, "collective": "auto"},
                   {"attention": "flash", "kv": "filled", "collective": "custom"}, Stack(dtype="bf16"))
    assert s == Stack(dtype="bf16", compile_prefill=False, compile_decode=False, decode_graphs=False,
                      attention="flash", kv="filled", collective="custom")
    assert make_stack({"compile": False, "compile_decode": True}).decode_graphs is True
    assert make_stack({"compile_decode": False, "decode_graphs": True}).decode_graphs is True
    with pytest.raises(ValueError, match="unknown stack field"):
        make_stack({"heads": "x"})


def test_a_pass_of_the_same_ops_at_the_same_prices_is_simulated_once(monkeypatch):
    """At batch 1 a token split has no second sequence to split a decode step by: token-split builds
    standard's layers, the same ops at the same prices, so its decode passes take standard's timelines
    (sim/predict.py Simulator._timed); its prefill, split by tokens, is simulated. 1B: one run of 16
    layers, two compressed passes (2 and 3 layers) a phase."""
    from tpsim.sim import predict as predict_module
    w = Workload(get_model("llama-3.2-1b"), 2, H100, batch=1, prompt_len=256, gen_len=32)
    runs = []
    real = predict_module.simulate
    monkeypatch.setattr(predict_module, "simulate",
                        lambda *a, **k: runs.append((a[0].name, a[0].step.phase)) or real(*a, **k))
    std, split = predict(w, ["standard", "token-split"], record=False)
    assert sorted(runs) == sorted([("standard", "prefill")] * 2 + [("standard", "decode")] * 2
                                  + [("token-split", "prefill")] * 2)
    assert split.decode_s == std.decode_s and split.prefill_s != std.prefill_s
