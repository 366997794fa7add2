"""Results as types: what a scenario returns, and the entry and run summaries of summary.json.

Torch-free. `to_json()` gives exactly the layout of summary.json (demos/docs/output.md), and
`read_summary` reads it back, typed, refusing what no run wrote; the report, the index, the
console, baselines and the Python API read these objects, not dicts.
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from demos.lab.core.files import NAME_RE, SUMMARY, NotReadable, Process, read_bytes, strict
from demos.lab.core.schema import ConfigError, Text, build

# an entry's status, from best to worst (a run's is one of passed, failed, interrupted)
Status = Literal["passed", "failed", "error", "interrupted"]
STATUSES: tuple[str, ...] = typing.get_args(Status)


def escalate(current: str, new: str) -> str:
    """The one rule for a status that learns something new: the worse of the two (passed <
    failed < error < interrupted). A failed check does not hide an error; nothing after an
    interruption un-interrupts."""
    return max(current, new, key=STATUSES.index)
# the rows of a Function's support matrix (demos.lab.checks.support), in order
Capability = Literal["backward", "double_backward", "forward_ad", "func_grad", "vmap",
                     "compile", "compile_grad", "compile_jvp", "compile_vmap", "inductor",
                     "float32", "noncontiguous", "grad_layouts", "aliased_inputs", "checkpoint",
                     "saved_hooks", "autocast", "memory", "cuda"]
CAPABILITIES: tuple[str, ...] = typing.get_args(Capability)
# the metric of an entry whose recorded values stopped being finite: the step where they did
DIVERGED_AT = "diverged_at_step"
# exit codes: all passed; a check failed or a scenario raised; usage or config error; interrupted
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# a finished run's exit code, by its status
EXIT_CODES = {"passed": EXIT_OK, "failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED}


@dataclass(frozen=True)
class Element:
    """An element where a gradient differs: its index, and the two values ("nan", "inf" as
    strict JSON has them)."""
    at: list[int]
    expected: float | Text | None
    got: float | Text | None


@dataclass(frozen=True)
class Diagnosis:
    """Why a gradient is wrong (demos.lab.checks.diagnose): `kind` (a catalogue name), `says`
    (one plain sentence with the fix), where (`output`, `input`), the worst elements, and
    what they were computed for (`probe`: one random grad_output, or tangent)."""
    kind: str
    says: Text
    output: Text
    input: Text
    elements: list[Element] = field(default_factory=list)
    probe: str = "grad_output"

    @property
    def mistake(self) -> tuple[str, str, str]:
        """Which gradient it is about: several checks may find one mistake."""
        return self.output, self.input, self.probe


@dataclass(frozen=True)
class Reproduction:
    """A standalone script that shows a `differs` row, for the entry's folder."""
    file: str
    script: str


@dataclass(frozen=True)
class Row:
    """A row of a Function's support matrix (demos.lab.checks.support): how it fared under one
    capability, the one-line detail, and, for a `differs` row, its reproduction (written by
    the runner beside the entry's other files; not in summary.json, so a row read back from
    there has none)."""
    status: Literal["ok", "unsupported", "fails", "differs", "skipped"]
    detail: Text
    reproduction: Reproduction | None = None


# the blocks of summary.json other modules write as mappings, typed for the one reader: what
# the writer writes, key by key (total=False: keys a writer may leave out)
class Determinism(TypedDict, total=False):
    """The run's settings that make its numbers repeat (demos.lab.runner.device)."""
    deterministic_algorithms: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    threads: int | str
    cpu_threads: int
    seeded: Text


class Fingerprint(TypedDict, total=False):
    """Where the numbers came from (demos.lab.core.machine.take)."""
    device: str
    capability: str
    threads: int
    env: dict[str, Text]
    cpu: Text
    mkl: str | None
    onednn: str | None
    torch: str


class World(TypedDict):
    size: int
    backend: str


class _Drift(TypedDict):
    entry: str
    key: str
    old: float | Text | None
    new: float | Text | None
    diff: float | Text | None
    allowed: float | Text | None
    within: bool


class Drift(_Drift, total=False):
    """A value that moved against the baseline (demos.lab.core.tolerance.Drift.to_json)."""
    tier: str
    rule: Text


class _Baseline(TypedDict):
    file: Text
    status: Literal["passed", "failed"]
    compared: int
    drift: list[Drift]
    only_in_baseline: list[str]
    not_run: list[str]
    not_in_baseline: list[str]


class Baseline(_Baseline, TypedDict("_", {  # "from" is no name Python takes: given as text
        "from": dict[str, int | float | Text | None],  # run, torch, device, threads, seed, ...
        "fingerprint": Fingerprint | None, "same_machine": bool, "differs": Text,
        "measured": bool}, total=False)):
    """--baseline's block (demos.lab.comparing.baseline.Comparison.block)."""


# the fields summary.json leaves out where unset (None, or an empty mapping)
OPTIONAL = ("diagnosis", "steps", "inspection", "support", "baseline", "world", "fingerprint",
            "pid", "host", "process")


def json_fields(fields: list[tuple[str, Any]]) -> dict[str, Any]:
    """A dataclass as summary.json has it (dataclasses.asdict's dict_factory): a row's
    reproduction is a file of its own."""
    return {k: v for k, v in fields
            if k != "reproduction" and (k not in OPTIONAL or v not in (None, {}))}


@dataclass
class Check:
    """A named fact with its detail; `passed` is None when not evaluated (expect in --dry-run)."""
    name: str
    passed: bool | None
    detail: Text
    diagnosis: Diagnosis | None = None  # a failed gradient check's why


@dataclass
class Result:
    """What a scenario's run returns: final metrics, named scalar params, checks, and notes."""
    metrics: dict[str, float]
    params: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    inspection: dict[str, Any] = field(default_factory=dict)  # what the document prints
    support: dict[str, dict[str, Row]] = field(default_factory=dict)  # {Function: {row: Row}}


@dataclass
class Timing:
    """The training loop alone: no set-up, checks, plots or graphs."""
    train_s: float
    steps_per_s: float | None
    steps: int | None = None  # only in the summaries of older runs (which could resume)


@dataclass
class EntrySummary:
    """One scenario entry of a run, as summary.json's `scenarios[i]`."""
    id: str
    scenario: str
    status: str                 # passed | failed | error | interrupted
    device: str
    steps: int
    metrics: dict[str, float | None]  # None: a value that was not finite (NaN, inf)
    params: dict[str, float | None]
    checks: list[Check]
    artifacts: list[str]
    timing: Timing | None
    error: Text | None
    inspection: dict[str, Any] = field(default_factory=dict)
    support: dict[str, dict[str, Row]] = field(default_factory=dict)

    @property
    def counted(self) -> list[Check]:
        """The checks that were evaluated."""
        return [c for c in self.checks if c.passed is not None]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def validate(self, where: str) -> None:
        """What no run writes: an id that is no folder's name (`../../x`), a status no entry
        has."""
        if not NAME_RE.fullmatch(self.id):
            raise ConfigError(f"{where}.id: {self.id!r} is no entry's id")
        if self.status not in STATUSES:
            raise ConfigError(f"{where}.status: {self.status!r} is no entry's status")

    def to_json(self) -> dict[str, Any]:
        return finite(dataclasses.asdict(self, dict_factory=json_fields))


@dataclass
class RunSummary:
    """A whole run, as summary.json."""
    run_id: str
    status: str                 # passed | failed | interrupted; running while it runs
    torch: str
    device: str
    seed: int
    dry_run: bool
    determinism: Determinism
    config: str
    command: list[Text]
    started: str
    duration_s: float
    scenarios: list[EntrySummary]
    sets: list[Text] = field(default_factory=list)  # the overrides, as given
    # --baseline: what moved (demos.lab.comparing.baseline)
    baseline: Baseline | None = None
    fingerprint: Fingerprint | None = None       # where the numbers came from (kernels, CPU)
    world: World | None = None                   # under torchrun: {"size", "backend"}
    pid: int | None = None   # while it runs: its process, and the host it runs on (the index
    host: str | None = None  # tells a run killed outright from a running one)
    process: Process | None = None  # the process's identity beyond its pid (files.identity)

    @property
    def passed(self) -> int:
        return sum(e.status == "passed" for e in self.scenarios)

    def validate(self, where: str) -> None:
        if self.status not in (*EXIT_CODES, "running"):
            raise ConfigError(f"{where or 'top level'}: status {self.status!r} is no run's")

    def to_json(self) -> dict[str, Any]:
        return finite(dataclasses.asdict(self, dict_factory=json_fields))


MAX_SUMMARY_BYTES = 10 << 20  # a summary larger than this is not one of ours


def read_summary(folder: Path) -> RunSummary:
    """A run folder's summary.json, typed: the one reader of it (the index, baselines, the
    Python API). What no run wrote is a ConfigError naming the file and why
    (demos/docs/guarantees.md, "A summary.json no run wrote is never trusted")."""
    path = folder / SUMMARY
    try:
        data = json.loads(read_bytes(path, MAX_SUMMARY_BYTES, links=False).decode("utf-8"))
        return build(RunSummary, data, "")
    except NotReadable as e:
        raise ConfigError(f"{path}: {e}" + (": not a run folder" if str(e) == "no such file"
                                             else "")) from None
    except RecursionError:
        raise ConfigError(f"{path}: not a run's summary (nested too deeply)") from None
    except (ValueError, ConfigError) as e:  # not JSON, not UTF-8; a key no run writes
        raise ConfigError(f"{path}: not a run's summary ({e})") from None


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    return strict(value, lambda x: None)
