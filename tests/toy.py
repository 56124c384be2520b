"""Hand-written integer costs for pinning timelines.

Per layer: attention = qkv 1 + out 1 = 2, MLP = up 2 + down 1 = 3; every other compute op 0;
every collective C (set per test)."""
from sim.model import ModelSpec
from sim.schedule import build
from sim.stack import Stack, Step

STACK = Stack()
ONE_LAYER = ModelSpec("toy-1l", 64, 1, 4, 2, 16, 128, 256)
TWO_LAYERS = ModelSpec("toy-2l", 64, 2, 4, 2, 16, 128, 256)
COMPUTE = {"attn.qkv": 1, "attn.out": 1, "mlp.up": 2, "mlp.down": 1}


def toy_time(c: float):
    def op_time(op):
        if op.is_comm:
            return c
        return COMPUTE.get(op.name.split(".", 1)[-1], 0) if op.layer is not None else 0
    return op_time


def toy_schedule(spec: str, model=TWO_LAYERS, tp: int = 2):
    return build(spec, model, tp, Step.decode(1, 8, 4, 1, STACK), STACK)
