"""The run folder's files: their names, how a run folder is named and made, and whether a run
that says it is running still is (its summary.json is read by results.read_summary); and how a
file is written there, whole (temp file + rename) or not at all, and read, bounded. Torch-free.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import math
import os
import re
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

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


# -- writing and reading files ------------------------------------------------------------

def _file_mode() -> int:
    """What open() would give a new file: 0o666 less the umask (mkstemp makes them 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


# save_atomic's temp names: mkstemp puts 8 random characters from [a-z0-9_] between prefix and
# suffix; the second form, .XXXXXXXX.<name>, is what plots were saved under before
TEMP_NAME = re.compile(r"\.(.+\.[a-z0-9_]{8}\.tmp|[a-z0-9_]{8}\..+)")


def remove_temps(folder: Path) -> list[Path]:
    """Remove the temp files that `save_atomic` left in `folder` (and below) when their
    process was killed outright. Only for a folder whose writer is known gone."""
    removed = []
    for top, _, names in os.walk(folder):  # never into a linked folder
        for name in names:
            path = Path(top) / name
            if TEMP_NAME.fullmatch(name) and path.is_file() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` with `save_atomic`; text as UTF-8, where "replace" shows a path
    whose bytes are not UTF-8 as "?" rather than failing."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data

    def write(tmp: Path) -> None:  # the temp file itself, never a link swapped in for it
        with open(os.open(tmp, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)), "wb") as f:
            f.write(raw)
    save_atomic(path, write)


def save_atomic(path: Path, save: Callable[[Path], object]) -> None:
    """Let `save(tmp)` write the file, then rename it over `path`. The temp file, in the same
    folder, is created exclusively under an unpredictable name ending in .tmp (so `save` names
    its format: savefig(tmp, format="png")), and removed again if anything fails."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        save(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def strict(value: Any, not_finite: Callable[[float], Any] = str) -> Any:
    """`value` with every non-finite float as the string "nan", "inf" or "-inf" (or as what
    `not_finite` makes of it: summary.json's null, see results.finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return not_finite(value)
    if isinstance(value, dict):
        return {k: strict(v, not_finite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v, not_finite) for v in value]
    return value


def dumps(data: Any, compact: bool = False) -> str:
    """The one JSON writer: strict JSON, which every reader takes (a non-finite float is
    written as a string, see `strict`); indented, or `compact`; with a closing newline."""
    return json.dumps(strict(data), allow_nan=False, indent=None if compact else 2,
                      separators=(",", ":") if compact else None) + "\n"


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, dumps(data))


def overwrite(path: Path, text: str) -> None:
    """Rewrite an existing file in place: the last resort on a full disk, where a temp file
    has no room but the file's own space can take the new text. The text is padded with
    blanks to the file's size and written in one call, never truncating first, so there is
    no moment when the file is empty. For JSON, trailing blanks are still valid."""
    data = text.encode("utf-8", "replace")
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        if len(data) > size:
            raise OSError(f"{path}: {len(data)} bytes do not fit in the {size} it holds")
        f.write(data.ljust(size))  # in the file's own blocks: needs no new space
        f.flush()
        os.fsync(f.fileno())


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows of {column: value} as CSV, floats in full; columns in order of first appearance."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


class NotReadable(Exception):
    """A file that is not a regular file, is too big, or cannot be read; the message says which
    in a few words, for the caller to name the file and the option it came from."""


def read_bytes(path: Path | str, limit: int, links: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; never blocks (a FIFO, a device, a
    link to /dev/zero is refused before any read) and never reads more than `limit` + 1 bytes.
    Links to regular files are followed, unless `links` is False (then a link is not readable)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if not links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise NotReadable("no such file") from None
    except OSError as e:
        raise NotReadable(f"cannot read: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise NotReadable("is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise NotReadable("not a regular file (a FIFO, a device or a socket)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)  # buffered: reads until it has limit + 1 bytes or the end
    except OSError as e:
        raise NotReadable(f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotReadable(f"larger than {limit >> 10} KiB")
    return data
