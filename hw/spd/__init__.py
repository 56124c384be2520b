"""`tpsim spd-plan`: the SPD blocks chosen as the SPD paper does (measured perplexity sensitivity per
block on a checkpoint) and priced by the simulator: plan.py (the torch side, per rank), select.py
(choosing, pricing, printing; torch-free) and text.py (the evaluation tokens and the digests a resumed
plan is checked against).
"""
