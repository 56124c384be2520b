"""torch.distributed's gather/scatter collectives under the names the installed torch gives them.

torch 2.13 renamed them (`all_gather_into_tensor` -> `all_gather_single`, `reduce_scatter_tensor`
-> `reduce_scatter_single`, in torch.distributed and in its functional collectives); the old names
still work there but warn FutureWarning on every call. The [hw] extra supports torch >= 2.3, which
has only the old names. Same signatures, same ops: one name each here, the new where it exists."""
from __future__ import annotations

import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

# c10d, in place into an output buffer: (output, input, [op,] group=, async_op=)
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
# functional (traceable by Dynamo, what Inductor fuses): (tensor, [reduce op,] dim, group) -> tensor
funcol_all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
funcol_reduce_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
