"""`python -m tpsim ...`: the `tpsim` command (also as a torchrun entry point: `torchrun ... -m tpsim bench ...`)."""
from tpsim.cli import main

main(prog_name="tpsim")
