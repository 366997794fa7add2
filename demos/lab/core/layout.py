"""The run folder's layout: its files' names, how a run folder is named and made, and whether
a run that says it is running still is (its summary.json is read by
demos.lab.core.results.read_summary). Torch-free.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from demos.lab.core.schema import ConfigError

RUN_ID = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?")  # a run folder's name: its start
# a name that is a folder's (an entry's id, --run-name, a graph's name): safe on every system
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
# what a run folder holds beside one folder per entry (demos/docs/output.md)
SUMMARY, REPORT, CONFIG, LOG = "summary.json", "report.html", "config.yaml", "run.log"
INDEX = "index.html"  # beside the run folders: the runs' list
INDEX_LOCK = ".index.lock"  # beside it: the lock under which runs rebuild it one at a time
# beside them, under --watch: the page that shows the newest run's report, and its state
WATCH_PAGE, WATCH_STATE = "watch.html", "watch.js"
# in an entry's folder: what the runner writes for it (its scenario declares the rest)
METRICS, LOSS_PLOT, EXPLAIN, BACKWARD = "metrics.csv", "loss.png", "explain.txt", "backward.json"
ENSEMBLE = "ensemble.json"  # in an ensemble's folder (--save-baseline --ensemble)
GRADS = "_grads"  # <graph>_grads.gv/.pdf/.svg: a graph with its traced gradients in the nodes
STEPS_GIF = "_steps.gif"  # <graph>_steps.gif: its stepper, a frame per step (stepper_gifs: true)
RANK_LOG = re.compile(r"rank\d+\.log")  # under torchrun: the log of each rank but 0
RESERVED = {CONFIG, LOG, SUMMARY, REPORT, INDEX}  # names no entry may take for its folder


def rank_log_name(rank: int) -> str:
    return f"rank{rank}.log"


def reserved(entry_id: str) -> bool:
    """Whether an entry's folder would take the name of a file the run writes."""
    return entry_id in RESERVED or bool(RANK_LOG.fullmatch(entry_id))


# the machine's own PID namespace (the kernel's PROC_PID_INIT_INO): it sees every process
INIT_PID_NS = "pid:[4026531836]"


@dataclass
class Process:
    """A process's identity, which its PID alone is not (PIDs are reused, and a container's
    main process is PID 1 of its own namespace)."""
    start: int  # when it started, in clock ticks since the machine booted
    boot: str  # that boot's id: the ticks start again at each boot
    ns: str  # its PID namespace, in which its PID is counted ("pid:[4026531836]")


def identity(pid: int | str = "self") -> Process | None:
    """Process `pid`'s identity, read from /proc; None where there is none (not Linux), or no
    such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return Process(int(stat.rpartition(")")[2].split()[19]), boot,
                       os.readlink(f"/proc/{pid}/ns/pid"))
    except (OSError, ValueError, IndexError):
        return None


def still_running(pid: int | None, host: str | None, process: Process | None = None) -> bool:
    """Whether the process that wrote a "running" summary (its `pid`, `host` and `process`)
    is alive: the same PID with the same start, in the same PID namespace. True where this
    host cannot tell (another host; a namespace it cannot see)."""
    if host != socket.gethostname() or pid is None or not 0 < pid < 2**31:
        return True  # cannot tell from here
    mine = identity()
    if process is None or mine is None:  # an older run's summary, or no /proc: the PID alone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except (OSError, OverflowError):
            return True
        return True
    if process.boot != mine.boot:
        return False  # the machine has restarted since
    if process.ns == mine.ns:
        return identity(pid) == process
    for other in filter(str.isdigit, os.listdir("/proc")):  # its namespace, seen from outside
        if identity(other) == process and nspid(other) == pid:
            return True
    return mine.ns != INIT_PID_NS  # gone; or this namespace cannot see that one


def nspid(pid: str) -> int | None:
    """Process `pid`'s PID in its own namespace (the last of /proc/<pid>/status's NSpid)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    return None


class NoRunFolder(ConfigError):
    """The output folder can take no run folder (it cannot be made or written, the name is
    taken): no edit of a config mends that."""


def make_run_dir(output_dir: Path, now: dt.datetime, prefix: str = "") -> Path:
    """A new folder named `prefix` + the start time; never an existing one (-1, -2, ... if
    taken). Run folders have no prefix; an ensemble's has its own."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        base = prefix + now.strftime("%Y-%m-%d_%H-%M-%S")
        for i in range(10_000):
            path = output_dir / (base if i == 0 else f"{base}-{i}")
            with contextlib.suppress(FileExistsError):
                path.mkdir()
                return path
    except OSError as e:
        raise NoRunFolder(f"--output-dir {output_dir}: cannot create the run folder: "
                          f"{e.strerror or e}") from None
    raise NoRunFolder(f"--output-dir {output_dir}: too many runs started at {base}")


def check_output_dir(path: str) -> None:
    """--output-dir before any work: never the empty path (an unset shell variable), a run's
    folder (summary.json and run.log: another project's summary.json alone is no run's) nor
    anywhere inside one."""
    if path == "":
        raise ConfigError("--output-dir: an empty path; name a folder (the default is outputs)")
    try:
        folder = Path(path).resolve()  # through links and `..`: where it really is
    except (OSError, RuntimeError) as e:  # a loop of links (RuntimeError before Python 3.13)
        raise ConfigError(f"--output-dir {path}: {e}") from None
    for place in (folder, *folder.parents):  # at any depth; a run's folder holds both
        if (place / SUMMARY).is_file() and (place / LOG).is_file():
            raise ConfigError(f"--output-dir {path}: {'is' if place == folder else 'is inside'} "
                              f"a run's folder ({place / SUMMARY} exists); the output folder "
                              f"holds run folders, it is not one")


def make_named_dir(output_dir: Path, name: str, kind: str = "run") -> Path:
    """The `kind` folder (run, ensemble) `name` in `output_dir` (--run-name); never an
    existing one, nor a name the output folder keeps for its own files (compared without case:
    some file systems do not tell INDEX.HTML apart)."""
    low, refused = name.lower(), f"--run-name {name}: not a {kind} folder's name"
    if low in (INDEX, WATCH_PAGE, WATCH_STATE) or low.startswith("."):
        raise ConfigError(f"{refused}: the output folder's own {INDEX}, {WATCH_PAGE}, "
                          f"{WATCH_STATE} and dot files take such names")
    if low.startswith("ensemble_") and kind != "ensemble":
        raise ConfigError(f"{refused}: names that start with ensemble_ mark an ensemble's folder")
    path = output_dir / name
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        path.mkdir()
    except FileExistsError:
        raise NoRunFolder(f"--run-name {name}: {path} already exists") from None
    except OSError as e:
        raise NoRunFolder(f"--output-dir {output_dir}: cannot create {name}: "
                          f"{e.strerror or e}") from None
    return path
