"""A sweep's results from its run folders: sweep.json and sweep.html.

Torch-free. The runs are found by their summary.json anywhere under the folder (a sweep's own
points, or shards copied together); each run's `--set` overrides (summary.json `sets`) say
where it sits. Runs that differ only in `seed=` form a group; per group, scenario entry and
value: n, mean, std (sample, n - 1), min and max, and the config's `expect.sweep` targets
checked against them.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from demos.lab.core.files import write_json
from demos.lab.core.layout import CONFIG, SUMMARY, SWEEP, read_run
from demos.lab.core.results import EXIT_FAILED, EXIT_OK, Check
from demos.lab.core.scenario import Registry
from demos.lab.core.schema import ConfigError
from demos.lab.pages.sweep import group_label, write_page
from demos.lab.pages.templating import fmt

MAX_DEPTH = 4  # how deep under the folder runs are looked for


@dataclass
class PointRun:
    """One run folder of the sweep."""
    dir: Path
    summary: dict[str, Any]

    @property
    def sets(self) -> list[str]:
        sets = self.summary.get("sets")
        return [str(s) for s in sets] if isinstance(sets, list) else []

    @property
    def group(self) -> tuple[Any, ...]:
        """Its config, whether a dry run, and its sets but the seed: runs with the same group
        differ only in their seed."""
        return (str(self.summary.get("config")), bool(self.summary.get("dry_run")),
                *(s for s in self.sets if s.partition("=")[0].strip() != "seed"))


def find_runs(root: Path) -> list[PointRun]:
    """Every run folder under `root` (not `root` itself), by path."""
    runs = []
    for here, dirs, files in os.walk(root):
        depth = len(Path(here).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if depth < MAX_DEPTH and not d.startswith(".") and
                         not os.path.islink(os.path.join(here, d)))  # .x: set aside
        if depth and SUMMARY in files:
            s = read_run(Path(here) / SUMMARY)
            if s and "run_id" in s and s.get("status") != "running":
                runs.append(PointRun(Path(here), s))
            dirs[:] = []  # a run's entry folders hold no runs
    return sorted(runs, key=lambda r: str(r.dir))


def finite_float(v: Any) -> float | None:
    """A value read from a summary as a finite float, or None (null, NaN, text, too large)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


def stats(values: list[Any]) -> dict[str, float]:
    """n, mean, std (sample), min, max of the finite values (inf where they overflow)."""
    xs = [x for x in map(finite_float, values) if x is not None]
    if not xs:
        return {"n": 0}
    try:
        mean = statistics.fmean(xs)
        std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    except OverflowError:  # values near the float limit
        mean, std = math.fsum(x / len(xs) for x in xs), math.inf
    return {"n": len(xs), "mean": mean, "std": std, "min": min(xs), "max": max(xs)}


def summarise(runs: list[PointRun]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """{entry: {kind: {name: stats}}} over the runs, entries and names in first-seen order."""
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in runs:
        for e in r.summary.get("scenarios", []):
            for kind in ("metrics", "params"):
                found = e.get(kind)
                for name, v in (found.items() if isinstance(found, dict) else ()):
                    values.setdefault(str(e.get("id")), {}).setdefault(kind, {}).setdefault(
                        name, []).append(v if v is not None else math.nan)
    return {entry: {kind: {name: stats(v) for name, v in names.items()}
                    for kind, names in kinds.items()} for entry, kinds in values.items()}


def sweep_checks(table: dict, expects: dict[str, Any], skip: str | None) -> list[Check]:
    """The config's `expect.sweep` targets against one group's statistics; reported, not
    evaluated, with `skip` (why)."""
    out = []
    for entry, sweep in expects.items():
        for kind in ("metrics", "params"):
            for name, targets in getattr(sweep, kind).items():
                got = table.get(entry, {}).get(kind, {}).get(name, {"n": 0})
                for stat, target in targets.items():
                    label = f"sweep {entry} {kind}.{name} {stat}"
                    if stat not in got:
                        out.append(Check(label, None if skip else False,
                                         f"no finite value over {got['n']} runs"))
                        continue
                    passed, detail = target.meets(got[stat])
                    out.append(Check(label, None, f"not evaluated: {skip} ({detail})") if skip
                               else Check(label, passed, f"{detail} over {got['n']} runs"))
    return out


def expectations(run: PointRun, registry: Registry) -> tuple[dict[str, Any], str | None]:
    """{entry id: its expect.sweep} from a run's resolved config.yaml, or why there are none."""
    from demos.lab.core.config import load

    try:
        cfg = load(str(run.dir / CONFIG), registry)
    except ConfigError as e:
        return {}, f"the sweep's expectations could not be read: {e}"
    return {e.id: e.expect.sweep for e in cfg.scenarios}, None


def sweep_data(folder: Path, runs: list[PointRun], registry: Registry,
               command: Iterable[str] = (), interrupted: bool = False,
               not_run: Iterable[str] = ()) -> dict[str, Any]:
    """sweep.json's data."""
    groups: dict[tuple[str, ...], list[PointRun]] = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    keys: dict[str, set[str]] = {}
    for r in runs:
        for s in r.sets:
            k, _, v = s.partition("=")
            keys.setdefault(k.strip(), set()).add(v)
    axes = {k: sorted(v) for k, v in keys.items() if len(v) > 1}
    configs = list(dict.fromkeys(str(r.summary.get("config")) for r in runs))
    notes: list[str] = []
    out_groups: list[dict[str, Any]] = []
    for key, members in groups.items():
        table = summarise(members)
        expects, note = expectations(members[0], registry)
        notes += [note] if note and note not in notes else []
        skip = ("the sweep was interrupted" if interrupted else
                "--dry-run" if members[0].summary.get("dry_run") else None)
        label = [s for s in key[2:] if s.partition("=")[0].strip() in axes]
        out_groups.append({
            "sets": label, "config": key[0], "dry_run": key[1],
            "runs": [rel(folder, r.dir) for r in members], "scenarios": table,
            "checks": [c.__dict__ for c in sweep_checks(table, expects, skip)]})
    if len(configs) > 1 or len({g["dry_run"] for g in out_groups}) > 1:
        notes.append("these runs come from different configs or mix dry and full runs: each "
                     "group holds one kind")
    failed_runs = [rel(folder, r.dir) for r in runs
                   if r.summary.get("status") not in ("passed", "interrupted")]
    interrupted_runs = [rel(folder, r.dir) for r in runs
                        if r.summary.get("status") == "interrupted"]
    failed_checks = any(c["passed"] is False for g in out_groups for c in g["checks"])
    status = ("interrupted" if interrupted or interrupted_runs else
              "failed" if failed_runs or failed_checks else "passed")
    return {"folder": str(folder), "command": list(command), "config": configs[0],
            "configs": configs, "dry_run": any(g["dry_run"] for g in out_groups),
            "status": status, "axes": axes, "notes": notes, "not_run": list(not_run),
            "points": [{"run": rel(folder, r.dir), "sets": r.sets,
                        "status": r.summary.get("status"), "seed": r.summary.get("seed"),
                        "duration_s": r.summary.get("duration_s"), "why": why(r.summary)}
                       for r in runs],
            "failed_runs": failed_runs, "interrupted_runs": interrupted_runs,
            "groups": out_groups}



def rel(folder: Path, path: Path) -> str:
    return Path(os.path.relpath(path, folder)).as_posix()


def aggregate(folder: Path, registry: Registry, command: Iterable[str] = (),
              interrupted: bool = False, not_run: Iterable[str] = ()) -> int:
    """Write sweep.json and sweep.html for the runs under `folder`; print the table; return
    the exit code (1 when a run failed or a sweep expectation is not met)."""
    if not folder.is_dir():
        raise ConfigError(f"aggregate {folder}: " + ("not a folder" if folder.exists()
                                                       else "no such folder"))
    runs = find_runs(folder)
    if not runs:
        raise ConfigError(f"aggregate {folder}: no finished run folders (with summary.json) "
                          f"under it")
    data = sweep_data(folder, runs, registry, command, interrupted, not_run)
    write_json(folder / SWEEP, data)
    write_page(folder, data)
    for line in console_lines(data):
        print(line)
    print(f"sweep: {folder / 'sweep.html'}")
    return EXIT_OK if data["status"] == "passed" else EXIT_FAILED


def console_lines(data: dict[str, Any]) -> list[str]:
    """The statistics of every group, then the failed runs and checks."""
    lines = []
    for g in data["groups"]:
        head = group_label(g, data)
        lines.append(f"{head} ({count_runs(len(g['runs']))}):")
        for entry, kinds in g["scenarios"].items():
            for kind, names in kinds.items():
                for name, st in names.items():
                    if st["n"]:
                        lines.append(f"  {entry} {kind}.{name}: mean {fmt(st['mean'])} ± "
                                     f"{st['std']:.3g}  [{fmt(st['min'])}, {fmt(st['max'])}]"
                                     f"  n={st['n']}")
        lines += [f"  {'FAIL' if c['passed'] is False else 'pass' if c['passed'] else 'skip'} "
                  f"{c['name']}: {c['detail']}" for c in g["checks"]]
    reasons = {p["run"]: p.get("why") or [] for p in data["points"]}
    for r in data["failed_runs"]:
        lines.append(f"failed run: {r}")
        lines += [f"  {reason}" for reason in reasons.get(r, [])]
    lines += [f"interrupted run: {r}" for r in data.get("interrupted_runs", [])]
    lines += [f"not run (interrupted): {r}" for r in data["not_run"]]
    lines += [f"note: {n}" for n in data["notes"]]
    failed_checks = sum(c["passed"] is False for g in data["groups"] for c in g["checks"])
    stopped = len(data.get("interrupted_runs", []))
    lines.append(f"{data['status'].upper()}: {count_runs(len(data['points']))}, "
                 f"{len(data['failed_runs'])} failed"
                 + (f", {stopped} interrupted" if stopped else "")
                 + f"; {failed_checks} sweep check(s) failed")
    return lines


def count_runs(n: int) -> str:
    """'1 run', '3 runs'."""
    return f"{n} run" + ("" if n == 1 else "s")


def why(summary: dict[str, Any], most: int = 3) -> list[str]:
    """Why a run did not pass, in a few lines: each entry's error, or its failed checks."""
    out: list[str] = []
    entries = summary.get("scenarios")
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or e.get("status") == "passed":
            continue
        if e.get("error"):
            out.append(f"{e.get('id')}: {e.get('status')}: {e.get('error')}")
            continue
        found = e.get("checks")
        checks: list[Any] = found if isinstance(found, list) else []
        out += [f"{e.get('id')}: FAIL {c.get('name')}: {c.get('detail')}" for c in checks
                if isinstance(c, dict) and c.get("passed") is False]
    return out[:most] + ([f"... and {len(out) - most} more"] if len(out) > most else [])
