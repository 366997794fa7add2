"""Baselines: a run's final values, saved as YAML to commit beside its config
(`--save-baseline FILE`), and later runs compared against them (`--baseline FILE`), as
demos/docs/baselines.md says. Torch-free; the file is plain data, read with yaml.safe_load only.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from demos.lab.core import machine
from demos.lab.core.config import drop_unset
from demos.lab.core.files import INDEX, INDEX_LOCK, NotReadable, read_bytes, write_atomic
from demos.lab.core.results import Check, EntrySummary, RunSummary, finite
from demos.lab.core.safe_yaml import nearby, parse_yaml
from demos.lab.core.schema import ConfigError, build, join, param, to_dict
from demos.lab.core.tolerance import (
    KINDS,
    Band,
    Drift,
    TableEntry,
    check_keys,
    compare_values,
    num,
)

MAX_BASELINE_BYTES = 1 << 20  # a baseline is a few KiB (all.yaml's with bands: 7); 1 MiB is plenty

HEADER = """\
# autograd-demos baseline: the final metrics and params of each scenario entry of one run.
# Written by --save-baseline; commit it beside the config. Compare a run against it:
"""
EXACT_NOTE = """\
# Saved from a single run: exact to one machine. On a machine with the same fingerprint
# (below) a value may move by rtol 1e-6, atol 1e-9 (in practice: the same bits); on any
# other, by rtol 1e-5, atol 1e-9, which values that training amplifies will not hold. Save
# with --ensemble to measure how far each value moves between machines (demos/docs/reproducible.md).
"""
BAND_NOTE = """\
# Tolerances measured: the run was repeated by an ensemble of {n} processes (same config and
# seed; other kernel levels and thread counts, see `ensemble`). Each value's `band` gives n,
# min and max over them and what is allowed: 3 x that range from the value here, at least
# rtol 1e-5, atol 1e-9; for a value positive in every run, in log space (a ratio). A run on
# any machine is judged against the band (demos/docs/reproducible.md).{partial}
"""
TOLERANCE_NOTE = """\
# A `tolerance:` mapping, at the top or in an entry, sets a value's tolerance by key (all,
# metrics, params, metrics.<name>, params.<name>): {rtol, atol, ratio}, or `exact` (the same
# bits, where the fingerprints match). It wins over a band. Saving again keeps it.
"""


@dataclass
class BaselineEntry:
    """One entry's values, and optional tolerances for them."""
    scenario: str | None = param(None, "the scenario the entry ran")
    metrics: dict[str, float | None] = param({}, "final metrics (null: not finite)")
    params: dict[str, float | None] = param({}, "final named params (null: not finite)")
    tolerance: dict[str, TableEntry] = param({}, "tolerances by key, for this entry")
    band: dict[str, Band] = param({}, "measured by an ensemble, by value (metrics.<name>, "
                                      "params.<name>)")

    def validate(self, where: str) -> None:
        check_keys(self.tolerance, {k: list(getattr(self, k)) for k in KINDS},
                   join(where, "tolerance"))
        for key in self.band:
            kind, _, name = key.partition(".")
            if not (kind in KINDS and name in getattr(self, kind)):
                raise ConfigError(f"{join(join(where, 'band'), key)}: not a value of this "
                                  f"entry; a band is for metrics.<name> or params.<name>")


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
    world_size: int | None = param(None, "its processes (torchrun: more than 1); unset in "
                                         "files saved before it was recorded", ge=1)
    fingerprint: dict[str, Any] | None = param(None, "where the numbers came from (kernels, "
                                                     "CPU, libraries, threads)")
    ensemble: dict[str, Any] | None = param(None, "the runs that measured the bands: "
                                                  "variant -> what it changed")
    tolerance: dict[str, TableEntry] = param({}, "tolerances by key, for every entry")
    scenarios: dict[str, BaselineEntry] = param({}, "the entries, by id")

    def validate(self, where: str) -> None:
        for key in self.tolerance:  # any entry's values: all, a kind, or kind.<name>
            kind, dot, name = key.partition(".")
            if key != "all" and not (kind in KINDS and (name or not dot)):
                raise ConfigError(f"{join(join(where, 'tolerance'), key)}: not a tolerance "
                                  f"key; use all, metrics, params, metrics.<name> or "
                                  f"params.<name>")


def read_baseline(path: str, option: str = "--baseline") -> BaselineFile:
    """Read and validate a baseline file; every problem is one line naming the option, the file
    and the key. Never blocks: a FIFO, a device or a file over 1 MiB is refused unread."""
    where = f"{option} {path}"
    try:
        data = read_bytes(path, MAX_BASELINE_BYTES)
    except NotReadable as e:
        raise ConfigError(f"{where}: {e}" + (nearby(path) if str(e) == "no such file" else
                                              "; a baseline file is expected")) from None
    raw = parse_yaml(data, where)
    if not isinstance(raw, dict) or not raw.get("scenarios"):
        raise ConfigError(f"{where}: not a baseline: no 'scenarios' mapping (write one with "
                          f"--save-baseline)")
    entries = raw["scenarios"]
    for entry in entries.values() if isinstance(entries, dict) else ():  # else: build says
        for kind in KINDS:  # YAML's .nan and .inf as null, as save writes them
            if isinstance(entry, dict) and isinstance(entry.get(kind), dict):
                entry[kind] = finite(entry[kind])
    try:
        return build(BaselineFile, raw, "")
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def check_writable(path: str, config: str, output_dir: str, dry_run: bool) -> None:
    """Refuse, before any work, a --save-baseline path that cannot become a baseline file: a
    directory, a FIFO or device, a file of the output folder, the config itself, a file that is
    not a baseline, or a baseline of the other kind (`dry_run`). A link is written through: the
    checks are of the file it points to."""
    where = f"--save-baseline {path}"
    target = os.path.realpath(path)
    try:
        os.stat(path)  # a loop of links raises here (ELOOP)
    except FileNotFoundError:
        pass  # a new file (or a link to one): fine
    except OSError as e:
        raise ConfigError(f"{where}: cannot be followed ({e.strerror or e}); name a file") \
            from None
    if os.path.isdir(target):
        raise ConfigError(f"{where}: is a directory; name a file")
    check_unmanaged(where, target, output_dir)
    if os.path.exists(path):  # something is there (through a link: what it points to)
        if not os.path.isfile(target):  # a FIFO, a device; /proc/self/fd/1: a pipe
            raise ConfigError(f"{where}: not a regular file (a FIFO, a device or a socket); "
                              f"name a new file or a baseline")
        if config and os.path.isfile(config) and os.path.samefile(target, config):
            raise ConfigError(f"{where}: is the config being run")
        if os.path.getsize(target) > MAX_BASELINE_BYTES:
            raise ConfigError(f"{where}: larger than {MAX_BASELINE_BYTES >> 10} KiB, not a "
                              f"baseline this could replace; remove it or name another file")
        try:
            old = read_baseline(target, "--save-baseline")
        except ConfigError as e:
            why = str(e).removeprefix(f"--save-baseline {target}: ")
            raise ConfigError(f"{where}: exists and is not a baseline this could replace "
                              f"({why}); remove it or name another file") from None
        if old.dry_run != dry_run:
            raise ConfigError(f"{where}: holds {kind(old.dry_run)}'s values, this is "
                              f"{kind(dry_run)}; a baseline holds one kind of run: name another "
                              f"file, or remove this one first")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise ConfigError(f"{where}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{where}: cannot write in {folder}")


def check_unmanaged(where: str, target: str, output_dir: str) -> None:
    """Refuse a file the output folder manages: its index.html and the index's lock, which
    every run rewrites, and anything inside its run folders (every folder in it is one)."""
    rel = os.path.relpath(target, os.path.realpath(output_dir))
    parts = rel.split(os.sep)
    if parts[0] == os.pardir or os.path.isabs(rel):
        return  # outside the output folder
    if len(parts) == 1 and parts[0] in (INDEX, INDEX_LOCK):
        raise ConfigError(f"{where}: is the output folder's {parts[0]}, which every run "
                          f"rewrites; save the baseline outside the output folder's own files")
    if len(parts) > 1:
        raise ConfigError(f"{where}: inside {os.path.join(output_dir, parts[0])}, a run folder "
                          f"of the output folder (--output-dir {output_dir}); save the baseline "
                          f"outside the run folders")


class Comparison:
    """A run compared against a baseline file, entry by entry as they finish."""

    def __init__(self, path: str, base: BaselineFile, configured: Sequence[Any],
                 selected: Sequence[str], device: str, world_size: int):
        self.path, self.base, self.world_size = path, base, world_size
        self.tolerances = {e.id: e.tolerance for e in configured}  # the config's, first
        self.configured = list(self.tolerances)  # every entry of the config, --only or not
        self.selected = list(selected)  # the entries this run runs (--only)
        self.cpu = base.device == "cpu" and device == "cpu"
        self.measured = all(e.band for e in base.scenarios.values())  # saved with --ensemble
        # how this run's fingerprint differs from the baseline's ('' where it matches); until
        # the run has one (begin), in every key
        self.differ = machine.contrast(base.fingerprint, None)
        self.drifts: list[Drift] = []
        self.not_in_baseline: list[str] = []

    def begin(self, fingerprint: dict[str, Any], seed: int) -> list[str]:
        """This run's fingerprint, once torch is set up; what differs from the baseline's run
        that moves values (the log's warnings)."""
        self.differ = machine.contrast(self.base.fingerprint, fingerprint)
        out = []
        if self.differ:
            how = ("each value is judged against its measured band" if self.measured else
                   "this baseline is exact to one machine: values are compared at rtol 1e-5 "
                   "(the arithmetic tier); values that training amplifies will fail. Save it "
                   "with --ensemble to measure how far they move")
            out.append(f"not the baseline's machine ({self.differ}): {how}")
        if self.base.seed is not None and self.base.seed != seed:
            out.append(f"the baseline has seed {self.base.seed}, this run {seed}: values "
                       f"will move")
        if self.base.world_size is not None and self.base.world_size != self.world_size:
            out.append(f"the baseline ran as {processes(self.base.world_size)}, this run as "
                       f"{processes(self.world_size)}: values may move")
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
        new = finite({"metrics": e.metrics, "params": e.params})  # as summary.json has them
        drifts = compare_values(e.id, to_dict(old), new,
                                tables, same_machine=not self.differ, cpu=self.cpu,
                                bands=old.band, differ=self.differ)
        self.drifts += drifts
        out = [Check(f"baseline {d.key}", False, d.describe()) for d in drifts if not d.within]
        ok = [d for d in drifts if d.within]
        moved = sum(d.moved for d in ok)
        if ok:
            tiers = sorted({d.rule.tier for d in ok})
            out.append(Check("baseline", True, f"{len(ok)} value(s) within tolerance of "
                                               f"{self.path}" + (f" ({moved} moved)" if moved
                                                                 else ", all identical")
                             + f"; by {', '.join(tiers)}"))
        return out

    def block(self) -> dict[str, Any]:
        """summary.json's `baseline`: what moved, worst first, and which entries one side lacks."""
        absent = [i for i in self.base.scenarios if i not in self.selected]  # this run did not run
        missing = [i for i in absent if i not in self.configured]
        left_out = [i for i in absent if i in self.configured]  # by --only
        moved = sorted((d for d in self.drifts if d.moved), key=lambda d: -d.severity)
        failed = bool(missing or self.not_in_baseline or any(not d.within for d in moved))
        return {"file": self.path, "status": "failed" if failed else "passed",
                "from": {k: getattr(self.base, k) for k in ("run", "torch", "device",
                                                            "threads", "seed",
                                                            "world_size")},
                "fingerprint": self.base.fingerprint, "same_machine": not self.differ,
                "differs": self.differ, "measured": self.measured,
                "compared": len(self.drifts), "drift": [d.to_json() for d in moved],
                "only_in_baseline": missing, "not_run": left_out,
                "not_in_baseline": list(self.not_in_baseline)}


def save(path: str, summary: RunSummary, scenarios: dict[str, str],
         bands: dict[str, dict[str, Band]] | None = None,
         ensemble: dict[str, str] | None = None) -> str:
    """Write the baseline of a finished run, from its summary (with the bands an ensemble
    measured, by entry and value); keep the tolerances of the file it replaces, and,
    where that file holds the same kind of run, the entries this run did not give values for.
    A link is written through. Returns what it did, in one line."""
    target = os.path.realpath(path)
    try:  # check_writable made sure a file there is a baseline; it may have changed since
        old = read_baseline(target, "--save-baseline") if os.path.exists(target) else None
    except ConfigError:
        old = None
    data = {"config": summary.config, "run": summary.run_id, "saved": summary.started,
            "torch": str(summary.torch), "device": summary.device,
            "threads": summary.determinism.get("cpu_threads"), "seed": summary.seed,
            "dry_run": summary.dry_run, "world_size": summary.world["size"] if summary.world else 1,
            "fingerprint": summary.fingerprint, "ensemble": ensemble}
    before = old.scenarios if old else {}
    other = other_kind(old, data) if old else ""
    if old and old.tolerance:
        data["tolerance"] = to_dict(old.tolerance)
    data = drop_unset(data)
    fresh = {e.id: e for e in summary.scenarios if e.status in ("passed", "failed")}
    left = [f"{e.id} ({e.status})" for e in summary.scenarios if e.id not in fresh]
    ran = [e.id for e in summary.scenarios]
    carried = [i for i in before if i not in ran]  # --only
    kept: dict[str, dict[str, Any]] = {}
    for i in [*ran, *carried]:
        previous = before.get(i)
        if i in fresh:
            e = fresh[i]
            kept[i] = as_saved(BaselineEntry(
                scenarios.get(i, e.scenario), finite(e.metrics), finite(e.params),
                previous.tolerance if previous else {}, (bands or {}).get(i, {})))
        elif previous is not None and not other:  # no values from this run: its last good ones
            kept[i] = as_saved(previous)
    # another kind of run: the file's entries this run did not replace
    dropped = [i for i in [*ran, *carried] if i in before and i not in kept]
    data["scenarios"] = kept
    text = header(str(data["config"]), path, kept, ensemble) + yaml.dump(
        data, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)
    write_atomic(Path(target), text)
    values = sum(len(v["metrics"]) + len(v.get("params", {})) for v in kept.values())
    measured = sum(bool(v.get("band")) for v in kept.values())
    shown = path if target == os.path.abspath(path) else f"{path} (-> {target})"
    return (f"baseline saved: {shown} ({len(kept)} entries, {values} values; " +
            (f"{measured} entries with bands from {len(ensemble or {})} runs)" if measured
             else "exact to one machine: --ensemble measures bands)") +
            (f"; not replaced: {', '.join(left)}" if left else "") +
            (f"; kept from before (not run): {', '.join(carried)}" if carried and not other
             else "") +
            (f"; replaced every entry: the file held {other}" +
             (f" (dropped: {', '.join(dropped)})" if dropped else "") if other else ""))


def other_kind(old: BaselineFile, new: dict[str, Any]) -> str:
    """How the run in `new` (save's data) is of another kind than the baseline `old`:
    'seed 5, this run seed 0'; '' when of the same kind (what `old` does not record is
    not a difference)."""
    pairs = [(kind(old.dry_run), kind(new["dry_run"])),
             (f"seed {old.seed}", f"seed {new['seed']}") if old.seed is not None else None,
             (f"device {old.device}", f"device {new['device']}")  # cuda:0 and cuda:1: one kind
             if old.device.partition(":")[0] != new["device"].partition(":")[0] else None,
             (f"torch {old.torch}", f"torch {new['torch']}") if old.torch is not None else None,
             (processes(old.world_size), processes(new["world_size"]))
             if old.world_size is not None else None]
    differ = [p for p in pairs if p and p[0] != p[1]]  # the words differ where the values do
    return (" and ".join(a for a, _ in differ) + ", this run " +
            " and ".join(b for _, b in differ)) if differ else ""


def kind(dry_run: bool) -> str:
    return "a --dry-run" if dry_run else "a full run"


def processes(n: int) -> str:
    """'1 process', '4 processes (torchrun)'."""
    return "1 process" if n == 1 else f"{n} processes (torchrun)"


def header(config: str, path: str, entries: dict[str, dict[str, Any]],
           ensemble: dict[str, str] | None) -> str:
    """The file's opening comment: how to use it, and what its tolerances rest on."""
    measured = [i for i, v in entries.items() if v.get("band")]
    made = re.fullmatch(r"<(\w+) defaults>", config or "")  # a scenario on its defaults
    text = HEADER + (f"#   python runner.py --config {config} --baseline {path}\n" if not made
                     else f"#   python -m demos.scenarios.{made[1]} --baseline {path}\n"
                     f"#   or from Python: demos.run({made[1]!r}, baseline={path!r})\n")
    if not measured:
        return text + EXACT_NOTE + TOLERANCE_NOTE
    unmeasured = [i for i in entries if i not in measured]
    partial = ("" if not unmeasured else "\n# Entries without a band (saved from a single "
               "run: exact to one machine): " + ", ".join(unmeasured) + ".")
    return text + BAND_NOTE.format(n=len(ensemble or {}) or "several", partial=partial) + \
        TOLERANCE_NOTE


def as_saved(entry: BaselineEntry) -> dict[str, Any]:
    """An entry as save() writes it: its values (a null there is a value not finite), only the
    tolerance fields that were set, each band on one line; empty parts left out."""
    data = {"scenario": entry.scenario, "metrics": entry.metrics, "params": entry.params,
            "tolerance": drop_unset(to_dict(entry.tolerance)),
            "band": {k: Flow(drop_unset(to_dict(b))) for k, b in entry.band.items()}}
    return {k: v for k, v in data.items() if v or k == "metrics"}


class Flow(dict):
    """A mapping written on one line ({n: 14, min: ..., max: ...}): a band."""


class Dumper(yaml.SafeDumper):
    """yaml's safe dumper, with Flow mappings on one line."""


Dumper.add_representer(Flow, lambda d, data: d.represent_mapping(
    "tag:yaml.org,2002:map", data.items(), flow_style=True))


def describe_drift(block: dict[str, Any], limit: int = 10) -> list[str]:
    """Console lines for the baseline block: the entries one side lacks; the worst moves."""
    lines = [f"baseline {block['file']}: {block['compared']} values compared, "
             f"{sum(not d['within'] for d in block['drift'])} out of tolerance, "
             f"{len(block['drift'])} moved"]
    if block.get("differs"):
        lines.append(f"  not the baseline's machine: {block['differs']}")
    lines += [f"  {i}: in the baseline, not in this config" for i in block["only_in_baseline"]]
    if block["not_run"]:
        lines.append(f"  in the baseline, not run here (--only): {', '.join(block['not_run'])}")
    return lines + [f"  {d['entry']} {d['key']}: moved within tolerance "
                    f"({num(d['old'])} -> {num(d['new'])})"
                    for d in block["drift"][:limit] if d["within"]]

