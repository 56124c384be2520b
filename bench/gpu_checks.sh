#!/usr/bin/env bash
# Every GPU check in one script, for a machine with one CUDA GPU (written for an H200): numerics of the
# CUDA/NCCL path, a compute calibration of real shard shapes, benches of emulated TP ranks, and
# `tpsim compare` of the measurements against that calibration. Each step has its own timeout, so a
# hang ends that step, not the run.
#
#   on the GPU box:  OUT=/tmp/gpu-checks bash bench/gpu_checks.sh
#                    (without simpy installed there: `python3 -m pip download --no-deps -d .whl simpy==4.1.2`
#                    elsewhere, copy .whl/ into the checkout; the script installs it from there)
#   CPU smoke:       SMOKE=1 OUT=/tmp/gpu-smoke bash bench/gpu_checks.sh   (same wiring, toy models, gloo)
#   STEPS=kernels:   preflight + step K only (~6-7 min on an H200, at most 10.5 by its timeouts: one device
#                    command); STEPS=harness: steps 1-4 only (several minutes more: another device session).
#                    On the device tool (at most 8 files come back from its $OUT), e.g.
#                    OUT=/tmp/gc STEPS=kernels timeout 560 bash bench/gpu_checks.sh; cp /tmp/gc/kernels.tgz /tmp/gc/log.txt "$OUT"/
#                    then unpack into bench/results/gpu/<date>-<gpu>/ (e.g. 2026-12-02-h200) and commit it.
#   STEPS=symm:      step S only (~20 s on an H200, at most 90 s by its timeout; needs no simpy):
#                    OUT=/tmp/gc STEPS=symm timeout 150 bash bench/gpu_checks.sh; cp /tmp/gc/symm-mem.json /tmp/gc/log.txt "$OUT"/
#
# It writes everything under $OUT (log.txt, kernels.tgz, the profile, the bench JSONs, compare.tgz):
#  0. a short preflight of the CUDA/NCCL patterns the runner relies on (bench/gpu_preflight.py)
#  K. kernel-level checks beside tpsim's prices (bench/gpu_kernels.py; JSONs with provenance in $OUT/kernels,
#     packed into kernels.tgz after each part; needs no simpy): linear.json (fp16 F.linear at the 70B-TP8 / 8B-TP1
#     decode shapes, m 1/4/16/64: graph-replayed, cold-weight and eager µs, cuBLAS kernel names and grids),
#     decode.json (the reference's compiled comm-free decode step per kernel, per layer, batch 1/4/64/16, with
#     Inductor's output code and kept coordinate-descent configs), cosched.json (a spin probe of 16/24 CTAs,
#     1-CTA and 4-CTA clusters, on a second stream beside decode GEMMs: start delay, %smid, slowdown)
#  S. PyTorch symmetric-memory all-reduce at world size 1 (bench/gpu_symm_mem.py -> symm-mem.json): one_shot /
#     two_shot / multimem (with a multicast object) and the harness's --collective symm-mem call (copy in, kernel,
#     copy out; also replayed from a CUDA graph) per size, beside tpsim's prices at 2/4/8 ranks
#  1. numerics of all schedules on CUDA with NCCL at world size 1 (CUDA streams/events, NCCL async handles)
#  2. compute calibration of the exact op shapes of llama-3.1-70b at TP 8 and llama-3.1-8b at TP 1-8,
#     and the 1-rank NCCL all-reduce, extending h200-sxm -> h200-measured-compute.json
#  3. bench of one rank of llama-3.1-70b at TP 8 emulated on this GPU (its shard shapes; collectives on
#     the 1-rank NCCL group), decode under CUDA graphs; and llama-3.1-8b at TP 1; the compiled stack
#     (Inductor + CUDA-graph decode) on a few layers of the emulated 70B rank at several batch sizes
#  4. tpsim compare of the benches against the measured profile
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}            # an NCCL failure then says why in the log
if ! python3 -c "import simpy" 2>/dev/null && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || export PYTHONPATH="$(ls "$PWD"/.whl/simpy-*.whl)"   # a pure wheel imports as a zip
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
LOG="$OUT/log.txt"
STEPS=${STEPS:-all}                              # all | kernels (0 + K) | symm (S) | harness (all but K, S)
run() { echo "+ $*" | tee -a "$LOG"; local t0=$SECONDS; "$@" 2>&1 | tee -a "$LOG"; local rc=${PIPESTATUS[0]}; echo "= rc $rc, $((SECONDS - t0)) s" | tee -a "$LOG"; }

# every harness step ends itself: a hang costs that step's timeout, never the whole run
T="--timeout-s 60"
if [ "${SMOKE:-0}" = 1 ]; then
  DEV="--device cpu --backend gloo"; BIG=toy-1024; BIG_TP=4; SMALL=toy-512; SMALL_TPS="--tp 1 --tp 2"
  BASE=h200-sxm; LEN="--prompt 32 --gen 8"; CAL_LEN="--prompt 32 --gen 8"; BACKEND=gloo
  COMPILE_BATCHES="1 4"; COMPILE_LAYERS=2
else
  DEV="--device cuda --backend nccl"; BIG=llama-3.1-70b; BIG_TP=8; SMALL=llama-3.1-8b
  SMALL_TPS="--tp 1 --tp 2 --tp 4 --tp 8"; BASE=h200-sxm; LEN="--prompt 1024 --gen 128"
  CAL_LEN="--prompt 1024 --gen 128"; BACKEND=nccl
  COMPILE_BATCHES="1 64 4 16"; COMPILE_LAYERS=4     # the extremes first, should a later step time out
fi

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"
  env | grep -E '^NCCL_|^TORCH_NCCL' ; } | tee -a "$LOG"

if [ "$STEPS" = symm ] || [ "$STEPS" = all ]; then
  SS=""; [ "${SMOKE:-0}" = 1 ] && SS="--smoke"
  run timeout -k 10 -s INT 90 python3 bench/gpu_symm_mem.py --out "$OUT" $SS
  [ "$STEPS" = symm ] && { ls -la "$OUT" | tee -a "$LOG"; exit 0; }
fi
[ "${SMOKE:-0}" = 1 ] || [ "$STEPS" = harness ] || run timeout -s INT 90 python3 bench/gpu_preflight.py
# K: each part its own process and timeout; each JSON is rewritten after every item, so a timeout keeps
# what was measured; the cheap parts first. GPU time (estimates, H200):
#   linear  ~50 s  (60 shapes x 4 timings of 20 calls + a profiled call; 8B TP8's 20 last, cut first)
#   cosched ~45 s  (5 probe shapes x 5 works x 3 launch modes x 3 reps, each ~5 ms, one profiler session a
#                   rep; ~15 s compiling and tuning the m-1 generated GEMV)
#   decode  70B TP8 ~3 min (timeout 180 s), 8B TP1 ~2 min (120 s): per batch (1, 4, 64, 16 in that order) an
#                   Inductor compile + coordinate-descent tuning of ~25 Triton kernels at 2 layers, and of the
#                   0-layer step; the timed steps themselves are milliseconds. A batch cut off is simply absent
if [ "$STEPS" != harness ]; then
  K="$OUT/kernels"; KS=""; [ "${SMOKE:-0}" = 1 ] && KS="--smoke"
  pack() { tar -C "$OUT" -czf "$OUT/kernels.tgz" kernels; }
  run timeout -k 10 -s INT 120 python3 bench/gpu_kernels.py linear --out "$K" $KS; pack
  run timeout -k 10 -s INT 120 python3 bench/gpu_kernels.py cosched --out "$K" $KS; pack
  if [ "${SMOKE:-0}" = 1 ]; then
    run timeout -k 10 -s INT 120 python3 bench/gpu_kernels.py decode --out "$K" $KS; pack
  else
    run timeout -k 10 -s INT 180 python3 bench/gpu_kernels.py decode --models llama-3.1-70b:8 --out "$K"; pack
    run timeout -k 10 -s INT 120 python3 bench/gpu_kernels.py decode --models llama-3.1-8b:1 --out "$K"; pack
  fi
  # what the timings say against tpsim's prices (a second; rerun anywhere on the fetched files)
  timeout 60 python3 bench/gpu_report.py "$K" 2>&1 | tee -a "$LOG" || true
fi
[ "$STEPS" = kernels ] && { ls -la "$OUT" | tee -a "$LOG"; exit 0; }
python3 -c "import simpy" || { echo "simpy missing: pip download it into .whl and carry .whl" | tee -a "$LOG"; exit 3; }
run python3 cli.py check $DEV --tp 1 --model tiny $T --deadline-s 120
# --tp applies to every --models of one call, so the big model's shapes are also timed at the small
# model's TP degrees (one layer each: seconds on a GPU); one self-contained profile comes back
run python3 cli.py calibrate --backend $BACKEND --nproc 1 --quick --extends $BASE --collective all_reduce \
  --models $BIG --models $SMALL $SMALL_TPS --tp $BIG_TP --batch 1 $CAL_LEN --name h200-measured-compute $T \
  --out "$OUT/h200-measured-compute.json"
run python3 cli.py bench $DEV --tp 1 --emulate-tp $BIG_TP --model $BIG $LEN --repeats 3 --warmup 1 $T --deadline-s 240 \
  --schedule standard --schedule ladder --schedule upper-bound --json --out "$OUT/bench-$BIG-tp$BIG_TP-emulated.json"
run python3 cli.py bench $DEV --tp 1 --model $SMALL $LEN --repeats 3 --warmup 1 $T --deadline-s 240 \
  --schedule standard --schedule upper-bound --json --out "$OUT/bench-$SMALL-tp1.json"
# the compiled stack (Inductor + CUDA-graph decode, the reference's) on one emulated TP rank
# of the big model at batch 1/4/16/64; --layers keeps Inductor's compile to seconds, and the simulator
# predicts the same truncated model (--model NAME[:K]) with `predict --comm-group 1`
for B in ${COMPILE_BATCHES}; do
  run python3 cli.py bench $DEV --tp 1 --emulate-tp $BIG_TP --model $BIG --layers $COMPILE_LAYERS --batch $B $LEN \
    --compile --repeats 3 --warmup 1 $T --deadline-s 240 --schedule upper-bound --json \
    --out "$OUT/bench-$BIG-tp$BIG_TP-emulated-compiled-b$B.json"
done
run python3 cli.py compare --profile "$OUT/h200-measured-compute.json" \
  --measured "$OUT/bench-$BIG-tp$BIG_TP-emulated.json" --measured "$OUT/bench-$SMALL-tp1.json" --out-dir "$OUT/compare"
tar -C "$OUT" -czf "$OUT/compare.tgz" compare && rm -rf "$OUT/compare"
ls -la "$OUT" | tee -a "$LOG"
