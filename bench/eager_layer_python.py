"""The host time an eager engine layer spends in Python beyond its kernel launches: a count from the
engine's code times the cost of each kind of call, measured on this machine's CPU with the same
torch (the calls are CPU work: what transfers to a GPU host is the Python and the dispatcher, not
any kernel).

The count is vLLM v0.11's eager CUDA path of one Llama decoder layer at TP > 1 with the V1
FlashAttention backend (vllm/model_executor/models/llama.py LlamaDecoderLayer.forward and the layers
it calls; the sources per line in COUNT). Every kernel launch is left out: sim/price/cost.py already
charges each one compute.launch_us.eager, and the all-reduce's own call path is inside its eager
price. What is left: nn.Module calls, tensor ops that launch nothing (views, slices, split, unbind,
.data, empty), the dispatcher round trip of a custom op implemented in Python, and plain Python
frames. vLLM's FlashAttentionImpl.forward says it: "`view` and `slice` (or `[:n]`) operations are
surprisingly slow even in the case they do not invoke any GPU ops".

    python bench/eager_layer_python.py            # table + the per-layer total (value, range)

The value: the count times each kind's fastest repeat (on a shared machine other tenants only add
time). The range: that at the count -20%, to the count +20% at each kind's median repeat (calls the
count may miss or a version drops; the host CPU's speed).
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time

import torch
from torch import nn

# (kind, calls per layer, where in vLLM v0.11)
COUNT = (
    ("module", 12, "nn.Module.__call__: LlamaDecoderLayer, input_layernorm, self_attn, qkv_proj, rotary_emb, attn, "
                   "o_proj, post_attention_layernorm, mlp, gate_up_proj, act_fn, down_proj (models/llama.py)"),
    ("view", 13, "tensor ops that launch nothing: 2 x RMSNorm self.weight.data (layernorm.py forward_cuda); "
                 "qkv.split (llama.py); query/output/key/value .view and output.view(-1, hidden) (attention/layer.py "
                 "Attention.forward); kv_cache.unbind(0), query[:n], output[:n] (v1/attention/backends/flash_attn.py); "
                 "torch.empty of SiluAndMul's output (activation.py forward_cuda); 2 in flash_attn_varlen_func's "
                 "maybe_contiguous"),
    ("custom_op", 1, "torch.ops.vllm.unified_attention_with_output: the dispatcher into a Python implementation "
                     "(attention/layer.py; use_direct_call False on CUDA)"),
    ("frame", 30, "Python frames beyond the modules: CustomOp.forward -> forward_cuda (3), quant_method.apply + "
                  "dispatch_unquantized_gemm + default_unquantized_gemm (4 x 3), the _custom_ops wrappers (4), "
                  "get_forward_context, the KV-connector hooks (2), FlashAttentionImpl.forward, flash_attn_varlen_func, "
                  "reshape_and_cache_flash, _match_cos_sin_cache_dtype, ... (~30)"),
)
COUNT_SLACK = 0.2


class _Empty(nn.Module):
    def forward(self, x):
        return x


def _frame(a, b, c=None, d=None):
    return a


def unit_costs(n: int = 20000, repeats: int = 7) -> dict[str, tuple[float, float, float]]:
    """{kind: (median, min, max) microseconds per call} on this CPU."""
    torch.set_num_threads(1)
    lib = torch.library.Library("tpsim_bench", "DEF")
    lib.define("passthru(Tensor x) -> Tensor")
    lib.impl("passthru", lambda x: x, "CPU")
    x, m = torch.zeros(64, 8), _Empty()
    calls = {"module": lambda: m(x), "view": lambda: x.view(-1, 4), "custom_op": lambda: torch.ops.tpsim_bench.passthru(x),
             "frame": lambda: _frame(x, 1, c=2)}
    out = {}
    for kind, f in calls.items():
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                f()
            ts.append((time.perf_counter_ns() - t0) / n / 1e3)
        out[kind] = (statistics.median(ts), min(ts), max(ts))
    return out


def main() -> None:
    u = unit_costs()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"torch {torch.__version__}")
    print(f"{'kind':10} {'calls':>5} {'fastest':>8} {'median':>8}  us/layer (fastest)")
    value = median = 0.0
    for kind, k, _ in COUNT:
        med, mn, _mx = u[kind]
        value, median = value + k * mn, median + k * med
        print(f"{kind:10} {k:5d} {mn:8.2f} {med:8.2f}  {k * mn:7.1f}")
    print(f"per layer: {value:.1f} us, range [{value * (1 - COUNT_SLACK):.1f}, {median * (1 + COUNT_SLACK):.1f}] us "
          f"(count -/+{COUNT_SLACK:.0%}; the top at the median repeats)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
