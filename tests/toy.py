"""Hand-written integer costs for pinning timelines.

Per layer: attention = qkv 1 + out 1 = 2, MLP = up 2 + down 1 = 3; every other compute op 0;
every collective C (set per test)."""
from tpsim.sim.model import ModelSpec
from tpsim.sim.schedule import Op, Schedule, build
from tpsim.sim.stack import Stack, Step

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


def toy_op(name, kind, ins):
    attrs = (("rows", 1), ("width", 1), ("group", 2)) if kind == "all_reduce" else (("m", 1), ("n", 1))
    return Op(name, kind, tuple(ins), (name,), attrs, "fp32", 0)


# A blocking pass: seg0 = 2 -> AR0 -> seg1 = 3 -> AR1 -> seg2 = 1, each all-reduce 4 (14 in all).
TWO_AR_PASS = Schedule("pass", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, (
    toy_op("seg0", "gemm", ["tokens"]), toy_op("ar0", "all_reduce", ["seg0"]), toy_op("seg1", "gemm", ["ar0"]),
    toy_op("ar1", "all_reduce", ["seg1"]), toy_op("seg2", "gemm", ["ar1"])))
TWO_AR_COST = {"seg0": 2.0, "seg1": 3.0, "seg2": 1.0, "ar0": 4.0, "ar1": 4.0}
