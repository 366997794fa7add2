"""Results as types: what a scenario returns, and the entry and run summaries of summary.json.

Torch-free. `to_json()` gives exactly the layout of summary.json (demos/docs/output.md); the report
and the console read these objects, not dicts.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

# an entry's status (a run's is one of passed, failed, interrupted)
Status = Literal["passed", "failed", "error", "interrupted"]
STATUSES: tuple[str, ...] = typing.get_args(Status)
SEVERITY = {"passed": 0, "failed": 1, "error": 2, "interrupted": 3}  # a status only worsens


def escalate(current: str, new: str) -> str:
    """The one rule for a status that learns something new: the worse of the two (passed <
    failed < error < interrupted). A failed check does not hide an error; nothing after an
    interruption un-interrupts."""
    return new if SEVERITY[new] > SEVERITY[current] else current
# the rows of a Function's support matrix (demos.lab.checks.support), in order
Capability = Literal["backward", "double_backward", "forward_ad", "func_grad", "vmap",
                     "compile", "compile_grad", "compile_jvp", "compile_vmap", "inductor",
                     "float32", "noncontiguous", "cuda"]
CAPABILITIES: tuple[str, ...] = typing.get_args(Capability)
# the metric of an entry whose recorded values stopped being finite: the step where they did
DIVERGED_AT = "diverged_at_step"
# exit codes: all passed; a check failed or a scenario raised; usage or config error; interrupted
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# a finished run's exit code, by its status
EXIT_CODES = {"passed": EXIT_OK, "failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED}


@dataclass
class Check:
    """A named fact with its detail; `passed` is None when not evaluated (expect in --dry-run)."""
    name: str
    passed: bool | None
    detail: str
    # a failed gradient check's why: demos.lab.checks.diagnose.Diagnosis.to_json()
    diagnosis: dict[str, Any] | None = None


@dataclass
class Result:
    """What a scenario's run returns: final metrics, named scalar params, checks, and notes."""
    metrics: dict[str, float]
    params: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    inspection: dict[str, Any] = field(default_factory=dict)  # what the document prints
    # what each Function supports: {Function: {capability: {"status", "detail"}}}
    support: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)


@dataclass
class Timing:
    """The training loop alone: no set-up, checks, plots or graphs."""
    train_s: float
    steps_per_s: float | None


@dataclass
class EntrySummary:
    """One scenario entry of a run, as summary.json's `scenarios[i]`."""
    id: str
    scenario: str
    status: str                 # passed | failed | error | interrupted
    device: str
    steps: int
    metrics: dict[str, float]
    params: dict[str, float]
    checks: list[Check]
    artifacts: list[str]
    timing: Timing | None
    error: str | None
    inspection: dict[str, Any] = field(default_factory=dict)
    support: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    @property
    def counted(self) -> list[Check]:
        """The checks that were evaluated."""
        return [c for c in self.checks if c.passed is not None]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EntrySummary:
        """The entry of a summary.json's `scenarios` (to_json's layout; null metrics, NaN or
        infinite when measured, stay None). Raises KeyError or TypeError for anything else."""
        t = data["timing"]  # (an older run's also held the steps: left out)
        return cls(**{**{k: data[k] for k in ENTRY_KEYS if k in data},
                      "checks": [Check(**c) for c in data["checks"]],
                      "timing": None if t is None else Timing(t["train_s"], t["steps_per_s"])})

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for optional in ("inspection", "support"):
            if not data[optional]:
                del data[optional]
        for c in data["checks"]:
            if c["diagnosis"] is None:
                del c["diagnosis"]
        return finite(data)


@dataclass
class RunSummary:
    """A whole run, as summary.json."""
    run_id: str
    status: str                 # passed | failed | interrupted
    torch: str
    device: str
    seed: int
    dry_run: bool
    determinism: dict[str, Any]
    config: str
    command: list[str]
    started: str
    duration_s: float
    scenarios: list[EntrySummary]
    sets: list[str] = field(default_factory=list)   # the --set overrides, as given
    # --baseline: what moved (demos.lab.comparing.baseline)
    baseline: dict[str, Any] | None = None
    fingerprint: dict[str, Any] | None = None        # where the numbers came from (kernels, CPU)
    world: dict[str, Any] | None = None              # under torchrun: {"size", "backend"}

    @property
    def passed(self) -> int:
        return sum(e.status == "passed" for e in self.scenarios)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        """A summary.json's data, typed again (keys it does not know, such as a running
        run's pid, left out). Raises KeyError or TypeError for anything else."""
        return cls(**{**{k: data[k] for k in RUN_KEYS if k in data},
                      "scenarios": [EntrySummary.from_json(e) for e in data["scenarios"]]})

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["scenarios"] = [e.to_json() for e in self.scenarios]
        for optional in ("baseline", "world", "fingerprint"):
            if data[optional] is None:
                del data[optional]
        return finite(data)


ENTRY_KEYS = tuple(f.name for f in dataclasses.fields(EntrySummary))
RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunSummary))


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
