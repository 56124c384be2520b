"""Collectives to seconds: collective.py (CollectiveCost: a profile's measured tables, NCCL's model, the
topology), topology.py (NCCL's cost model on a topology graph), custom_allreduce.py and
trtllm_allreduce.py (serving engines' own all-reduce kernels), timing.py (what a benchmark's timing
loop measures of one). Same imports as price/.
"""
