"""The run folder's layout: names and discovery.

How a run folder is named, and how another process's folder is read without trusting it:
its summary.json (or a sweep's sweep.json, a comparison's compare.json) may be anything a
user or a killed run left there. Torch-free.
"""
from __future__ import annotations

import json
import os
import re
import socket
import stat
from pathlib import Path
from typing import Any

RUN_ID = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?")  # a run folder's name: its start
MAX_SUMMARY_BYTES = 10 << 20  # a summary larger than this is not one of ours


def read_run(summary_path: Path) -> dict[str, Any] | None:
    """A sibling run's summary.json as the index needs it, or None if it is not one (a link,
    a FIFO, a device, a file over 10 MB, or not a run's JSON); never blocks."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(summary_path, flags)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SUMMARY_BYTES:
                return None
            s = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return None
    if not isinstance(s, dict) or not isinstance(s.get("scenarios", []), list) or \
            not all(isinstance(e, dict) for e in s.get("scenarios", [])):
        return None
    return s


def still_running(s: dict[str, Any]) -> bool:
    """Whether the process that wrote a "running" summary is alive (when it ran on this host)."""
    pid = s.get("pid")
    if s.get("host") != socket.gethostname() or not isinstance(pid, int) or \
            not 0 < pid < 2**31:
        return True  # cannot tell from here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True
