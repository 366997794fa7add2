"""What the console shows, and run.log: the runner's lines on stdout, warnings on stderr,
everything (scenario detail, checks, tracebacks) in run.log."""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sys
from pathlib import Path
from typing import Callable

from demos.lab.core.files import LOG
from demos.lab.core.results import Check, Diagnosis, EntrySummary
from demos.lab.core.scenario import FINAL_LOSS

RUN_LOGGER = "demos.run"


def runner_lines(record: logging.LogRecord) -> bool:
    """The console shows the runner's own lines; scenarios' detail goes to run.log only."""
    return record.name == RUN_LOGGER and record.levelno < logging.WARNING


# terminal control characters (an escape sequence in a user's error message) are shown, not
# obeyed; newlines and tabs stay
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def shown(text: str, stream: object) -> str:
    """`text` as a console shows it: control characters (an escape sequence in a run folder's
    name, a metric's name, a user's message) escaped, not obeyed; text that `stream`'s encoding
    cannot hold (± under LC_ALL=POSIX, a path whose bytes are not UTF-8) escaped too."""
    text = CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def say(text: str = "", *, err: bool = False) -> None:
    """One line of a command's own output (an ensemble's, a baseline's) on stdout, or stderr
    with `err`, as `shown`. A reader gone away (`| head`) or a full disk stops the output, not
    the command (see `silence`)."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    try:
        stream.write(shown(text, stream) + "\n")
        stream.flush()
    except (OSError, ValueError) as e:
        silence(stream, e)


def silence(stream: object, why: BaseException | None = None) -> None:
    """From now on, `stream`'s output goes nowhere: its descriptor is pointed at the null
    device, so that later writes and the interpreter's last flush succeed. A failure other
    than a reader gone away is said once on stderr."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())  # type: ignore[attr-defined]
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(why, OSError) and why.errno != errno.EPIPE and stream is not sys.stderr \
            and sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"warning: cannot write the output ({why.strerror}); "
                             f"the rest of it is dropped\n")
            sys.stderr.flush()


def ensure_streams() -> None:
    """Standard streams that the caller closed (`>&-`, `2>&-`) become the null device, before
    anything opens a file that could take their descriptor: a run then ends as it would have
    with its output thrown away, its exit code its own."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


class ConsoleHandler(logging.StreamHandler):
    """A console stream whose reader may go away (`| head`): the run goes on, quietly.
    Text the console cannot encode (a path whose bytes are not UTF-8) is shown escaped.
    Records logged with extra={"console": False} (tracebacks, the run's waits): run.log only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "console", True) and bool(super().filter(record))

    def format(self, record: logging.LogRecord) -> str:
        return shown(super().format(record), self.stream)

    def handleError(self, record: logging.LogRecord) -> None:
        why = sys.exc_info()[1]
        if isinstance(why, OSError):  # a closed pipe or terminal (SIGHUP), a full disk
            silence(self.stream, why)
            return
        super().handleError(record)


class LogFile(logging.FileHandler):
    """run.log; when the disk is full (or the file at its size limit), its last line says so,
    and the run goes on without it, rather than printing logging's own error reports on the
    console."""
    ended = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.ended:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        why = sys.exc_info()[1]
        if not isinstance(why, OSError):
            return super().handleError(record)
        if self.ended:
            return
        self.ended = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.stream.close()  # type: ignore[union-attr]  # what it could not write is dropped
        line = f"run.log stops here: {why.strerror or why}; the console has the rest\n"
        with contextlib.suppress(OSError):  # over its last lines, in room the file holds
            fd = os.open(self.baseFilename, os.O_RDWR)
            try:
                end = max(0, os.fstat(fd).st_size - len(line.encode()))
                start = max(0, end - 4096)
                end = start + os.pread(fd, end - start, start).rfind(b"\n") + 1  # a line's end
                os.pwrite(fd, line.encode(), end)
                os.ftruncate(fd, end + len(line.encode()))
            finally:
                os.close(fd)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # the last lines could not be flushed to
            super().close()  # a full disk, or the file was closed where its log ended


def open_log(run_dir: Path) -> tuple[logging.Logger, Callable[[], None]]:
    """The run's logger (console and run.log) and a function that closes it again."""
    root = logging.getLogger("demos")
    root.setLevel(logging.DEBUG)
    root.propagate = False
    out = ConsoleHandler(sys.stdout)
    out.addFilter(runner_lines)
    out.setLevel(logging.INFO)
    err = ConsoleHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.setFormatter(logging.Formatter("warning: %(message)s"))
    log_file = LogFile(run_dir / LOG, encoding="utf-8",
                       errors="backslashreplace")  # paths that are not UTF-8
    log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handlers = [out, err, log_file]
    # a run inside another's (run() from a Function): the outer run's console and run.log hear
    # none of this one's lines (a handler of the user's on the logger stays)
    outer = [h for h in root.handlers if isinstance(h, (ConsoleHandler, LogFile))]
    for kept in outer:
        root.removeHandler(kept)
    for h in handlers:
        root.addHandler(h)

    def close() -> None:
        for h in handlers:
            root.removeHandler(h)
            h.close()
        for kept in outer:
            root.addHandler(kept)

    return logging.getLogger(RUN_LOGGER), close


def entry_lines(e: EntrySummary, width: int) -> list[str]:
    """An entry's result: one line, then one per failed check or error."""
    steps = f"{e.steps} steps in {e.timing.train_s:.2f} s" if e.timing else ""
    loss = e.metrics.get(FINAL_LOSS)
    passed = sum(bool(c.passed) for c in e.counted)
    lines = [f"{e.status.upper():<11} {e.id:<{width}}  checks {passed}/{len(e.counted)}  "
             f"{steps}{f'  final_loss {loss:.6g}' if loss is not None else ''}".rstrip()]
    lines += failure_lines(e.failures)
    lines += [f"            TORCH DIFFERS {function} {row}: {r.detail}"
              for function, rows in e.support.items() for row, r in rows.items()
              if r.status == "differs"]  # torch's own disagreement: said, not failed
    unlike = [c for c in e.checks if c.passed is None and "(expect.written_for)" in c.detail]
    if unlike:  # a changed setting: exploring, said once, not a failure
        why = unlike[0].detail.split("not evaluated: ", 1)[-1].split(" (got ", 1)[0]
        lines.append(f"            NOT EVALUATED {len(unlike)} expect target(s): {why}")
    if e.status == "error":
        lines.append(f"            ERROR {e.error} (details in run.log)")
    return lines


# the exception a check's detail ends with (one_line's), not a finding of the check
STOPPED = re.compile(r"\b(?!GradcheckError\b)[A-Z]\w*(Error|Exception|Exit|Interrupt)\b.*")


def mistakes(checks: list[Check]) -> dict[tuple, tuple[list[Check], Diagnosis]]:
    """The checks' diagnoses by mistake (an output and input's gradient, tangent or second
    derivative: several checks may find one, each in words of its own): the checks that found
    it, and the diagnosis to say, the last one's (a reference's words are exact), or "not
    reentrant" where a check found that (the values of a backward that varies say little)."""
    found: dict[tuple, tuple[list[Check], Diagnosis]] = {}
    for c in checks:
        if c.diagnosis:
            cs, best = found.get(c.diagnosis.mistake, ([], c.diagnosis))
            found[c.diagnosis.mistake] = (
                [*cs, c], best if best.kind == "not reentrant" else c.diagnosis)
    return found


def failure_lines(failures: list[Check]) -> list[str]:
    """A FAIL line per failed check, one for the checks the same exception stopped (naming
    them); one WHY per mistake (`mistakes`), under the last of the checks in a row that
    found it."""
    groups: dict[object, list[Check]] = {}
    for c in failures:
        stopped = None if c.diagnosis else STOPPED.search(c.detail)
        groups.setdefault(stopped[0] if stopped else id(c), []).append(c)
    found = mistakes(failures)
    keys: list[tuple | None] = [cs[0].diagnosis.mistake if cs[0].diagnosis else None
                                for cs in groups.values()] + [None]
    lines, said = [], set()
    for i, (key, cs) in enumerate(groups.items()):
        lines.append(f"            FAIL {cs[0].name}: {cs[0].detail}" if len(cs) == 1 else
                     f"            FAIL {', '.join(c.name for c in cs)} (one error stopped "
                     f"them): {key}")
        this = keys[i]
        if this and this not in said and keys[i + 1] != this:
            said.add(this)
            lines.append(f"            WHY {found[this][1].says}")
    return lines
