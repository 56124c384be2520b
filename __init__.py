"""tpsim: simulate and measure tensor-parallel LLM inference schedules.

The one importable name an install adds. The source tree keeps its layout (`sim/ hw/ calib/
cli.py` at the repository root); installed, that root is this package (pyproject.toml:
package-dir {"tpsim" = "."}), so the parts are `tpsim.sim` (the simulator, never imports torch),
`tpsim.hw` (the torch harness), `tpsim.calib` (calibration) and `tpsim.cli` (the command line).
Importing `tpsim` itself imports nothing else.
"""
