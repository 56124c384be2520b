"""The hardware a prediction runs on: profiles (profile.py loads and writes them; read.py reads the file;
check.py and fields.py parse it field by field into the types of schema.py; gemm_tables.py,
l2_section.py and decode_attention_section.py parse three sections), the built-in profiles (profiles/), and what a profile describes: the
topology graph (topology.py), the GPU's GPC geometry (gpc.py) and cuBLAS's grids by shape (gemm_grids.py).

Owns: Profile and every type a profile holds (GpuSpec, L2Spec, TopologySpec, ...). May import: stack/
(a profile's stack_defaults are Stack fields) and the sim leaves; never price/: parsing a profile
imports no pricing.
"""
