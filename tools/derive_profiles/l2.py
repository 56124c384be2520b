"""compute.l2 of the built-in profiles: the GPU's L2 -> SM bandwidth and the measured transition of a
repeated sweep from the L2 plateau to the DRAM plateau (sim/price/l2_traffic.py prices with them; the
format: sim/hardware/l2_section.py). Imported by derive_builtin.py (run that).

All from te42kyfo/gpu-benches `gpu-l2-cache` (commit 1c36d509, result files gpu-l2-cache/*.txt):
every block sweeps a data set repeatedly; the L2 rate is the mean "Eff. bw" over the 4-30 MB data
sets (data sets that fit in L2), the sweep rows are (data set kB as printed, Eff. bw GB/s) from the
L2 plateau's end to the DRAM plateau, and the DRAM plateau is the 132608 kB row. A box whose GPU
has no result file gets no section: its profile prices DRAM bytes only.
"""
from __future__ import annotations

from common import sv

_REPO = "te42kyfo/gpu-benches gpu-l2-cache (commit 1c36d509)"

# result file -> (L2 GB/s, sweep rows (kB, GB/s), DRAM plateau GB/s, what the file measured)
RESULTS = {
    "h200.txt": (10030, ((40448, 9666.0), (44032, 9105.3), (48128, 7542.5), (52736, 6467.1), (57856, 5053.8),
                         (63488, 4463.9), (69632, 4201.3), (76288, 4017.5), (83456, 3946.8), (91648, 3916.1)),
                 3887.9, "H200"),
    # H100 PCIe (114 SMs): no built-in profile of that board; kept for one (docs/profile-format.md)
    "h100_pcie.txt": (6990, ((36864, 6847.1), (40448, 5728.6), (44032, 4253.2), (48128, 3452.7), (52736, 2775.3),
                             (57856, 2244.2), (63488, 2077.4), (69632, 2019.4), (76288, 2000.0), (83456, 1993.0)),
                      1989.0, "H100 PCIe"),
    # L40 (AD102, 142 SMs, 96 MB L2): its plateau runs to 91648 kB, the sweep then falls to GDDR6's rate
    "l40.txt": (5210, ((91648, 5242.8), (100352, 4293.9), (110080, 1075.4), (120832, 879.8)), 850.5, "L40"),
    "a100_80.txt": (5330, ((28160, 5170.5), (30720, 3999.5), (33792, 3621.8), (36864, 3004.0), (40448, 2462.0),
                           (44032, 2188.0), (48128, 2026.5), (52736, 1945.5), (57856, 1915.4), (63488, 1894.6)),
                    1865.3, "A100 80 GB"),
}

# aiconfigurator system -> (result file, why that file prices it)
SYSTEM_FILE = {
    "h100_sxm": ("h200.txt", "; the H100 SXM has the same GH100 configuration (132 SMs, 50 MB L2, same boost "
                             "clock), so it takes the H200's file"),
    "h200_sxm": ("h200.txt", ""),
    "a100_sxm": ("a100_80.txt", ""),
    "l40s": ("l40.txt", "; the L40S has the L40's AD102 configuration (142 SMs, 96 MB L2, 48 GB GDDR6 at 864 "
                        "GB/s; NVIDIA L40 / L40S datasheets), boost clock 2520 against 2490 MHz, so it takes "
                        "the L40's file"),
}


def l2_section(system: str) -> dict | None:
    """compute.l2 of the box measured as aiconfigurator `system` (None: no sourced L2 numbers)."""
    if system not in SYSTEM_FILE:
        return None
    f, why = SYSTEM_FILE[system]
    gbps, rows, dram, gpu = RESULTS[f]
    return {
        "gbps": sv(gbps, f"{_REPO}, gpu-l2-cache/{f} ({gpu}): L2 -> SM bandwidth, mean 'Eff. bw' over the "
                         f"4-30 MB data sets (they fit in L2){why}"),
        "sweep": {"kb": [r[0] for r in rows], "gbps": [r[1] for r in rows], "dram_gbps": dram,
                  "source": f"{_REPO}, gpu-l2-cache/{f} ({gpu}): 'Eff. bw' of a repeated sweep per data set (kB "
                            f"as printed) from the L2 plateau's end to the DRAM plateau; dram_gbps: the "
                            f"132608 kB row{why}"},
    }
