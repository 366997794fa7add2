"""What the console shows, and run.log: the runner's lines on stdout, warnings on stderr,
everything (scenario detail, checks, tracebacks) in run.log."""
from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Callable

from demos.lab.core.layout import LOG
from demos.lab.core.results import EntrySummary, RunSummary
from demos.lab.core.scenario import FINAL_LOSS

RUN_LOGGER = "demos.run"


class ConsoleFilter(logging.Filter):
    """The console shows the runner's own lines; scenarios' detail goes to run.log only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == RUN_LOGGER and record.levelno < logging.WARNING


class NotForConsole(logging.Filter):
    """Records logged with extra={"console": False} (tracebacks) go to run.log only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "console", True)


# terminal control characters (an escape sequence in a user's error message) are shown, not
# obeyed; newlines and tabs stay
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class ConsoleHandler(logging.StreamHandler):
    """A console stream whose reader may go away (`| head`): the run goes on, quietly.
    Text the console cannot encode (a path whose bytes are not UTF-8) is shown escaped."""

    def format(self, record: logging.LogRecord) -> str:
        text = CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", super().format(record))
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        return text.encode(encoding, "backslashreplace").decode(encoding, "replace")

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a closed pipe or terminal (SIGHUP)
            return
        super().handleError(record)


class LogFile(logging.FileHandler):
    """run.log; when the disk is full, the log goes on without it rather than printing
    logging's own error reports on the console."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handleError(record)

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # the last lines could not be flushed to a full disk
            pass


def open_log(run_dir: Path) -> tuple[logging.Logger, Callable[[], None]]:
    """The run's logger (console and run.log) and a function that closes it again."""
    root = logging.getLogger("demos")
    root.setLevel(logging.DEBUG)
    root.propagate = False
    out = ConsoleHandler(sys.stdout)
    out.addFilter(ConsoleFilter())
    out.setLevel(logging.INFO)
    err = ConsoleHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.addFilter(NotForConsole())
    err.setFormatter(logging.Formatter("warning: %(message)s"))
    log_file = LogFile(run_dir / LOG, encoding="utf-8",
                       errors="backslashreplace")  # paths that are not UTF-8
    log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handlers = [out, err, log_file]
    for h in handlers:
        root.addHandler(h)

    def close() -> None:
        for h in handlers:
            root.removeHandler(h)
            h.close()

    return logging.getLogger(RUN_LOGGER), close


def entry_lines(e: EntrySummary, width: int) -> list[str]:
    """An entry's result: one line, then one per failed check or error."""
    steps = ""
    if e.timing:
        resumed = f" (resumed at {e.steps - e.timing.steps})" if e.timing.steps < e.steps else ""
        steps = f"{e.timing.steps} steps{resumed} in {e.timing.train_s:.2f} s"
    loss = e.metrics.get(FINAL_LOSS)
    passed = sum(bool(c.passed) for c in e.counted)
    lines = [f"{e.status.upper():<11} {e.id:<{width}}  checks {passed}/{len(e.counted)}  "
             f"{steps}{f'  final_loss {loss:.6g}' if loss is not None else ''}".rstrip()]
    lines += [f"            FAIL {c.name}: {c.detail}" for c in e.failures]
    unlike = [c for c in e.checks if c.passed is None and "(expect.written_for)" in c.detail]
    if unlike:  # a changed setting: exploring, said once, not a failure
        why = unlike[0].detail.split("not evaluated: ", 1)[-1].split(" (got ", 1)[0]
        lines.append(f"            NOT EVALUATED {len(unlike)} expect target(s): {why}")
    if e.status == "error":
        lines.append(f"            ERROR {e.error} (details in run.log)")
    return lines


def run_line(s: RunSummary, planned: int, run_dir: Path) -> str:
    return (f"{s.status.upper()}: {s.passed} of {planned} scenarios passed; results in "
            f"{run_dir}")
