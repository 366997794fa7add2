"""Baselines: a run's final values, saved as YAML to commit beside its config
(`--save-baseline FILE`), and later runs compared against them (`--baseline FILE`).

Torch-free. Each value outside its tolerance (demos.lab.core.tolerance) is a failed check
`baseline <metrics|params>.<name>` of its entry; an entry the baseline lacks, or one only the
baseline has, is named too. The file is plain data, read with yaml.safe_load only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from demos.lab.core import fingerprint as fp
from demos.lab.core.results import Check, EntrySummary
from demos.lab.core.schema import ConfigError, build, join, param, to_dict
from demos.lab.core.tolerance import KINDS, Band, Drift, TableEntry, compare_values, num

HEADER = """\
# autograd-demos baseline: the final metrics and params of each scenario entry of one run.
# Written by --save-baseline; commit it beside the config. Compare a run against it:
#   python runner.py --config {config} --baseline {path}
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
        for key in self.tolerance:
            kind, _, name = key.partition(".")
            if key != "all" and not (kind in KINDS and (not name or
                                                        name in getattr(self, kind))):
                raise ConfigError(f"{join(join(where, 'tolerance'), key)}: not a value of "
                                  f"this entry; use all, metrics, params, metrics.<name> or "
                                  f"params.<name>")
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


def read_baseline(path: str) -> BaselineFile:
    """Read and validate a baseline file; every problem is one line naming the file and key."""
    from demos.lab.core.safe_yaml import read_yaml

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
            read_baseline(path)
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
        self.fingerprint: dict[str, Any] | None = None  # this run's, once it started
        self.drifts: list[Drift] = []
        self.not_in_baseline: list[str] = []

    @property
    def same_machine(self) -> bool:
        return fp.matches(self.base.fingerprint, self.fingerprint)

    @property
    def differ(self) -> str:
        """How this run's fingerprint differs from the baseline's ('' when it matches)."""
        return fp.contrast(self.base.fingerprint, self.fingerprint)

    @property
    def measured(self) -> bool:
        """Whether every entry of the baseline has its bands (saved with --ensemble)."""
        return all(e.band for e in self.base.scenarios.values())

    def begin(self, fingerprint: dict[str, Any], seed: int) -> list[str]:
        """This run's fingerprint, once torch is set up; what differs from the baseline's run
        that moves values (the log's warnings)."""
        self.fingerprint = fingerprint
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
                                tables, same_machine=self.same_machine, cpu=self.cpu,
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
                "fingerprint": self.base.fingerprint, "same_machine": self.same_machine,
                "differs": self.differ, "measured": self.measured,
                "compared": len(self.drifts), "drift": [d.to_json() for d in moved],
                "only_in_baseline": missing, "not_run": left_out,
                "not_in_baseline": list(self.not_in_baseline)}


def save(path: str, summary: dict[str, Any], scenarios: dict[str, str],
         bands: dict[str, dict[str, Band]] | None = None,
         ensemble: dict[str, str] | None = None) -> str:
    """Write the baseline of a finished run, from its summary.json's data (with the bands an
    ensemble measured, by entry and value); keep the tolerances of the file it replaces.
    Returns what it did, in one line."""
    import yaml

    from demos.lab.core.files import write_atomic

    try:  # check_writable made sure a file there is a baseline; it may have changed since
        old = read_baseline(path) if os.path.exists(path) else None
    except ConfigError:
        old = None
    kept, left = {}, []
    entries = summary.get("scenarios") or []
    for e in entries:
        if e["status"] not in ("passed", "failed"):
            left.append(f"{e['id']} ({e['status']})")
            if old is not None and e["id"] in old.scenarios:
                kept[e["id"]] = as_saved(old.scenarios[e["id"]])  # its last good values
            continue
        entry: dict[str, Any] = {"scenario": scenarios.get(e["id"], e["scenario"]),
                                 "metrics": dict(e["metrics"]), "params": dict(e["params"])}
        previous = old.scenarios.get(e["id"]) if old else None
        if previous is not None and previous.tolerance:
            entry["tolerance"] = to_dict(previous.tolerance)
        if bands and bands.get(e["id"]):
            entry["band"] = {k: Flow(drop_unset_tolerances(to_dict(b)))
                             for k, b in bands[e["id"]].items()}
        kept[e["id"]] = {k: v for k, v in entry.items() if v or k == "metrics"}
    data = {"config": summary.get("config"), "run": summary.get("run_id"),
            "saved": summary.get("started"), "torch": str(summary.get("torch")),
            "device": str(summary.get("device")),
            "threads": (summary.get("determinism") or {}).get("cpu_threads"),
            "seed": summary.get("seed"), "dry_run": bool(summary.get("dry_run")),
            "fingerprint": summary.get("fingerprint"), "ensemble": ensemble}
    if old is not None and old.tolerance:
        data["tolerance"] = to_dict(old.tolerance)
    ran = {e["id"] for e in entries}
    carried = [i for i in (old.scenarios if old else {}) if i not in ran]
    for i in carried:  # not run this time (--only): kept as they were
        assert old is not None  # carried entries come from it
        kept[i] = as_saved(old.scenarios[i])
    data["scenarios"] = kept
    text = header(str(data["config"]), path, kept, ensemble) + yaml.dump(
        drop_unset_tolerances(data), Dumper=Dumper, sort_keys=False, default_flow_style=False,
        allow_unicode=True)
    write_atomic(Path(path), text)
    values = sum(len(v["metrics"]) + len(v.get("params", {})) for v in kept.values())
    measured = sum(bool(v.get("band")) for v in kept.values())
    return (f"baseline saved: {path} ({len(kept)} entries, {values} values; " +
            (f"{measured} entries with bands from {len(ensemble or {})} runs)" if measured
             else "exact to one machine: --ensemble measures bands)") +
            (f"; not replaced: {', '.join(left)}" if left else "") +
            (f"; kept from before (not run): {', '.join(carried)}" if carried else ""))


def header(config: str, path: str, entries: dict[str, dict[str, Any]],
           ensemble: dict[str, str] | None) -> str:
    """The file's opening comment: how to use it, and what its tolerances rest on."""
    measured = [i for i, v in entries.items() if v.get("band")]
    text = HEADER.format(config=config, path=path)
    if not measured:
        return text + EXACT_NOTE + TOLERANCE_NOTE
    unmeasured = [i for i in entries if i not in measured]
    partial = ("" if not unmeasured else "\n# Entries without a band (saved from a single "
               "run: exact to one machine): " + ", ".join(unmeasured) + ".")
    return text + BAND_NOTE.format(n=len(ensemble or {}) or "several", partial=partial) + \
        TOLERANCE_NOTE


def as_saved(entry: BaselineEntry) -> dict[str, Any]:
    """An entry of a baseline read back, as save() writes one: empty parts left out."""
    saved = {k: v for k, v in drop_unset_tolerances(to_dict(entry)).items() if v or k == "metrics"}
    if "band" in saved:
        saved["band"] = {k: Flow(v) for k, v in saved["band"].items()}
    return saved


def drop_unset_tolerances(data: Any) -> Any:
    """Unset tolerance fields left out, so the file says only what was set."""
    if isinstance(data, dict):
        return type(data)({k: drop_unset_tolerances(v) for k, v in data.items()
                           if v is not None or k in KINDS})
    return data


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
    for i in block["only_in_baseline"]:
        lines.append(f"  {i}: in the baseline, not in this config")
    if block["not_run"]:
        lines.append(f"  in the baseline, not run here (--only): {', '.join(block['not_run'])}")
    for d in block["drift"][:limit]:
        if d["within"]:
            lines.append(f"  {d['entry']} {d['key']}: moved within tolerance "
                         f"({num(d['old'])} -> {num(d['new'])})")
    return lines

