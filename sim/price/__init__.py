"""Pricing: an op or a collective to seconds. cost.py (CostModel: an op's time, from the profile's tables
or a roofline of work.py's FLOPs and bytes), fusion.py (a compiled layer as Inductor's kernels, from
compiled_kernels*.json), l2_traffic.py, flash_decode.py, decode_grid.py (a decode attention kernel's CTAs and
KV split) and decode_price.py (what they cost), occupancy.py and coschedule.py (what a kernel
occupies on a GPU and how a collective beside it starts and slows), and comm/ (collectives).

Owns: CostModel, CollectiveCost, the kernel tables. May import: hardware/, schedule/, stack/ and the sim
leaves; never engine/ or the top (predict, memory, sensitivity).
"""
