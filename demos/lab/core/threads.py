"""The thread policy: how many CPU threads torch gets when a config says `threads: auto`."""
from __future__ import annotations

import os


def auto_threads(cores: int) -> int:
    """`threads: auto`: 1 on up to 2 cores (two threads wait on each other as soon as anything
    else wants a core), else half the cores, at most 8 (the scenarios' tensors are small)."""
    return 1 if cores <= 2 else min(8, cores // 2)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1
