"""Sweeps: one config run at every point of a grid of `--set` values (`--sweep KEY=V1,V2`,
`--seeds 0-4`), each point an ordinary run folder inside one sweep folder, `--jobs` at a time,
then sweep.json and sweep.html (demos.lab.comparing.aggregate).

Torch-free: each point is a child process of the runner (`python -m demos ... --run-name`), so a
point is exactly the run a user gets by hand, and a crash in one is that point's failure alone.
`--shard i/n` runs every n-th point, for any scheduler that fans a sweep out. A shard's folder
is named for its plan (the config's content, the --set, --sweep and --seeds values, ...), which
the folder records (sweep-plan.json): a shard run again keeps only the points of the same plan,
and two live copies of one shard never share it. All the sweep's own lines go through
`console.say`: escaped, and a reader gone away (`| head`) stops no sweep.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from demos.lab.comparing.aggregate import PLAN, process_state
from demos.lab.core import config as config_mod
from demos.lab.core.console import say
from demos.lab.core.files import NotReadable, read_bytes, write_json
from demos.lab.core.layout import SUMMARY, read_run
from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from demos.lab.core.scenario import Registry
from demos.lab.core.schema import ConfigError
from demos.lab.core.signals import StopRequest, signal_handler
from demos.lab.core.threads import auto_threads, available_cores

MAX_POINTS = 1000
MAX_HASHED_BYTES = 64 << 20  # the config's and the baseline's bytes, read for the plan's digest
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


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N), I counted from 0 like SLURM array and Kubernetes job indexes."""
    m = re.fullmatch(r"(\d{1,6})/(\d{1,6})", text.strip())
    if not m or not int(m[1]) < int(m[2]):
        raise ConfigError(f"--shard {text}: expected I/N with 0 <= I < N, e.g. 0/4 ... 3/4")
    return int(m[1]), int(m[2])


def point_name(index: int, sets: list[str], width: int) -> str:
    """'03_lr=0.002,seed=1': the point's number, then its values under their last key part."""
    short = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, _, v in (s.partition("=")
                                                                    for s in sets))
    return f"{index:0{width}d}_" + re.sub(r"[^A-Za-z0-9_.=,+-]", "-", short)[:80]


@dataclass
class Plan:
    """Every point of a sweep (or of its shard), validated; how each is started."""
    config: str
    axes: list[tuple[str, list[str]]]
    points: list[tuple[str, list[str]]]          # (folder name, the point's --set values)
    total: int                                   # points in the whole sweep
    runner_args: list[str]                       # what every point gets: --set, --device, ...
    jobs: int = 1
    threads: int | None = None                   # --set threads=N for every point, if any
    shard: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)
    # by point: more arguments, and environment variables (an ensemble's variants)
    extra: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    cores: dict[str, int] = field(default_factory=dict)  # by point: the threads it runs
    digest: str = ""                             # what the points are run from (plan_digest)
    planned: list[str] = field(default_factory=list)  # every point of the sweep, by name

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
    total = 1
    for _, values in axes:
        total *= len(values)
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
    planned = [name for name, _ in points]
    shard = parse_shard(args.shard) if args.shard else None
    if shard:
        points = [p for i, p in enumerate(points) if i % shard[1] == shard[0]]
    jobs, note = cap_jobs(args.jobs, "point")
    notes = [note] if note else []
    plan = Plan(args.config, axes, points, total, passed_on(args), jobs=jobs, shard=shard,
                notes=notes, planned=planned)
    plan.digest = plan_digest(args, plan)
    plan.threads, note = share_cores(jobs, base.threads,
                                     "threads" in keys or args.threads is not None)
    plan.notes += [note] if note else []
    return plan


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
    from demos.lab.core.overrides import apply_set
    from demos.lab.core.safe_yaml import read_yaml

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


def plan_digest(args: Any, plan: Plan) -> str:
    """What a point's numbers follow from: the config's path and bytes, the baseline's bytes,
    the swept values and what every point gets (--set, --seed, --device, --dry-run, ...)."""
    h = hashlib.sha256(repr((plan.config, plan.axes, plan.runner_args)).encode())
    for option, path in (("--config", args.config), ("--baseline", args.baseline)):
        try:
            h.update(read_bytes(path, MAX_HASHED_BYTES) if path else b"")
        except NotReadable as e:
            raise ConfigError(f"{option} {path}: {e}") from None
    return h.hexdigest()


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
    """The run name given, or for a shard one every shard of the same sweep agrees on, or a
    new sweep_<time> folder."""
    from demos.lab.core.layout import make_named_dir, make_run_dir

    name = args.run_name
    if name is None and plan.shard:  # the plan's digest: an edited config is another sweep
        name = f"sweep_{Path(plan.config).stem}_{plan.digest[:8]}"
    if name is None:
        import datetime as dt
        folder = make_run_dir(output_dir, dt.datetime.now(), prefix="sweep_")
    elif not plan.shard:
        folder = make_named_dir(output_dir, name, kind="sweep")
    else:
        from demos.lab.core.layout import clashes
        why = clashes(name, "sweep") if args.run_name is not None else None
        if why:
            raise ConfigError(f"--run-name {name}: not a sweep folder's name: {why}")
        folder = output_dir / name
        try:  # every shard of the sweep writes here
            if not folder.is_symlink():
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--output-dir {output_dir}: cannot create {name}: "
                              f"{e.strerror or e}") from None
        if folder.is_symlink():  # its points would be written elsewhere
            raise ConfigError(f"--output-dir {output_dir}: {name} is a symbolic link (to "
                              f"{os.readlink(folder)}); a sweep's folder is a folder of the "
                              f"output folder, never written through a link: remove the link, "
                              f"or give --output-dir the folder it points to")
    record_plan(folder, plan)
    return folder


def record_plan(folder: Path, plan: Plan) -> None:
    """sweep-plan.json: the plan the folder's points are run from (aggregate reads which
    points to expect there). A shard's folder may hold only one plan's points: another is
    refused, never mixed in."""
    from filelock import FileLock, Timeout

    record = {"digest": plan.digest, "config": plan.config, "total": plan.total,
              "axes": {k: v for k, v in plan.axes}, "every_point": plan.runner_args,
              "points": plan.planned}
    try:
        with FileLock(str(folder / ".plan.lock"), timeout=10):
            if plan.shard:
                found = read_run(folder / PLAN)
                if found is None and any(p.is_dir() for p in folder.iterdir()):
                    found = {"digest": "none recorded"}
                if found is not None and found.get("digest") != plan.digest:
                    raise ConfigError(
                        f"{folder}: holds the points of another sweep (its config's content, "
                        f"or its --set, --sweep or --seeds values, differ; recorded in {PLAN}"
                        f"); not mixing them: give another --run-name, or remove the folder")
                if found is not None:
                    return
            write_json(folder / PLAN, record)
    except (OSError, Timeout) as e:
        raise ConfigError(f"{folder}: cannot record the sweep's plan: "
                          f"{getattr(e, 'strerror', None) or e}") from None


@contextlib.contextmanager
def shard_owned(folder: Path, plan: Plan) -> Iterator[None]:
    """This process runs its shard of the sweep in `folder`, and no other does meanwhile: a
    second live copy of the shard is refused (one line, exit 2), never let into the folder."""
    if not plan.shard:
        yield
        return
    from filelock import FileLock, Timeout

    name = f".shard-{plan.shard[0]}-of-{plan.shard[1]}"
    lock = FileLock(str(folder / f"{name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            owner = "process " + read_bytes(folder / f"{name}.owner", 64).decode().strip()
        except (NotReadable, UnicodeDecodeError):
            owner = "another process"
        raise ConfigError(f"--shard {plan.shard[0]}/{plan.shard[1]}: shard "
                          f"{plan.shard[0]}/{plan.shard[1]} of this sweep is being run by "
                          f"{owner}, in {folder}; wait for it to end, or stop it") from None
    except OSError as e:
        raise ConfigError(f"{folder}: cannot lock its shard: {e.strerror or e}") from None
    try:
        try:
            (folder / f"{name}.owner").write_text(f"{os.getpid()}\n")
        except OSError:
            pass  # only the refusal's message names the owner
        yield
    finally:
        lock.release()


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
    for name, _ in plan.points:  # before anything is moved: a live point is refused
        s = read_run(folder / name / SUMMARY)
        if s and s.get("status") == "running" and process_state(s) == "alive":
            raise ConfigError(f"sweep point {name} is still running (process {s.get('pid')}) "
                              f"in {folder}; wait for it to end, or stop it")
    todo = [p for p in plan.points if not already_done(folder / p[0])]
    for point in plan.points:
        if point not in todo:
            say(f"{point[0]}: finished by an earlier try; kept")
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


def already_done(point: Path) -> bool:
    """A point a retried shard need not run again: its run finished (passed or failed). A
    folder it left unfinished is moved aside (`.<name>.unfinished-N`), so it can run anew;
    only once its process is gone (run_points refuses a live one first)."""
    if not point.exists():
        return False
    s = read_run(point / SUMMARY)
    if s and s.get("status") in ("passed", "failed"):
        return True
    for i in range(1, 1000):
        aside = point.with_name(f".{point.name}.unfinished-{i}")
        if not aside.exists():
            point.rename(aside)
            say(f"{point.name}: left unfinished by an earlier try; moved aside to {aside.name} "
                f"and run anew")
            return False
    raise ConfigError(f"{point}: unfinished, and too many earlier tries beside it")


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
    """The whole sweep: plan, points, then sweep.json and sweep.html (not for a shard)."""
    from demos.lab.comparing import aggregate
    plan = make_plan(args, registry)
    folder = sweep_folder(args, plan, output_dir)
    axes = "; ".join(f"{k} = {', '.join(v)}" for k, v in plan.axes)
    part = f" (shard {plan.shard[0]}/{plan.shard[1]}: {len(plan.points)} of them)" \
        if plan.shard else ""
    if plan.shard and not plan.points:  # more shards than points: this one has none
        say(f"sweep {folder}: {axes}; no point of this sweep falls to shard {plan.shard[0]}/"
            f"{plan.shard[1]} ({plan.total} point{'s' if plan.total > 1 else ''} in all; shard "
            f"I runs the points I, I+N, ...): nothing to run")
        return EXIT_OK
    with shard_owned(folder, plan):  # a second live copy of this shard: refused, here
        say(f"sweep {folder}: {plan.total} points{part}, {axes}; "
            f"{min(plan.jobs, len(plan.points))} at a time"
            + (f", {plan.threads} thread(s) each" if plan.threads else ""))
        for note in plan.notes:
            say(f"warning: {note}", err=True)
        codes, not_run = run_points(plan, folder, stop)
    if stop.requested:
        code = EXIT_INTERRUPTED
    else:
        code = EXIT_OK if all(c == EXIT_OK for c in codes.values()) else EXIT_FAILED
    if plan.shard:
        say(f"shard {plan.shard[0]}/{plan.shard[1]} done; once every shard is: python "
            f"runner.py aggregate {folder}")
        return code
    if not aggregate.find_runs(folder):
        say(f"no point finished a run; nothing to aggregate in {folder}")
        return code if code != EXIT_OK else EXIT_FAILED
    summary_code = aggregate.aggregate(folder, registry, command=command,
                                       interrupted=bool(stop.requested), not_run=not_run)
    return code if code != EXIT_OK else summary_code
