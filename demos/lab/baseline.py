"""Baselines: a run's final values, saved as YAML to commit beside its config
(`--save-baseline FILE`), and later runs compared against them (`--baseline FILE`).

Torch-free. Each value outside its tolerance (demos.lab.drift) is a failed check
`baseline <metrics|params>.<name>` of its entry; an entry the baseline lacks, or one only the
baseline has, is named too. The file is plain data, read with yaml.safe_load only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from demos.lab.drift import KINDS, Drift, Tolerance, compare_values, num
from demos.lab.results import Check, EntrySummary, RunSummary
from demos.lab.schema import ConfigError, build, join, param, to_dict

HEADER = """\
# autograd-demos baseline: the final metrics and params of each scenario entry of one run.
# Written by --save-baseline; commit it beside the config. Compare a run against it:
#   python runner.py --config {config} --baseline {path}
# Each value may move by atol + rtol * |old| (default: rtol 1e-6, atol 1e-9 when both runs are
# on the CPU; rtol 1e-4, atol 1e-6 otherwise). A `tolerance:` mapping, at the top or in an
# entry, sets them by key: all, metrics, params, metrics.<name>, params.<name>. Saving again
# keeps the tolerances written here.
"""


@dataclass
class BaselineEntry:
    """One entry's values, and optional tolerances for them."""
    scenario: str | None = param(None, "the scenario the entry ran")
    metrics: dict[str, float | None] = param({}, "final metrics (null: not finite)")
    params: dict[str, float | None] = param({}, "final named params (null: not finite)")
    tolerance: dict[str, Tolerance] = param({}, "tolerances by key, for this entry")

    def validate(self, where: str) -> None:
        for key in self.tolerance:
            kind, _, name = key.partition(".")
            if key != "all" and not (kind in KINDS and (not name or
                                                        name in getattr(self, kind))):
                raise ConfigError(f"{join(join(where, 'tolerance'), key)}: not a value of "
                                  f"this entry; use all, metrics, params, metrics.<name> or "
                                  f"params.<name>")


@dataclass
class BaselineFile:
    """What --save-baseline writes."""
    config: str | None = param(None, "the config the run came from")
    run: str | None = param(None, "the run folder's name")
    saved: str | None = param(None, "when the run started")
    torch: str | None = param(None, "torch's version")
    device: str = param("cpu", "the device it ran on")
    threads: int | None = param(None, "CPU threads torch used")
    seed: int | None = param(None, "the run's seed")
    dry_run: bool = param(False, "whether it was a --dry-run")
    tolerance: dict[str, Tolerance] = param({}, "tolerances by key, for every entry")
    scenarios: dict[str, BaselineEntry] = param({}, "the entries, by id")

    def validate(self, where: str) -> None:
        for key in self.tolerance:  # any entry's values: all, a kind, or kind.<name>
            kind, dot, name = key.partition(".")
            if key != "all" and not (kind in KINDS and (name or not dot)):
                raise ConfigError(f"{join(join(where, 'tolerance'), key)}: not a tolerance "
                                  f"key; use all, metrics, params, metrics.<name> or "
                                  f"params.<name>")


def load(path: str) -> BaselineFile:
    """Read and validate a baseline file; every problem is one line naming the file and key."""
    from demos.lab.config import read_yaml

    raw = read_yaml(path)
    if not isinstance(raw, dict) or not raw.get("scenarios"):
        raise ConfigError(f"{path}: not a baseline: no 'scenarios' mapping (write one with "
                          f"--save-baseline)")
    try:
        return build(BaselineFile, raw, "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def check_writable(path: str, config: str | None = None) -> None:
    """Refuse, before any work, a --save-baseline path that cannot become a file, or whose
    file is something else (the config itself; a file that is not a baseline)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"--save-baseline {path}: is a directory; name a file")
    if config and os.path.exists(path) and os.path.samefile(path, config):
        raise ConfigError(f"--save-baseline {path}: is the config being run")
    if os.path.exists(path):
        try:
            load(path)
        except ConfigError as e:
            raise ConfigError(f"--save-baseline {path}: exists and is not a baseline this "
                              f"could replace ({e}); remove it or name another file") from None
    if not os.path.isdir(folder):
        raise ConfigError(f"--save-baseline {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"--save-baseline {path}: cannot write in {folder}")


class Comparison:
    """A run compared against a baseline file, entry by entry as they finish."""

    def __init__(self, path: str, base: BaselineFile, configured: Sequence[Any],
                 selected: Sequence[str], device: str):
        self.path, self.base = path, base
        self.tolerances = {e.id: e.tolerance for e in configured}  # the config's, first
        self.configured = list(self.tolerances)  # every entry of the config, --only or not
        self.selected = list(selected)  # the entries this run runs (--only)
        self.cpu = base.device == "cpu" and device == "cpu"
        self.drifts: list[Drift] = []
        self.not_in_baseline: list[str] = []

    def notes(self, torch_version: str, device: str, threads: int, seed: int) -> list[str]:
        """What differs between the baseline's run and this one, that can move values."""
        out = []
        for what, old, new in (("torch", self.base.torch, torch_version),
                               ("device", self.base.device, device),
                               ("threads", self.base.threads, threads),
                               ("seed", self.base.seed, seed)):
            if old is not None and old != new:
                out.append(f"the baseline has {what} {old}, this run {new}: values may move")
        return out

    def check(self, e: EntrySummary) -> list[Check]:
        """The entry's baseline checks: one failed check per value out of tolerance, one
        passing check for the rest; not evaluated when the entry produced no values."""
        old = self.base.scenarios.get(e.id)
        if old is None:
            self.not_in_baseline.append(e.id)
            return [Check("baseline", False, f"{e.id} is not in {self.path}: save a new "
                                             f"baseline with --save-baseline")]
        if e.status in ("error", "interrupted"):
            return [Check("baseline", None, f"not compared: the entry ended as {e.status}")]
        tables = [self.tolerances.get(e.id, {}), old.tolerance, self.base.tolerance]
        drifts = compare_values(e.id, to_dict(old), {"metrics": e.metrics, "params": e.params},
                                tables, self.cpu)
        self.drifts += drifts
        out = [Check(f"baseline {d.key}", False, d.describe()) for d in drifts if not d.within]
        ok = [d for d in drifts if d.within]
        moved = sum(d.moved for d in ok)
        if ok:
            out.append(Check("baseline", True, f"{len(ok)} value(s) within tolerance of "
                                               f"{self.path}" + (f" ({moved} moved)" if moved
                                                                 else ", all identical")))
        return out

    def only_in_baseline(self) -> tuple[list[str], list[str]]:
        """Entries the baseline has and this run did not run: (missing, left out by --only)."""
        absent = [i for i in self.base.scenarios if i not in self.selected]
        return ([i for i in absent if i not in self.configured],
                [i for i in absent if i in self.configured])

    def block(self) -> dict[str, Any]:
        """summary.json's `baseline`: what moved, worst first, and which entries one side lacks."""
        missing, left_out = self.only_in_baseline()
        moved = sorted((d for d in self.drifts if d.moved), key=lambda d: -d.severity)
        failed = bool(missing or self.not_in_baseline or any(not d.within for d in moved))
        return {"file": self.path, "status": "failed" if failed else "passed",
                "from": {k: getattr(self.base, k) for k in ("run", "torch", "device",
                                                            "threads", "seed")},
                "compared": len(self.drifts), "drift": [d.to_json() for d in moved],
                "only_in_baseline": missing, "not_run": left_out,
                "not_in_baseline": list(self.not_in_baseline)}


def save(path: str, summary: RunSummary, scenarios: dict[str, str]) -> str:
    """Write the baseline of a finished run; keep the tolerances of the file it replaces.
    Returns what it did, in one line."""
    import yaml

    from demos.lab.files import write_atomic

    try:  # check_writable made sure a file there is a baseline; it may have changed since
        old = load(path) if os.path.exists(path) else None
    except ConfigError:
        old = None
    kept, left = {}, []
    for e in summary.scenarios:
        if e.status not in ("passed", "failed"):
            left.append(f"{e.id} ({e.status})")
            if old is not None and e.id in old.scenarios:
                kept[e.id] = as_saved(old.scenarios[e.id])  # its last good values
            continue
        entry: dict[str, Any] = {"scenario": scenarios.get(e.id, e.scenario),
                                 "metrics": dict(e.metrics), "params": dict(e.params)}
        previous = old.scenarios.get(e.id) if old else None
        if previous is not None and previous.tolerance:
            entry["tolerance"] = to_dict(previous.tolerance)
        kept[e.id] = {k: v for k, v in entry.items() if v or k == "metrics"}
    data = {"config": summary.config, "run": summary.run_id, "saved": summary.started,
            "torch": str(summary.torch), "device": str(summary.device),
            "threads": summary.determinism.get("cpu_threads"), "seed": summary.seed,
            "dry_run": summary.dry_run}
    if old is not None and old.tolerance:
        data["tolerance"] = to_dict(old.tolerance)
    ran = {e.id for e in summary.scenarios}
    carried = [i for i in (old.scenarios if old else {}) if i not in ran]
    for i in carried:  # not run this time (--only): kept as they were
        kept[i] = as_saved(old.scenarios[i])
    data["scenarios"] = kept
    text = HEADER.format(config=summary.config, path=path) + yaml.safe_dump(
        prune(data), sort_keys=False, default_flow_style=False, allow_unicode=True)
    write_atomic(Path(path), text)
    values = sum(len(v["metrics"]) + len(v.get("params", {})) for v in kept.values())
    return (f"baseline saved: {path} ({len(kept)} entries, {values} values)" +
            (f"; not replaced: {', '.join(left)}" if left else "") +
            (f"; kept from before (not run): {', '.join(carried)}" if carried else ""))


def as_saved(entry: BaselineEntry) -> dict[str, Any]:
    """An entry of a baseline read back, as save() writes one: empty parts left out."""
    return {k: v for k, v in prune(to_dict(entry)).items() if v or k == "metrics"}


def prune(data: Any) -> Any:
    """Unset tolerance fields left out, so the file says only what was set."""
    if isinstance(data, dict):
        return {k: prune(v) for k, v in data.items() if v is not None or k in KINDS}
    return data


def describe_drift(block: dict[str, Any], limit: int = 10) -> list[str]:
    """Console lines for the baseline block: the entries one side lacks; the worst moves."""
    lines = [f"baseline {block['file']}: {block['compared']} values compared, "
             f"{sum(not d['within'] for d in block['drift'])} out of tolerance, "
             f"{len(block['drift'])} moved"]
    for i in block["only_in_baseline"]:
        lines.append(f"  {i}: in the baseline, not in this config")
    if block["not_run"]:
        lines.append(f"  in the baseline, not run here (--only): {', '.join(block['not_run'])}")
    for d in block["drift"][:limit]:
        if d["within"]:
            lines.append(f"  {d['entry']} {d['key']}: moved within tolerance "
                         f"({num(d['old'])} -> {num(d['new'])})")
    return lines

