"""The reference harness's ladder and parallel decode forwards, beside the dense one (hw/derive/reference_model.py).

Transcriptions of mayank31398/ladder-residual-inference@ea2e9e44 on its compiled path
(torch.compile(fullgraph=True): `torch.compiler.is_compiling()` is true, so utils.all_reduce_func
is funcol.all_reduce and returns handle None -- every `handle.wait()` of the eager code is skipped,
and the only waits are the `wait_tensor` that funcol traces right after each all_reduce):

gpt_ladder_TP.GPTLadder.forward / LadderTransformerBlock.forward (semi_compiled_model False):
  prev_attn = prev_mlp = zeros_like(x)
  per block i: r = add_kernel(r, prev_attn)                 user-defined Triton kernel, [cdiv(numel, 1024)]
               a = all_reduce(attention(attention_norm(r)))  async in eager; here all_reduce + wait_tensor
               r = add_kernel(r, prev_mlp)
               m = all_reduce(feed_forward(ffn_norm(r)))
               prev_attn, prev_mlp = a, m
  x = r + prev_attn + prev_mlp;  norm;  output
  The residual add is `add_tensor_forward_triton_kernel` (transcribed below, @triton.jit, launched
  with a grid as the reference does): Inductor sees a user-defined Triton kernel, an extern call it
  never fuses with its own kernels. It is launched through torch.library.wrap_triton, which records
  the same `triton_kernel_wrapper_mutation` higher-order op that Dynamo records for a direct launch.

gpt_parallel_TP.GPTParallel.forward / ParallelTransformerBlock.forward (semi_compiled_model False):
  per block: y = FuseAttentionMLP(attention_norm(x)): wqkv1 -> split q, k, v, u, g; attention;
             y = wo(y); y = w2(silu(g) * u) + y;  y = all_reduce(y);  x = y + x

Op names follow tpsim's plans (sim/schedule/schedules/ladder.py, parallel.py) so hw/derive/inductor_overlap.py can
compare windows by name: the adds in block i of the ladder are the previous layer's
(`L{i-1}.attn.add`, `L{i-1}.mlp.add`; block 0 adds zeros: `L0.zero.attn.add`, not in tpsim's plan),
and the model's final `r + prev_attn + prev_mlp` is the last layer's attn.add then mlp.add.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tpsim.hw.derive import reference_model as R
from tpsim.hw.torch_compat import annotate, wrap_triton


@triton.jit
def add_tensor_forward_triton_kernel(x_ptr, y_ptr, output_ptr, num_elements, BLOCK_SIZE: tl.constexpr):
    """gpt_ladder_TP.py's kernel, as written there: output = x + y, BLOCK_SIZE elements a program."""
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    indices = block_start + tl.arange(0, BLOCK_SIZE)
    mask = indices < num_elements
    x = tl.load(x_ptr + indices, mask=mask)
    y = tl.load(y_ptr + indices, mask=mask)
    output = x + y
    tl.store(output_ptr + indices, output, mask=mask)


def _add_kernel(residual, other, name: str):
    """LadderTransformerBlock's residual add: a fresh output and one launch of the kernel."""
    with annotate({"tpsim_op": name}):
        numel = residual.numel()
        output = torch.empty_like(residual)
        wrap_triton(add_tensor_forward_triton_kernel)[(triton.cdiv(numel, 1024),)](
            residual, other, output, numel, 1024)
        return output


def forward_ladder(p: dict, s: R.Shapes, idx, input_pos, group=None, comm: bool = True):
    """GPTLadder's decode step (params: reference_model.params); returns the sampled token ids [B]."""
    mask, freqs, x = R.prologue(p, s, idx, input_pos)
    with annotate({"tpsim_op": "L0.zero.init"}):
        prev_a, prev_m = torch.zeros_like(x), torch.zeros_like(x)
    r = x
    for i in range(s.layers):
        L, prev = f"L{i}", (f"L{i - 1}" if i else "L0.zero")
        r = _add_kernel(r, prev_a, f"{prev}.attn.add")
        a = R.all_reduce(R.attention(p, s, L, r, freqs, mask, input_pos), f"{L}.attn.allreduce", group, comm)
        r = _add_kernel(r, prev_m, f"{prev}.mlp.add")
        m = R.all_reduce(R.feed_forward(p, L, r), f"{L}.mlp.allreduce", group, comm)
        prev_a, prev_m = a, m
    last = f"L{s.layers - 1}"
    with annotate({"tpsim_op": f"{last}.attn.add"}):
        r = r + prev_a
    with annotate({"tpsim_op": f"{last}.mlp.add"}):
        r = r + prev_m
    return R.epilogue(p, r)


def params_parallel(s: R.Shapes, device="cuda", dtype=torch.float16) -> dict:
    """GPTParallel's weights and buffers: per layer one norm, the fused wqkv1 [qkv + 2 * ffn, hidden],
    wo, w2 and the KV cache (FuseAttentionMLP)."""
    D, qkv = s.head_dim, (s.heads + 2 * s.kv_heads) * s.head_dim
    p = R.params(dataclasses.replace(s, layers=0), device, dtype)      # embed, norm, output, freqs, mask
    for i in range(s.layers):
        p |= {f"L{i}.attention_norm": torch.empty(s.hidden, device=device, dtype=dtype),
              f"L{i}.wqkv1": torch.empty(qkv + 2 * s.ffn, s.hidden, device=device, dtype=dtype),
              f"L{i}.wo": torch.empty(s.hidden, s.heads * D, device=device, dtype=dtype),
              f"L{i}.w2": torch.empty(s.hidden, s.ffn, device=device, dtype=dtype),
              f"L{i}.k_cache": torch.empty(s.batch, s.kv_heads, s.seq, D, device=device, dtype=dtype),
              f"L{i}.v_cache": torch.empty(s.batch, s.kv_heads, s.seq, D, device=device, dtype=dtype)}
    return p


def forward_parallel(p: dict, s: R.Shapes, idx, input_pos, group=None, comm: bool = True):
    """GPTParallel's decode step (params: params_parallel); returns the sampled token ids [B]."""
    mask, freqs, x = R.prologue(p, s, idx, input_pos)
    D, qkv = s.head_dim, (s.heads + 2 * s.kv_heads) * s.head_dim
    for i in range(s.layers):
        L = f"L{i}"
        with annotate({"tpsim_op": f"{L}.norm"}):
            h = R._rmsnorm(x, p[f"{L}.attention_norm"])
        with annotate({"tpsim_op": f"{L}.attn.qkv"}):
            fused = F.linear(h, p[f"{L}.wqkv1"])
        qkv_out, ug = fused.split([qkv, 2 * s.ffn], dim=-1)     # q, k, v | u, g: one split in the reference
        y = R.attention(p, s, L, x, freqs, mask, input_pos, wqkv=qkv_out)
        z = R.swiglu_down(p, L, ug)
        with annotate({"tpsim_op": f"{L}.mlp.sum"}):
            y = z + y
        y = R.all_reduce(y, f"{L}.allreduce", group, comm)
        with annotate({"tpsim_op": f"{L}.add"}):
            x = y + x
    return R.epilogue(p, x)


# model name -> (params, forward): what hw.derive.inductor_gpu.compile_decode lowers
MODELS = {"dense": (R.params, R.forward), "ladder": (R.params, forward_ladder),
          "parallel": (params_parallel, forward_parallel)}
