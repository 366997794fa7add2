"""The runs' index: index.html in the output folder (templates/index.html.j2), every run in
it newest first, and its sweeps and comparisons.

Runs finishing together rebuild it in turn, under a lock beside it (filelock); each reads
the others' folders as a stranger would (demos.lab.core.layout) and never blocks on them.
"""
from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from demos.lab.core.files import remove_temps, write_atomic
from demos.lab.core.layout import (
    COMPARE_PAGE,
    COMPARISON,
    INDEX,
    INDEX_LOCK,
    REPORT,
    RUN_ID,
    SUMMARY,
    SWEEP,
    SWEEP_PAGE,
    read_run,
    still_running,
)

LOCK_WAIT_S = 10.0  # how long a finished run waits for another run's index rebuild


@dataclass
class Row:
    """A run as the index lists it, from its summary.json."""
    name: str                       # the run folder's name
    href: str | None                # its report.html, when it has one
    started: str
    config: Any
    options: list[str]              # its --set overrides, and what else changes it (see below)
    status: str
    passed: int
    failed: int
    device: Any
    dry_run: bool


@dataclass
class Sweep:
    """A sweep folder; `href` None: no sweep.json yet (running, or its points not aggregated)."""
    name: str
    href: str | None = None
    config: Any = None
    axes: str = ""                  # what it sweeps: "seed = 0, 1, 2; lr = ..."
    points: int = 0
    status: str = "?"


@dataclass
class ComparisonRow:
    """A compare folder: the runs it compares, whether they agree."""
    name: str
    href: str
    runs: str
    status: str                     # agree | differ | ?


@contextlib.contextmanager
def locked(path: Path, wait_s: float | None = None) -> Iterator[None]:
    """An exclusive lock on `path`, so index rebuilds never interleave.

    Waits at most `wait_s` (default LOCK_WAIT_S) for another process's lock, then raises
    TimeoutError. The lock's file is a plain file or nothing: never a link or FIFO planted
    at its name.
    """
    from filelock import FileLock, Timeout

    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    with contextlib.suppress(FileNotFoundError):  # none yet: filelock makes it
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise OSError(f"{path} is not a regular file; remove it")
    try:
        held = FileLock(path, timeout=wait_s).acquire()  # released as the `with` below ends
    except Timeout:
        raise TimeoutError(f"{path.name} held by another process for {wait_s:g} s") from None
    with held:
        yield


def write_index(output_dir: Path, wait_s: float | None = None) -> list[str]:
    """outputs/index.html: every run in `output_dir`, newest first, linking to its report.

    Returns the folders skipped because their summary.json is not a run's (foreign, broken).
    `wait_s`: how long to wait for another process's rebuild (default LOCK_WAIT_S).
    """
    from demos.lab.pages.templating import render

    with locked(output_dir / INDEX_LOCK, wait_s):
        for stale in output_dir.glob(".index.html.*.tmp"):  # index temps exist only under this
            if stale.is_file() and not stale.is_symlink():  # lock: these are a killed run's
                with contextlib.suppress(OSError):
                    stale.unlink()
        folders = [p for p in output_dir.iterdir() if p.is_dir() and not p.is_symlink()]
        runs, skipped = rows(output_dir, folders)
        unfinished = sorted((p.name for p in folders
                             if RUN_ID.fullmatch(p.name) and not (p / SUMMARY).exists()),
                            reverse=True)
        sweeps, comparisons, odd = sweeps_and_comparisons(folders)
        skipped += odd
        write_atomic(output_dir / INDEX,
                     render("index.html.j2", runs=runs, unfinished=unfinished, sweeps=sweeps,
                            comparisons=comparisons))
    return sorted(skipped)


def rows(output_dir: Path, folders: list[Path]) -> tuple[list[Row], list[str]]:
    """The runs among `folders`, newest first; and the folders whose summary.json is not a
    run's. A "running" run whose process is gone is "stopped", its temp files removed."""
    found, skipped = [], []
    for summary_path in (p / SUMMARY for p in folders):
        if not os.path.lexists(summary_path):
            continue
        name = summary_path.parent.name
        s = read_run(summary_path)
        if s is None:
            skipped.append(name)
            continue
        if s.get("status") == "running" and not still_running(s):
            s["status"] = "stopped"  # killed (SIGKILL, power) before its final summary
            remove_temps(summary_path.parent)  # what it was writing when it died
        suffix = name.rsplit("-", 1)[1] if name.count("-") == 5 else "0"  # -1, -2: same second
        found.append((str(s.get("started", "")),
                      int(suffix) if suffix.isascii() and suffix.isdigit() else 0, name, s))
    found.sort(reverse=True)
    out = []
    for _, _, name, s in found:
        try:
            out.append(row(output_dir, name, s))
        except Exception:  # a field of an odd type (a "command" that is a number): that
            skipped.append(name)  # folder is left out, and named; never the whole index
    return out, skipped


def row(output_dir: Path, name: str, s: dict[str, Any]) -> Row:
    """The index's row of the run folder `name`, whose summary.json holds `s`."""
    entries = s.get("scenarios", [])
    ok = sum(e.get("status") == "passed" for e in entries)
    report = href(output_dir / name, REPORT) if (output_dir / name / REPORT).exists() else None
    return Row(name, report, str(s.get("started", "")), text_or_none(s.get("config")),
               overrides(s) + other_options(s), str(s.get("status", "?")),
               ok, len(entries) - ok, text_or_none(s.get("device")), bool(s.get("dry_run")))


def text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def overrides(s: dict[str, Any]) -> list[str]:
    """A run's --set overrides: summary.json's `sets`, or read off the command of a run from
    before summaries had them."""
    sets = s.get("sets")
    if isinstance(sets, list):
        return [str(x) for x in sets]
    command = [str(a) for a in s.get("command") or [] if isinstance(a, str)]
    return [b for a, b in zip(command, command[1:]) if a == "--set"]


def other_options(s: dict[str, Any]) -> list[str]:
    """What else in a run's command changes what it runs or checks: --only, --baseline, --seed,
    --threads, --device; and torchrun's processes."""
    command = [str(a) for a in s.get("command") or [] if isinstance(a, str)]
    shown = [f"{a} {b}" for a, b in zip(command, command[1:])
             if a in ("--only", "--baseline", "--seed", "--threads", "--device")]
    world = s.get("world")
    if isinstance(world, dict) and isinstance(world.get("size"), int):
        shown.insert(0, f"torchrun: {world['size']} processes")
    return shown


def sweeps_and_comparisons(folders: list[Path]) -> tuple[list[Sweep], list[ComparisonRow],
                                                         list[str]]:
    """The index's sweep folders (sweep.json) and comparisons (compare.json), newest first; and
    the folders left out because their file holds what no sweep or comparison writes."""
    sweeps, comparisons, odd = [], [], []
    for p in sorted(folders, key=lambda p: p.name, reverse=True):
        try:
            if (p / SWEEP).is_file() or p.name.startswith("sweep_"):
                sweeps.append(sweep_row(p))
            elif (p / COMPARISON).is_file():
                comparisons.append(comparison_row(p))
        except Exception:  # a field of an odd type: that folder is left out, and named
            odd.append(p.name)
    return sweeps, comparisons, odd


def href(folder: Path, page: str) -> str:
    """A link to `page` in `folder`, beside the index. ./: a folder named like http: stays a
    folder; fsencode: a name whose bytes are not UTF-8 stays itself."""
    return quote(os.fsencode(f"./{folder.name}/{page}"))


def sweep_row(p: Path) -> Sweep:
    data = read_run(p / SWEEP)
    if data is None:
        return Sweep(p.name)
    axes = "; ".join(f"{k} = {', '.join(map(str, v))}"
                     for k, v in (data.get("axes") or {}).items())
    return Sweep(p.name, href(p, SWEEP_PAGE), text_or_none(data.get("config")), axes,
                 len(data.get("points") or []), str(data.get("status", "?")))


def comparison_row(p: Path) -> ComparisonRow:
    data = read_run(p / COMPARISON) or {}
    runs = [str(r.get("label", r.get("run_id", "?"))) if isinstance(r, dict) else str(r)
            for r in data.get("runs") or []]
    words: dict[Any, str] = {True: "agree", False: "differ"}
    return ComparisonRow(p.name, href(p, COMPARE_PAGE), ", ".join(runs),
                         words.get(data.get("agree"), "?"))
