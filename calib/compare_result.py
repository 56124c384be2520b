"""Compare's data, typed where it crosses modules: one compared grid point (`ComparedPoint`) and,
per schedule, its measured and predicted sides, relative errors, speedup intervals and sign
verdict (`ScheduleResult`). compare_join builds them; compare, compare_report and
compare_intervals read them.

compare.json is their JSON: every `to_dict` writes exactly the keys, order and values that file
has always held (optional keys only when present), and every `from_dict` reads it back, so
`from_dict(d).to_dict() == d` key for key (tests/test_compare_result.py). Values are kept as the
run recorded them (no float() of a measured int): the file's bytes round-trip too.
"""
from __future__ import annotations

from dataclasses import dataclass

SIGN_OK, SIGN_UNDETERMINED, SIGN_WRONG = "ok", "undetermined", "WRONG"


def sign_verdict(sign_match: bool, measured_within_noise: bool, predicted_within_noise: bool) -> str:
    """"ok" when prediction and measurement put the speedup on the same side of 1; else
    "undetermined" when either one's interval contains 1, "WRONG" when neither does."""
    if sign_match:
        return SIGN_OK
    return SIGN_UNDETERMINED if measured_within_noise or predicted_within_noise else SIGN_WRONG


@dataclass(frozen=True)
class OpRow:
    """One (phase, op, stream) of the per-op join: measured median over ranks vs simulated rank 0."""

    phase: str
    op: str
    stream: str                 # compute, comm or wait
    measured_s: float           # 0.0 when the harness recorded no such op
    predicted_s: float          # 0.0 when the simulator has no such op
    rel_err: float | None       # (predicted - measured) / measured; None without a measurement
    contribution_s: float       # (predicted - measured) x1 prefill, x(gen - 1) decode

    def to_dict(self) -> dict:
        return {"phase": self.phase, "op": self.op, "stream": self.stream, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "rel_err": self.rel_err, "contribution_s": self.contribution_s}

    @classmethod
    def from_dict(cls, d: dict) -> OpRow:
        return cls(d["phase"], d["op"], d["stream"], d["measured_s"], d["predicted_s"], d["rel_err"],
                   d["contribution_s"])


@dataclass(frozen=True)
class MeasuredSide:
    """What the harness measured for one schedule (medians over repeats, hw.bench)."""

    prefill_s: float
    decode_s: float
    tokens_per_s: float
    exposed_comm_s: float | None   # None: not measured (a compiled run waits inside its graph: hw.bench)
    speedup: float              # the median per-repeat paired ratio over standard when the run has
                                # them (what the interval is about), else speedup_of_medians
    speedup_of_medians: float   # tokens/s over standard's tokens/s
    speedup_ci: tuple[float, float] | None = None     # the paired median's sign-test interval
    speedup_ci_coverage: float | None = None          # its confidence (depends on the repeats)

    def to_dict(self) -> dict:
        out = {"prefill_s": self.prefill_s, "decode_s": self.decode_s, "tokens_per_s": self.tokens_per_s,
               "exposed_comm_s": self.exposed_comm_s, "speedup": self.speedup,
               "speedup_of_medians": self.speedup_of_medians}
        if self.speedup_ci is not None:
            out |= {"speedup_ci": list(self.speedup_ci), "speedup_ci_coverage": self.speedup_ci_coverage}
        return out

    @classmethod
    def from_dict(cls, d: dict) -> MeasuredSide:
        ci = d.get("speedup_ci")
        return cls(d["prefill_s"], d["decode_s"], d["tokens_per_s"], d["exposed_comm_s"], d["speedup"],
                   d["speedup_of_medians"], tuple(ci) if ci is not None else None, d.get("speedup_ci_coverage"))


@dataclass(frozen=True)
class PredictedSide:
    """The simulator's prediction of one schedule, as sim.predict.Prediction.to_dict writes it
    (its keys are the simulator's, not re-typed here), and compare's interval for its speedup."""

    prediction: dict                                  # Prediction.to_dict(), its speedup over standard set
    speedup_interval: tuple[float, float] | None = None   # compare_intervals.speedup_interval

    @property
    def prefill_s(self) -> float:
        return self.prediction["prefill_s"]

    @property
    def decode_s(self) -> float:
        return self.prediction["decode_s"]

    @property
    def tokens_per_s(self) -> float:
        return self.prediction["tokens_per_s"]

    @property
    def speedup(self) -> float:
        return self.prediction["speedup"]

    def to_dict(self) -> dict:
        out = dict(self.prediction)
        if self.speedup_interval is not None:
            out["speedup_interval"] = list(self.speedup_interval)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> PredictedSide:
        iv = d.get("speedup_interval")
        return cls({k: v for k, v in d.items() if k != "speedup_interval"}, tuple(iv) if iv is not None else None)


@dataclass(frozen=True)
class RelErrors:
    """(predicted - measured) / measured; nan where the measurement is 0."""

    prefill_s: float
    decode_s: float
    tokens_per_s: float

    def to_dict(self) -> dict:
        return {"prefill_s": self.prefill_s, "decode_s": self.decode_s, "tokens_per_s": self.tokens_per_s}

    @classmethod
    def from_dict(cls, d: dict) -> RelErrors:
        return cls(d["prefill_s"], d["decode_s"], d["tokens_per_s"])


@dataclass(frozen=True)
class ScheduleResult:
    """One schedule at one grid point: measured vs predicted, the speedup over standard on both
    sides, and whether they agree on its sign."""

    schedule: str
    measured: MeasuredSide
    predicted: PredictedSide
    err: RelErrors
    speedup_err: float                      # predicted speedup - measured speedup
    sign_match: bool                        # both on the same side of 1 (always True for standard)
    measured_speedup_within_noise: bool     # the measured interval contains 1
    predicted_speedup_within_noise: bool    # the predicted interval contains 1
    ops: tuple[OpRow, ...]                  # per-op join, largest |contribution| first

    @property
    def sign(self) -> str:
        """The verdict the report prints: ok, undetermined or WRONG (`sign_verdict`)."""
        return sign_verdict(self.sign_match, self.measured_speedup_within_noise, self.predicted_speedup_within_noise)

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "measured": self.measured.to_dict(), "predicted": self.predicted.to_dict(),
                "err": self.err.to_dict(), "speedup_err": self.speedup_err, "sign_match": self.sign_match,
                "measured_speedup_within_noise": self.measured_speedup_within_noise,
                "predicted_speedup_within_noise": self.predicted_speedup_within_noise,
                "ops": [o.to_dict() for o in self.ops]}

    @classmethod
    def from_dict(cls, d: dict) -> ScheduleResult:
        return cls(d["schedule"], MeasuredSide.from_dict(d["measured"]), PredictedSide.from_dict(d["predicted"]),
                   RelErrors.from_dict(d["err"]), d["speedup_err"], d["sign_match"],
                   d["measured_speedup_within_noise"], d["predicted_speedup_within_noise"],
                   tuple(OpRow.from_dict(o) for o in d["ops"]))


@dataclass(frozen=True)
class ComparedPoint:
    """One grid point (model, TP, batch, prompt, gen) compared: standard first, then every
    measured schedule that was asked for."""

    model: str
    tp: int
    batch: int
    prompt_len: int
    gen_len: int
    profile: str                            # the profile's name
    missing_schedules: tuple[str, ...]      # asked for but absent from the measured JSON
    schedules: tuple[ScheduleResult, ...]
    machine_drift: dict | None              # compare_measure.machine_drift (None without both probes)
    env: dict                               # the measured run's env, as hw.bench recorded it
    trace: str | None = None                # the side-by-side trace's path, once written
    # what the simulator could not price as the run ran it, one line each (compare_measure.collective_notes)
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.model} TP{self.tp} b{self.batch}"

    def to_dict(self) -> dict:
        out = {"model": self.model, "tp": self.tp, "batch": self.batch, "prompt_len": self.prompt_len,
               "gen_len": self.gen_len, "profile": self.profile, "missing_schedules": list(self.missing_schedules),
               "schedules": [s.to_dict() for s in self.schedules], "machine_drift": self.machine_drift,
               "env": self.env}
        if self.trace is not None:
            out["trace"] = self.trace
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> ComparedPoint:
        return cls(d["model"], d["tp"], d["batch"], d["prompt_len"], d["gen_len"], d["profile"],
                   tuple(d["missing_schedules"]), tuple(ScheduleResult.from_dict(s) for s in d["schedules"]),
                   d["machine_drift"], d["env"], d.get("trace"), tuple(d.get("notes", ())))


def comparison_to_dict(result: dict) -> dict:
    """compare.json's content from run_compare's result (its points typed, the rest plain JSON:
    profile, profile_path, failed, summary, timelines)."""
    return {k: [p.to_dict() for p in v] if k == "points" else v for k, v in result.items()}


def comparison_from_dict(d: dict) -> dict:
    """A compare.json read back: the same dict with its points as ComparedPoint."""
    return {k: [ComparedPoint.from_dict(p) for p in v] if k == "points" else v for k, v in d.items()}
