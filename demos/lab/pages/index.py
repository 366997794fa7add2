"""The runs' index: index.html in the output folder (templates/index.html.j2), every run in
it newest first.

Runs finishing together rebuild it in turn, under a lock beside it (filelock); each reads
the others' folders as a stranger would (demos.lab.core.files) and never blocks on them.
"""
from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

from demos.lab.core.files import (
    INDEX,
    INDEX_LOCK,
    REPORT,
    RUN_ID,
    SUMMARY,
    remove_temps,
    still_running,
    write_atomic,
)
from demos.lab.core.results import RunSummary, read_summary
from demos.lab.core.schema import ConfigError

LOCK_WAIT_S = 10.0  # how long a finished run waits for another run's index rebuild


@dataclass
class Listed:
    """A run as the index lists it."""
    name: str                       # the run folder's name
    href: str | None                # its report.html, when it has one
    run: RunSummary                 # its summary.json
    options: list[str]              # its overrides, and what else changes it (other_options)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`, so index rebuilds never interleave.

    Waits at most LOCK_WAIT_S for another process's lock, then raises TimeoutError. The lock's
    file is a plain file or nothing: never a link or FIFO planted at its name.
    """
    from filelock import FileLock, Timeout

    with contextlib.suppress(FileNotFoundError):  # none yet: filelock makes it
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise OSError(f"{path} is not a regular file; remove it")
    try:
        held = FileLock(path, timeout=LOCK_WAIT_S).acquire()
    except Timeout:
        raise TimeoutError(f"{path.name} held by another process for {LOCK_WAIT_S:g} s") from None
    with held:
        yield


def write_index(output_dir: Path) -> list[str]:
    """outputs/index.html: every run in `output_dir`, newest first, linking to its report.

    Returns the folders skipped because their summary.json is not a run's (foreign, broken).
    """
    from demos.lab.pages.templating import render

    with locked(output_dir / INDEX_LOCK):
        for stale in output_dir.glob(".index.html.*.tmp"):  # index temps exist only under this
            if stale.is_file() and not stale.is_symlink():  # lock: these are a killed run's
                with contextlib.suppress(OSError):
                    stale.unlink()
        folders = [p for p in output_dir.iterdir() if p.is_dir() and not p.is_symlink()]
        runs, skipped = rows(folders)
        unfinished = sorted((p.name for p in folders
                             if RUN_ID.fullmatch(p.name) and not (p / SUMMARY).exists()),
                            reverse=True)
        write_atomic(output_dir / INDEX, render("index.html.j2", runs=runs, unfinished=unfinished))
    return sorted(skipped)


def rows(folders: list[Path]) -> tuple[list[Listed], list[str]]:
    """The runs among `folders`, newest first; and the folders whose summary.json is not a
    run's. A "running" run whose process is gone is "stopped", its temp files removed."""
    found, skipped = [], []
    for folder in folders:
        if not os.path.lexists(folder / SUMMARY):
            continue
        try:
            s = read_summary(folder)
        except ConfigError:  # not a run's: left out, and named; never the whole index
            skipped.append(folder.name)
            continue
        if s.status == "running" and not still_running(s.pid, s.host, s.process):
            s.status = "stopped"  # killed (SIGKILL, power) before its final summary
            remove_temps(folder)  # what it was writing when it died
        name = folder.name
        # ./: a folder named like http: stays a folder; fsencode: a name whose bytes are not
        # UTF-8 stays itself
        report = quote(os.fsencode(f"./{name}/{REPORT}")) if (folder / REPORT).exists() else None
        row = Listed(name, report, s, [*s.sets, *other_options(s)])
        run = RUN_ID.fullmatch(name)  # -1, -2: a run started in the same second
        found.append((s.started, int(run[1][1:]) if run and run[1] else 0, name, row))
    found.sort(key=lambda f: f[:3], reverse=True)
    return [r for *_, r in found], skipped


def other_options(s: RunSummary) -> list[str]:
    """What else in a run's command changes what it runs or checks: --only, --baseline, and
    --seed, --threads, --device where `sets` does not hold them (a run from before it did);
    and torchrun's processes."""
    given = {f"--{x.partition('=')[0]}" for x in s.sets}
    shown = [f"{a} {b}" for a, b in zip(s.command, s.command[1:])
             if a in ("--only", "--baseline", "--seed", "--threads", "--device") and
             a not in given]
    if s.world and isinstance(s.world.get("size"), int):
        shown.insert(0, f"torchrun: {s.world['size']} processes")
    return shown

