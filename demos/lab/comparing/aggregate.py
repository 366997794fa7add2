"""A sweep's results from its run folders: sweep.json and sweep.html.

Torch-free. The runs are found by their summary.json anywhere under the folder (a sweep's own
points, or runs that a scheduler made, copied together); each run's `--set` overrides
(summary.json `sets`) say where it sits. Runs that differ only in `seed=` form a group; per
group, scenario entry and value: n, mean, std (sample, n - 1), min and max, and the config's
`expect.sweep` targets checked against them. The points the sweep planned (its sweep-plan.json)
but that have no finished run here (missing, killed, corrupt, still running) are named and
counted, and make the sweep "incomplete" (exit 1): no verdict passes over fewer runs than were
planned. With a plan, only its points are aggregated (another folder is named and left out); a
run whose values are not numbers is corrupt; a plan that is not one, or no finished run at all,
is one line (exit 2), and the stale sweep.json and sweep.html are removed.
"""
from __future__ import annotations

import contextlib
import math
import os
import socket
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from demos.lab.core.config import load
from demos.lab.core.console import say
from demos.lab.core.files import write_json
from demos.lab.core.layout import CONFIG, SUMMARY, SWEEP, SWEEP_PAGE, read_run, still_running
from demos.lab.core.results import EXIT_FAILED, EXIT_OK, Check
from demos.lab.core.scenario import Registry
from demos.lab.core.schema import ConfigError
from demos.lab.core.tolerance import as_float
from demos.lab.pages.sweep import group_label, write_page
from demos.lab.pages.templating import fmt

MAX_DEPTH = 4  # how deep under the folder runs are looked for
PLAN = "sweep-plan.json"  # in a sweep's folder: the points it plans (demos.lab.comparing.sweep)


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


def find_runs(root: Path, unfinished: list[Path] | None = None) -> list[PointRun]:
    """Every finished run folder under `root` (not `root` itself), by path; the folders with
    a summary.json that is not a finished run's are added to `unfinished`."""
    runs = []
    for here, dirs, files in os.walk(root):
        depth = len(Path(here).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if depth < MAX_DEPTH and not d.startswith(".") and
                         not os.path.islink(os.path.join(here, d)))  # .x: set aside
        if depth and SUMMARY in files:
            s = read_run(Path(here) / SUMMARY)
            if s and "run_id" in s and s.get("status") != "running":
                runs.append(PointRun(Path(here), s))
            elif unfinished is not None:
                unfinished.append(Path(here))
            dirs[:] = []  # a run's entry folders hold no runs
    return sorted(runs, key=lambda r: str(r.dir))


def process_state(s: dict[str, Any]) -> str:
    """Whether the process that wrote a "running" summary is "alive" or "gone"; "unknown"
    when it ran on another host (or the summary does not say)."""
    pid = s.get("pid")
    if s.get("host") != socket.gethostname() or isinstance(pid, bool) or \
            not isinstance(pid, int) or not 0 < pid < 2**31:
        return "unknown"
    return "alive" if still_running(s) else "gone"


def read_plan(folder: Path) -> list[str] | None:
    """The points that `folder`'s sweep-plan.json plans, by name; None when it has none. One
    that is not a sweep's plan (not JSON, a FIFO, wrong types) is refused: which points to
    expect could not be told, so no verdict could be given (the stale one is removed)."""
    path = folder / PLAN
    if not os.path.lexists(path):
        return None
    plan = read_run(path)
    points, total = (plan.get("points"), plan.get("total")) if plan else (None, None)
    why = ("not a readable JSON object" if plan is None else
           "its points are not a list of point names"
           if not isinstance(points, list) or not all(
               isinstance(p, str) and p and "/" not in p and p not in (".", "..")
               for p in points) or len(set(points)) < len(points) else
           "its total is not the number of its points"
           if isinstance(total, bool) or total != len(points) else None)
    if why:
        raise ConfigError(f"aggregate {folder}: {PLAN}: not a sweep's plan ({why}); which "
                          f"points the sweep planned cannot be told: restore it, or remove it "
                          f"to aggregate the runs found" + remove_stale(folder))
    return points


def unlink_stale(folder: Path) -> tuple[list[str], list[str]]:
    """Remove an old sweep.json and sweep.html (they describe other runs, and the index would
    show their verdict); (those found, those that could not be removed)."""
    found = [n for n in (SWEEP, SWEEP_PAGE) if os.path.lexists(folder / n)]
    for name in found:
        with contextlib.suppress(OSError):
            (folder / name).unlink()
    return found, [n for n in found if os.path.lexists(folder / n)]


def remove_stale(folder: Path) -> str:
    """unlink_stale, and what an error line says about it."""
    found, left = unlink_stale(folder)
    if left:
        return f"; the old {' and '.join(left)} could not be removed: stale"
    return f"; the old {' and '.join(found)} {'were' if len(found) > 1 else 'was'} removed" \
        if found else ""


def short(value: Any) -> str:
    """A value for a message: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def not_numbers(summary: dict[str, Any]) -> list[str]:
    """The metrics and params of a run's summary.json that are not numbers (null, "nan" and
    "inf" are: not finite), each as 'entry metrics.name is 'abc', not a number'."""
    out = []
    for e in summary.get("scenarios", []):  # read_run: a list of mappings
        for kind in ("metrics", "params"):
            found = e.get(kind)
            if found is None:
                continue
            if not isinstance(found, dict):
                out.append(f"{e.get('id')} {kind} is {short(found)}, not a mapping")
                continue
            out += [f"{e.get('id')} {kind}.{name} is {short(v)}, not a number"
                    for name, v in found.items() if not number(v)]
    return out


def number(v: Any) -> bool:
    """Whether a summary.json value is a number: null (not finite), "nan", "inf" and "-inf"
    (strict JSON's spellings) are; text, true/false, lists are not."""
    if isinstance(v, str):
        return v.strip().lower() in ("nan", "inf", "-inf")
    return v is None or isinstance(v, (int, float)) and not isinstance(v, bool)


def lacking(folder: Path, runs: list[PointRun], unfinished: list[Path],
            not_run: Iterable[str], planned: list[str] | None,
            corrupt: dict[str, str]) -> list[dict[str, str]]:
    """The planned points and the run folders found that have no finished run: each with its
    kind (missing, killed, corrupt, running) and why; `corrupt`: the runs whose summary holds
    values that are not numbers, with why."""
    have = {rel(folder, r.dir) for r in runs} | set(not_run)
    found = [rel(folder, p) for p in unfinished]
    out = []
    for name in dict.fromkeys([*(n for n in planned or [] if n not in have), *found,
                               *corrupt]):
        kind, why = ("corrupt", corrupt[name]) if name in corrupt else \
            unfinished_point(folder / name)
        out.append({"run": name, "kind": kind, "why": why})
    return out


def unfinished_point(path: Path) -> tuple[str, str]:
    """(kind, why) for a point folder without a finished run."""
    if not path.is_dir():
        return "missing", "no run folder"
    summary = path / SUMMARY
    if not os.path.lexists(summary):
        return "missing", "no summary.json: it never began, or was not copied here"
    if summary.is_symlink() or not summary.is_file():
        return "corrupt", "summary.json is not a regular file (a link, a FIFO, a device): not read"
    s = read_run(path / SUMMARY)
    if not s or "run_id" not in s:
        return "corrupt", "summary.json is not a run's"
    state = process_state(s)
    if state == "alive":
        return "running", f"still running (process {s.get('pid')})"
    if state == "gone":
        return "killed", "its summary says running; its process is gone"
    return "killed", f"its summary says running{elsewhere(s)}; whether it still runs cannot " \
        f"be told from here"


def elsewhere(s: dict[str, Any]) -> str:
    """', on host H' for a summary written on another host."""
    host = s.get("host")
    return f", on host {host}" if isinstance(host, str) and host != socket.gethostname() else ""


def stats(values: list[Any]) -> dict[str, float]:
    """n, mean, std (sample), min, max of the finite values (numbers, as `number` says: null,
    "nan", "inf" are not finite). Near the float limit they are computed on the values scaled
    by the largest; a std still beyond the largest float is inf (written "inf" in sweep.json,
    as summary.json writes it)."""
    xs = [x for x in map(as_float, values) if math.isfinite(x)]
    if not xs:
        return {"n": 0}
    try:
        mean = statistics.fmean(xs)
        std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    except OverflowError:
        mean = std = math.inf
    if not (math.isfinite(mean) and math.isfinite(std)):  # values near the float limit
        scale = max(abs(x) for x in xs)
        ys = [x / scale for x in xs]
        mean = statistics.fmean(ys) * scale
        std = statistics.stdev(ys) * scale if len(ys) > 1 else 0.0
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
                        name, []).append(v)
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
    try:
        cfg = load(str(run.dir / CONFIG), registry)
    except ConfigError as e:
        return {}, f"the sweep's expectations could not be read: {e}"
    return {e.id: e.expect.sweep for e in cfg.scenarios}, None


def sweep_data(folder: Path, runs: list[PointRun], registry: Registry,
               command: Iterable[str] = (), interrupted: bool = False,
               not_run: Iterable[str] = (), missing: Iterable[dict[str, str]] = (),
               planned: int | None = None, unplanned: Iterable[str] = ()) -> dict[str, Any]:
    """sweep.json's data; `missing`: the points without a finished run (see `lacking`),
    `planned`: how many points the sweep planned, when its plan is known; `unplanned`: the run
    folders found that are none of its points (left out)."""
    missing = list(missing)  # then the sweep checks are reported, not evaluated
    groups: dict[tuple[str, ...], list[PointRun]] = {}
    keys: dict[str, set[str]] = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
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
                f"{len(missing)} point(s) without a finished run" if missing else
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
              "failed" if failed_runs or failed_checks else
              "incomplete" if missing else "passed")
    return {"folder": str(folder), "command": list(command), "config": configs[0],
            "configs": configs, "dry_run": any(g["dry_run"] for g in out_groups),
            "status": status, "axes": axes, "notes": notes, "not_run": list(not_run),
            "points": [{"run": rel(folder, r.dir), "sets": r.sets,
                        "status": r.summary.get("status"), "seed": r.summary.get("seed"),
                        "duration_s": r.summary.get("duration_s"), "why": why(r.summary)}
                       for r in runs],
            "failed_runs": failed_runs, "interrupted_runs": interrupted_runs,
            "missing_runs": missing, "planned": planned, "unplanned_runs": list(unplanned),
            "groups": out_groups}


def rel(folder: Path, path: Path) -> str:
    return Path(os.path.relpath(path, folder)).as_posix()


def sorted_out(folder: Path, planned: list[str] | None) -> tuple[
        list[PointRun], list[Path], dict[str, str], list[str]]:
    """The run folders under `folder`: the finished runs to aggregate, the unfinished ones,
    the corrupt ones (values that are not numbers: why, by name) and, when the sweep's plan
    is known, the folders that are none of its points (left out: a folder counts once, under
    the plan's name, or not at all)."""
    unfinished: list[Path] = []
    runs = find_runs(folder, unfinished)
    corrupt = {rel(folder, r.dir): "; ".join(bad) for r in runs if (bad := not_numbers(r.summary))}
    runs = [r for r in runs if rel(folder, r.dir) not in corrupt]
    if planned is None:
        return runs, unfinished, corrupt, []
    names = set(planned)
    unplanned = sorted({*(rel(folder, p) for p in [*(r.dir for r in runs), *unfinished]),
                        *corrupt} - names)
    return ([r for r in runs if rel(folder, r.dir) in names],
            [p for p in unfinished if rel(folder, p) in names],
            {n: why for n, why in corrupt.items() if n in names}, unplanned)


def aggregate(folder: Path, registry: Registry, command: Iterable[str] = (),
              interrupted: bool = False, not_run: Iterable[str] = ()) -> int:
    """Write sweep.json and sweep.html for the runs under `folder`; print the table; return
    the exit code (1 when a run failed or a sweep expectation is not met)."""
    if not folder.is_dir():
        raise ConfigError(f"aggregate {folder}: " + ("not a folder" if folder.exists()
                                                       else "no such folder"))
    planned = read_plan(folder)
    runs, unfinished, corrupt, unplanned = sorted_out(folder, planned)
    not_run = list(not_run)
    missing = lacking(folder, runs, unfinished, not_run, planned, corrupt)
    if not runs:
        for line in left_out_lines(missing, unplanned):
            say(line)
        named = f" ({len(missing)} missing, killed or corrupt, named above)" if missing else ""
        raise ConfigError(f"aggregate {folder}: no finished run folders (with summary.json) "
                          f"under it{named}" + remove_stale(folder))
    data = sweep_data(folder, runs, registry, command, interrupted, not_run, missing,
                      len(planned) if planned is not None else None, unplanned)
    try:  # the page (and its plots) first: sweep.json says the aggregate is whole
        data["notes"] += write_page(folder, data)
        write_json(folder / SWEEP, data)
    except OSError as e:
        _, left = unlink_stale(folder)  # an old one would describe other runs
        raise ConfigError(f"aggregate {folder}: cannot write sweep.json and sweep.html "
                          f"({e.strerror or e}); " + (f"the old {' and '.join(left)} could not "
                          f"be removed: stale" if left else "neither is left there")) from None
    for line in console_lines(data):
        say(line)
    say(f"sweep: {folder / SWEEP_PAGE}")
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
    lines += [f"interrupted run: {r}" for r in data["interrupted_runs"]]
    lines += [f"not run (interrupted): {r}" for r in data["not_run"]]
    missing, unplanned = data["missing_runs"], data["unplanned_runs"]
    lines += left_out_lines(missing, unplanned)
    lines += [f"note: {n}" for n in data["notes"]]
    failed_checks = sum(c["passed"] is False for g in data["groups"] for c in g["checks"])
    stopped, planned = len(data["interrupted_runs"]), data["planned"]
    runs = count_runs(len(data["points"]))
    if planned is not None and planned != len(data["points"]):
        runs = f"{len(data['points'])} of {planned} planned runs"
    lines.append(f"{data['status'].upper()}: {runs}, {len(data['failed_runs'])} failed"
                 + (f", {stopped} interrupted" if stopped else "")
                 + (f", {len(missing)} missing, killed or corrupt" if missing else "")
                 + (f", {len(unplanned)} not in the plan" if unplanned else "")
                 + f"; {failed_checks} sweep check(s) failed")
    return lines


def left_out_lines(missing: list[dict[str, str]], unplanned: list[str]) -> list[str]:
    """A line per point without a finished run ('corrupt: 2_seed=2 (why)'), then one per run
    folder that is none of the plan's points."""
    return [*(f"{m['kind']}: {m['run']} ({m['why']})" for m in missing),
            *(f"not part of the sweep's plan, left out: {name}" for name in unplanned)]


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
