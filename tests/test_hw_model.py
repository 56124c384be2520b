"""Shards, seeding, kernels and the runner's wait placement, in one process (no process group)."""
import pytest

torch = pytest.importorskip("torch")

import tpsim.hw.model as hm  # noqa: E402
from tpsim.hw.check import Reference  # noqa: E402
from tpsim.sim.memory import Placement  # noqa: E402
from tpsim.hw.runner import Runner, make_plan  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.schedule.language import build, plan_of  # noqa: E402
from tpsim.sim.stack.spec import Stack, Step  # noqa: E402
from tpsim.sim.schedule.transform import local  # noqa: E402

pytestmark = pytest.mark.hw
TINY = get_model("tiny")


def test_draw_rows_is_chunk_exact(monkeypatch):
    monkeypatch.setattr(hm, "_CHUNK_ELEMS", 48)              # force many chunks of 3 rows x 16 cols
    full = hm.draw_rows("x", 20, 16, 0, 20, seed=1, std=1.0, dtype=torch.float32, device="cpu")
    part = hm.draw_rows("x", 20, 16, 5, 13, seed=1, std=1.0, dtype=torch.float32, device="cpu")
    assert torch.equal(full[5:13], part)
    padded = hm.draw_rows("x", 20, 16, 18, 24, seed=1, std=1.0, dtype=torch.float32, device="cpu")
    assert torch.equal(padded[:2], full[18:]) and not padded[2:].any()
    other = hm.draw_rows("x", 20, 16, 0, 20, seed=2, std=1.0, dtype=torch.float32, device="cpu")
    assert not torch.equal(full, other)


@pytest.mark.parametrize("tp", [2, 4])
def test_shards_reassemble_the_full_weights(tp):
    full = hm.full_weights(TINY)
    shards = [hm.build_weights(Placement(TINY, tp, r, "vocab-parallel")) for r in range(tp)]
    hd, L = TINY.head_dim, "L1"
    q = TINY.q_dim // tp
    assert torch.equal(torch.cat([s[f"{L}.wqkv"][:q] for s in shards]), full[f"{L}.wq"])
    assert torch.equal(torch.cat([s[f"{L}.wo"] for s in shards], dim=1), full[f"{L}.wo"])
    f = TINY.ffn // tp
    assert torch.equal(torch.cat([s[f"{L}.w13"][:f] for s in shards]), full[f"{L}.w1"])
    assert torch.equal(torch.cat([s[f"{L}.w13"][f:] for s in shards]), full[f"{L}.w3"])
    assert torch.equal(torch.cat([s[f"{L}.w2"] for s in shards], dim=1), full[f"{L}.w2"])
    assert torch.equal(torch.cat([s["head"] for s in shards]), full["head"])
    for r, s in enumerate(shards):                            # replicated KV head when kv < tp
        kvh = Placement(TINY, tp, r).kv_heads.start
        k = s[f"{L}.wqkv"][q:q + len(Placement(TINY, tp, r).kv_heads) * hd]
        assert torch.equal(k[:hd], full[f"{L}.wk"][kvh * hd:(kvh + 1) * hd])
        assert torch.equal(s["embed"], full["embed"])


def _run_single(spec, stack, prompt=8, gen=5, batch=2, transform=lambda s: s):
    """Single-process runner (tp=1, no collectives) over prefill + teacher-forced decode."""
    rm = hm.build_rank_model(TINY, 1, 0, batch=batch, max_seq=prompt + gen, dtype=stack.dtype)
    runner = Runner(rm, None)
    tokens = torch.randint(0, TINY.vocab, (batch, prompt + gen - 1), generator=torch.Generator().manual_seed(3))
    pre = transform(build(spec, TINY, 1, Step.prefill(batch, prompt, gen, stack), stack))
    dec = transform(build(spec, TINY, 1, Step.decode(batch, prompt, gen, 1, stack), stack))
    outs = [runner.forward(pre, tokens[:, :prompt], 0).logits]
    for j in range(1, gen):
        p = prompt + j - 1
        outs.append(runner.forward(dec, tokens[:, p:p + 1], p).logits)
    return outs, tokens


@pytest.mark.parametrize("stack", [Stack(dtype="fp32"), Stack(dtype="fp32", attention="flash", kv="filled"),
                                   Stack(dtype="fp32", expand_gqa=False, prefill_logits="last")])
def test_runner_kernels_match_reference(stack):
    # upper-bound at TP 1 is the full model with no collectives: equal to the standard reference.
    outs, tokens = _run_single("upper-bound", stack)
    ref = Reference(TINY, hm.full_weights(TINY), plan_of("standard", TINY.layers), 1, 2, 13)
    r = ref.forward(tokens[:, :8], 0)
    if stack.prefill_logits == "last":
        r = r.view(2, 8, -1)[:, -1]
    assert torch.allclose(outs[0], r, atol=1e-4)
    for j in range(1, 5):
        assert torch.allclose(outs[j], ref.forward(tokens[:, 7 + j:8 + j], 7 + j), atol=1e-4)


def test_runner_runs_stand_ins_and_waits():
    # standard without its collectives (sim.schedule.transform.local) is upper-bound, op for op
    st = Stack(dtype="fp32")
    local_outs, _ = _run_single("standard", st, transform=local)
    ub_outs, _ = _run_single("upper-bound", st)
    assert all(torch.equal(a, b) for a, b in zip(local_outs, ub_outs))
    # one rank of TP 2 with a vocab-parallel head: the all-gather's stand-in tiles the shard
    rm = hm.build_rank_model(TINY, 2, 0, batch=1, max_seq=8, dtype="fp32", head="vocab-parallel")
    vp = Stack(dtype="fp32", head="vocab-parallel")
    sched = local(build("standard", TINY, 2, Step.prefill(1, 8, 1, vp), vp))
    logits = Runner(rm).forward(sched, torch.zeros(1, 8, dtype=torch.long), 0).logits     # [8, 2 * shard]
    half = logits.shape[1] // 2
    assert half == -(-TINY.vocab // 2) and torch.equal(logits[:, :half], logits[:, half:])
    # a stand-in with a cost spins for it
    op = next(op for op in sched.ops if op.kind == "standin")
    import dataclasses
    import time
    from tpsim.hw.kernels import KERNELS
    slow = dataclasses.replace(op, attrs=tuple((k, 2_000_000 if k == "cost_ns" else v) for k, v in op.attrs))
    x = torch.ones(1, TINY.hidden)
    t0 = time.perf_counter()
    assert KERNELS["standin"](None, slow, x) is x and time.perf_counter() - t0 >= 2e-3


def test_references_have_teeth():
    w = hm.full_weights(TINY)
    tok = torch.randint(0, TINY.vocab, (1, 8), generator=torch.Generator().manual_seed(0))
    out = {s: Reference(TINY, w, plan_of(s, TINY.layers), tp, 1, 8).forward(tok, 0)
           for s, tp in [("standard", 2), ("ladder", 2), ("parallel", 2), ("spd:1.0", 2), ("ladder:1", 2)]}
    out["spd4"] = Reference(TINY, w, plan_of("spd:1.0", TINY.layers), 4, 1, 8).forward(tok, 0)
    with pytest.raises(ValueError, match="upper-bound"):
        Reference(TINY, w, plan_of("upper-bound", TINY.layers), 2, 1, 8)
    keys = list(out)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            assert (out[a] - out[b]).abs().max() > 1e-2, (a, b)


class _FakeWork:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait(self):
        self.log.append(("wait", self.name))

    def get_future(self):
        raise RuntimeError("no futures")


def test_ladder_waits_exactly_at_the_reader(monkeypatch):
    """Collectives are issued in IR order and each is waited only when its first reader runs."""
    import torch.distributed as dist
    log, issued = [], []

    def fake_all_reduce(t, group=None, async_op=False):
        issued.append(len(issued))
        log.append(("issue", issued[-1]))
        return _FakeWork(log, issued[-1])
    monkeypatch.setattr(dist, "all_reduce", fake_all_reduce)
    st = Stack(dtype="fp32")
    sched = build("ladder", TINY, 2, Step.prefill(1, 4, 2, st), st)
    rm = hm.build_rank_model(TINY, 2, 0, batch=1, max_seq=6)
    runner = Runner(rm, object(), timing=True)
    seen = []
    orig = dict(runner.kernels)
    for k, f in orig.items():
        runner.kernels[k] = (lambda f: lambda ctx, op, *a: (seen.append(op.name), log.append(("op", op.name)),
                                                             f(ctx, op, *a))[-1])(f)
    res = runner.forward(sched, torch.zeros(1, 4, dtype=torch.long), 0)
    events = [e for e in log]
    # L0.attn.allreduce (issued 1st) is waited right before L0.attn.add, after L0.mlp's compute ran.
    i_wait = events.index(("wait", 0))
    assert events[i_wait + 1] == ("op", "L0.attn.add")
    assert ("op", "L0.mlp.down") in events[:i_wait]
    assert events.index(("issue", 1)) < i_wait                       # L0.mlp's AR is in flight too
    comp = [op.name for op in sched.ops if not op.is_comm]
    assert seen == comp                                              # compute ops in IR order
    names = {r.op for r in res.records}
    assert names == {op.name for op in sched.ops}                    # records join on IR names
    assert {r.stream for r in res.records} == {"compute", "comm", "wait"}


def test_plan_frees_and_clones():
    st = Stack(dtype="fp32")
    sched = build("spd:1.0", TINY, 2, Step.prefill(1, 4, 2, st), st)
    plan = make_plan(sched)
    assert not plan.clone_input                   # no all-reduce input is read after its issue
    assert plan.last_use["embed.x"] < len(sched.ops) - 1
    assert "head.logits" in plan.keep and "next_tokens" in plan.keep


def test_cuda_path_imports_and_refuses_on_cpu():
    from tpsim.hw.runner import DecodeGraph
    st = Stack(dtype="fp32")
    rm = hm.build_rank_model(TINY, 1, 0, batch=1, max_seq=6)
    runner = Runner(rm, None)
    assert runner.comm_stream is None and not runner.cuda
    sched = build("standard", TINY, 1, Step.decode(1, 4, 2, 1, st), st)
    with pytest.raises(ValueError, match="cuda"):
        DecodeGraph(runner, sched)
    with pytest.raises(ValueError, match="static"):
        runner.forward(build("standard", TINY, 1, Step.decode(1, 4, 2, 1, Stack(kv="filled")), Stack(kv="filled")),
                       torch.zeros(1, 1, dtype=torch.long), torch.tensor(4))


# ---- Llama-family variants from Hugging Face configs (tests/fixtures/hf): Qwen2's qkv bias,
# Qwen3's q/k norm (+ head_dim != hidden/heads, tied embeddings), run by the harness and checked
# against the reference's own implementation of each.

def _hf(name):
    import os
    return get_model(os.path.join(os.path.dirname(__file__), "fixtures", "hf", name))


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-qwen3"])
def test_variant_kernels_match_reference(name):
    m = _hf(name)
    stack = Stack(dtype="fp32")
    rm = hm.build_rank_model(m, 1, 0, batch=2, max_seq=13, dtype="fp32")
    runner = Runner(rm, None)
    tokens = torch.randint(0, m.vocab, (2, 12), generator=torch.Generator().manual_seed(3))
    pre = build("upper-bound", m, 1, Step.prefill(2, 8, 5, stack), stack)
    dec = build("upper-bound", m, 1, Step.decode(2, 8, 5, 1, stack), stack)
    full = hm.full_weights(m)
    ref = Reference(m, full, plan_of("standard", m.layers), 1, 2, 13)
    assert torch.allclose(runner.forward(pre, tokens[:, :8], 0).logits, ref.forward(tokens[:, :8], 0), atol=1e-4)
    for j in range(1, 5):
        p = 7 + j
        assert torch.allclose(runner.forward(dec, tokens[:, p:p + 1], p).logits,
                              ref.forward(tokens[:, p:p + 1], p), atol=1e-4)
    # teeth: the variant changes the output (without it the reference differs)
    from dataclasses import replace
    plain = replace(m, qkv_bias=False, qk_norm=False)
    other = Reference(plain, full, plan_of("standard", plain.layers), 1, 2, 13).forward(tokens[:, :8], 0)
    mine = Reference(m, full, plan_of("standard", m.layers), 1, 2, 13).forward(tokens[:, :8], 0)
    assert (mine - other).abs().max() > 1e-2


def test_qkv_bias_shards_reassemble():
    m = _hf("tiny-qwen2")
    full = hm.full_weights(m)
    shards = [hm.build_weights(Placement(m, 2, r)) for r in range(2)]
    q, kv = m.q_dim // 2, m.kv_dim // 2
    assert torch.equal(torch.cat([s["L1.wqkv.bias"][:q] for s in shards]), full["L1.bq"])
    assert torch.equal(torch.cat([s["L1.wqkv.bias"][q:q + kv] for s in shards]), full["L1.bk"])
    assert torch.equal(torch.cat([s["L1.wqkv.bias"][q + kv:] for s in shards]), full["L1.bv"])
    q3 = _hf("tiny-qwen3")
    w = hm.build_weights(Placement(q3, 2, 1))
    assert w["L0.q_norm"].shape == (32,) and torch.equal(w["L0.k_norm"], hm.full_weights(q3)["L0.k_norm"])
