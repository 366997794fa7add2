"""Sweeps: one config run at every point of a grid of `--set` values (`--sweep KEY=V1,V2`,
`--seeds 0-4`), each point an ordinary run folder inside one sweep folder, `--jobs` at a time,
then sweep.json and sweep.html (demos.lab.comparing.aggregate).

Torch-free: each point is a child process of the runner (`python -m demos ... --run-name`), so a
point is exactly the run a user gets by hand, and a crash in one is that point's failure alone.
The sweep's folder records its plan (sweep-plan.json: the points it runs), so that `aggregate`
knows which points to expect. Where a sweep outgrows one machine, an existing scheduler runs its
points (each an ordinary `runner.py --run-name` command) and `aggregate` reads the folders
(demos/docs/runs-compared.md). All the sweep's own lines go through `console.say`: escaped, and
a reader gone away (`| head`) stops no sweep.
"""
from __future__ import annotations

import datetime as dt
import itertools
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demos.lab.comparing.aggregate import PLAN
from demos.lab.core import config as config_mod
from demos.lab.core.console import say
from demos.lab.core.files import write_json
from demos.lab.core.layout import SUMMARY, make_named_dir, make_run_dir, read_run
from demos.lab.core.overrides import apply_set
from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from demos.lab.core.safe_yaml import read_yaml
from demos.lab.core.scenario import Registry
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import StopRequest, signal_handler
from demos.lab.core.threads import auto_threads, available_cores

MAX_POINTS = 1000
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=,+-]{0,99}")  # a run or sweep folder's name


def split_values(text: str) -> list[str]:
    """'1,2,[3, 4]' -> ['1', '2', '[3, 4]']: commas inside brackets or quotes stay."""
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    values.append(text[start:].strip())
    return values


def parse_axis(option: str) -> tuple[str, list[str]]:
    """--sweep KEY=V1,V2,... -> (KEY, [V1, V2, ...])."""
    key, sep, text = option.partition("=")
    values = split_values(text) if sep else []
    if not key.strip() or not values or not all(values):
        raise ConfigError(f"--sweep {option}: expected KEY=V1,V2,... (e.g. "
                          f"scenarios.lenet.lr=1e-3,2e-3)")
    return key.strip(), values


def parse_seeds(text: str) -> list[str]:
    """'0,1,2' or '0-4' or '0-2,7' -> the seeds, in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,12})\s*(?:-\s*(\d{1,12})\s*)?", part)
        if not m or (m[2] and int(m[2]) < int(m[1])):
            raise ConfigError(f"--seeds {text}: expected seeds like 0,1,2 or a range 0-4")
        first, last = int(m[1]), int(m[2] or m[1])
        if last - first + len(seeds) >= MAX_POINTS:
            raise ConfigError(f"--seeds {text}: more than {MAX_POINTS} seeds")
        seeds += range(first, last + 1)
    return [str(s) for s in dict.fromkeys(seeds)]


def point_name(index: int, sets: list[str], width: int) -> str:
    """'03_lr=0.002,seed=1': the point's number, then its values under their last key part."""
    short = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, _, v in (s.partition("=")
                                                                    for s in sets))
    return f"{index:0{width}d}_" + re.sub(r"[^A-Za-z0-9_.=,+-]", "-", short)[:80]


@dataclass
class Plan:
    """Every point of a sweep, validated; how each is started."""
    config: str
    axes: list[tuple[str, list[str]]]
    points: list[tuple[str, list[str]]]          # (folder name, the point's --set values)
    runner_args: list[str]                       # what every point gets: --set, --device, ...
    jobs: int = 1
    threads: int | None = None                   # --set threads=N for every point, if any
    notes: list[str] = field(default_factory=list)
    # by point: more arguments, and environment variables (an ensemble's variants)
    extra: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    cores: dict[str, int] = field(default_factory=dict)  # by point: the threads it runs

    def command(self, name: str, sets: list[str], folder: Path) -> list[str]:
        threads = ["--threads", str(self.threads)] if self.threads else []
        return [sys.executable, "-m", "demos", "--config", self.config, "--output-dir",
                str(folder), "--run-name", name, "--no-progress", *self.runner_args, *threads,
                *(a for s in sets for a in ("--set", s)), *self.extra.get(name, ([], {}))[0]]


def make_plan(args: Any, registry: Registry) -> Plan:
    """Check every point's config (one-line errors name the point) before anything runs."""
    axes = [parse_axis(a) for a in args.sweep or []]
    labels = [f"--sweep {k}" for k, _ in axes]
    if args.seeds is not None:
        axes.append(("seed", parse_seeds(args.seeds)))
        labels.append("--seeds")
    keys = [k for k, _ in axes]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"--sweep: a key is swept twice: {', '.join(keys)}")
    total = math.prod(len(values) for _, values in axes)
    if total > MAX_POINTS:
        raise ConfigError(f"--sweep: {total} points; at most {MAX_POINTS}")
    grid = [[f"{k}={v}" for k, v in zip(keys, combo)]
            for combo in itertools.product(*(v for _, v in axes))]
    width = len(str(len(grid) - 1))
    points = [(point_name(i, sets, width), sets) for i, sets in enumerate(grid)]
    # each key once, before a point's config is loaded (which would name only its --set)
    check_keys(args, [(label, f"{k}={v[0]}") for label, (k, v) in zip(labels, axes)])
    base, resolved = None, []
    for name, sets in points:
        try:
            cfg = config_mod.load(args.config, registry, [*args.sets, *sets])
        except ConfigError as e:
            raise ConfigError(f"sweep point {name}: {e}") from None
        base = base or cfg
        resolved.append(repr(cfg))
        if args.only:
            config_mod.select(cfg, ",".join(args.only), args.config)
    assert base is not None  # the grid has a point at least
    check_distinct(points, resolved, axes, labels)
    jobs, capped = cap_jobs(args.jobs, "point")
    threads, shared = share_cores(jobs, base.threads, "threads" in keys or args.threads is not None)
    return Plan(args.config, axes, points, passed_on(args), jobs=jobs, threads=threads,
                notes=[note for note in (capped, shared) if note])


def check_distinct(points: list[tuple[str, list[str]]], resolved: list[str],
                   axes: list[tuple[str, list[str]]], labels: list[str]) -> None:
    """No two points of the grid are one run: a value given twice (`1e-3,1e-3`, or
    `1e-3,0.001`: the same number) is refused, since its group would hold one run twice."""
    first: dict[str, int] = {}
    for i, config in enumerate(resolved):
        j = first.setdefault(config, i)
        if j == i:
            continue
        (a, sets_a), (b, sets_b) = points[j], points[i]
        k = next((k for k, (x, y) in enumerate(zip(sets_a, sets_b)) if x != y), 0)
        key, values = axes[k]
        x, y = (s.partition("=")[2] for s in (sets_a[k], sets_b[k]))
        label = f"--sweep {key}={','.join(values)}" if labels[k].startswith("--sweep") \
            else labels[k]
        twice = f"{x} is given twice" if x == y else f"{y} is the same as {x}"
        raise ConfigError(f"{label}: the value {twice} (points {a} and {b} would be one "
                          f"run); give each value once")


def cap_jobs(jobs: int, noun: str) -> tuple[int, str]:
    """--jobs, at most the cores this process may use (more at once would only slow each other
    down, and cost memory); the warning that says so, or ""."""
    cores = available_cores()
    if jobs <= cores:
        return jobs, ""
    many = "s" if cores > 1 else ""
    return cores, (f"--jobs {jobs}: {cores} usable core{many} here; running {cores} "
                   f"{noun}{many} at a time")


def check_keys(args: Any, swept: list[tuple[str, str]]) -> None:
    """Each config key set once: every --set, --seed, --device, --threads and swept key is
    resolved to the key it addresses (`scenarios.<id>.lr` and `scenarios[0].lr` are one),
    and a key given twice, or inside another given key, is refused (one would silently win,
    and the groups' labels would lie)."""
    raw = read_yaml(args.config)
    given = [(f"--set {s}", s) for s in args.sets]
    given += [(f"--{k} {v}", f"{k}={v}") for k, v in (("seed", args.seed), ("device", args.device),
                                                      ("threads", args.threads)) if v is not None]
    seen: dict[tuple[str, ...], str] = {}
    for label, assignment in [*given, *swept]:
        key = tuple(filter(None, re.split(r"[.\[\]]+", apply_set(raw, assignment))))
        for other, by in seen.items():
            if key[:len(other)] == other or other[:len(key)] == key:
                raise ConfigError(f"{label}: the same key as {by} ({'.'.join(other)}); give "
                                  f"each key once: sweep it or set it")
        seen[key] = label


def passed_on(args: Any) -> list[str]:
    """What every point's command line gets from ours: --set, --device, --seed, --threads,
    --baseline, --only, --dry-run."""
    out = [a for s in args.sets for a in ("--set", s)]
    for flag, value in (("--device", args.device), ("--seed", args.seed),
                        ("--threads", args.threads), ("--baseline", args.baseline)):
        if value is not None:
            out += [flag, str(value)]
    out += [a for o in args.only or [] for a in ("--only", o)]
    return out + (["--dry-run"] if args.dry_run else [])


def share_cores(jobs: int, threads: int | str, swept: bool) -> tuple[int | None, str]:
    """Threads per point so that `jobs` points at once do not oversubscribe the cores."""
    cores = available_cores()
    if jobs == 1 or swept:
        return None, ""
    if threads == "auto":
        return min(auto_threads(cores), max(1, cores // jobs)), ""
    if int(threads) * jobs > cores:
        return None, (f"{jobs} jobs x {threads} threads on {cores} cores: oversubscribed; "
                      f"each point runs slower")
    return None, ""


def sweep_folder(args: Any, plan: Plan, output_dir: Path) -> Path:
    """The run name given, or a new sweep_<time> folder; its plan recorded."""
    if args.run_name is None:
        folder = make_run_dir(output_dir, dt.datetime.now(), prefix="sweep_")
    else:
        folder = make_named_dir(output_dir, args.run_name, kind="sweep")
    try:  # which points aggregate is to expect there
        write_json(folder / PLAN, {"config": plan.config, "total": len(plan.points),
                                   "axes": {k: v for k, v in plan.axes},
                                   "every_point": plan.runner_args,
                                   "points": [name for name, _ in plan.points]})
    except OSError as e:
        raise ConfigError(f"{folder}: cannot record the sweep's plan: {e.strerror or e}") \
            from None
    return folder


class Children:
    """The running points: started in their own sessions, so that a signal reaches them
    once, through us; the first stop signal is passed on, a second kills them."""

    def __init__(self, stop: StopRequest):
        self.stop = stop
        self.running: dict[str, Any] = {}  # name -> (process, its output file, started)

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop.requested:
            say(f"\n{name} again: killing the running points", err=True)
            self.signal(signal.SIGKILL)
            return
        self.stop.requested = name
        say(f"\n{name}: the running points stop at their next step boundary and save "
            f"what they did; no new point starts (send it again to kill them)", err=True)
        self.signal(signal.SIGINT)

    def signal(self, sig: int) -> None:
        for proc, *_ in self.running.values():
            if proc.poll() is None:
                proc.send_signal(sig)


def stop_with_parent() -> None:
    """In a point's process, on Linux: SIGTERM when the sweep dies, even by SIGKILL, so that
    no point trains on for nobody (it stops at a step boundary and writes its summary)."""
    if sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def run_points(plan: Plan, folder: Path, stop: StopRequest) -> tuple[dict[str, int], list[str]]:
    """Run the plan's points, `jobs` at a time; their exit codes by name, and the points an
    interruption left unstarted."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[3]), *filter(None, [os.environ.get("PYTHONPATH")])])}
    children, codes = Children(stop), {}
    todo = list(plan.points)
    with signal_handler(children):
        while children.running or (todo and not stop.requested):
            while todo and len(children.running) < plan.jobs and not stop.requested and \
                    fits(plan, todo[0][0], children.running):
                name, sets = todo.pop(0)
                out = tempfile.TemporaryFile()
                proc = subprocess.Popen(plan.command(name, sets, folder),
                                        env={**env, **plan.extra.get(name, ([], {}))[1]},
                                        stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=stop_with_parent)
                children.running[name] = (proc, out, time.monotonic())
            for name, (proc, out, began) in list(children.running.items()):
                if proc.poll() is not None:
                    del children.running[name]
                    codes[name] = proc.returncode
                    report_point(name, proc.returncode, out, time.monotonic() - began,
                                 folder, len(codes), len(plan.points))
            time.sleep(0.05)
    for name, _ in todo:
        say(f"not run (interrupted): {name}")
    return codes, [name for name, _ in todo]


def fits(plan: Plan, name: str, running: dict[str, Any]) -> bool:
    """Whether point `name` may start beside the running ones: their threads (`plan.cores`, by
    point) stay within the cores, or nothing runs (threads spinning on a busy core slow every
    point down many times)."""
    if not running or not plan.cores:
        return True
    busy = sum(plan.cores.get(n, 1) for n in running)
    return busy + plan.cores.get(name, 1) <= available_cores()


def report_point(name: str, code: int, out: Any, seconds: float, folder: Path, done: int,
                 total: int) -> None:
    """One line per finished point; what went wrong when it has no run to show for it."""
    s = read_run(folder / name / SUMMARY) if code in (0, 1, 130) else None
    status = str(s.get("status")) if s else f"no run (exit {code})"
    if status == "running":  # killed before it could write its summary
        status = "killed"
    failed = [f"{e.get('id')} {e.get('status')}" for e in (s or {}).get("scenarios", [])
              if e.get("status") != "passed"]
    run_s = (s or {}).get("duration_s")  # the run itself, as sweep.html gives it
    took = (f"in {run_s:.1f} s ({seconds:.1f} s with the process's start-up)"
            if isinstance(run_s, (int, float)) else f"after {seconds:.1f} s")
    say(f"[{done}/{total}] {name}: {status.upper()} {took}"
        + (f" ({', '.join(failed)})" if failed else ""))
    if s is None:
        out.seek(0)
        tail = out.read().decode("utf-8", "replace").strip().splitlines()[-3:]
        for line in tail:
            say(f"    {line}")
    out.close()


def run_sweep(args: Any, registry: Registry, output_dir: Path, stop: StopRequest,
              command: list[str]) -> int:
    """The whole sweep: plan, points, then sweep.json and sweep.html."""
    from demos.lab.comparing import aggregate
    plan = make_plan(args, registry)
    folder = sweep_folder(args, plan, output_dir)
    axes = "; ".join(f"{k} = {', '.join(v)}" for k, v in plan.axes)
    if args.plan_only:  # a scheduler runs the points; aggregate knows them
        import shlex
        for name, sets in plan.points:
            say(shlex.join(plan.command(name, sets, folder)))
        say(f"# {len(plan.points)} points planned in {folder}; once they have run: "
            f"python runner.py aggregate {shlex.quote(str(folder))}", err=True)
        return EXIT_OK
    say(f"sweep {folder}: {len(plan.points)} points, {axes}; "
        f"{min(plan.jobs, len(plan.points))} at a time"
        + (f", {plan.threads} thread(s) each" if plan.threads else ""))
    for note in plan.notes:
        say(f"warning: {note}", err=True)
    codes, not_run = run_points(plan, folder, stop)
    code = (EXIT_INTERRUPTED if stop.requested else
            EXIT_OK if all(c == EXIT_OK for c in codes.values()) else EXIT_FAILED)
    if not aggregate.find_runs(folder):
        say(f"no point finished a run; nothing to aggregate in {folder}")
        return code if code != EXIT_OK else EXIT_FAILED
    summary_code = aggregate.aggregate(folder, registry, command=command,
                                       interrupted=bool(stop.requested), not_run=not_run)
    return code if code != EXIT_OK else summary_code
