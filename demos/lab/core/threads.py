"""The thread policy: how many CPU threads torch gets when a config says `threads: auto`; and the
priority of the processes beside the run."""
from __future__ import annotations

import os

# the checks process beside the run runs at this much lower a priority: where it competes with
# the run for a core, the run's own work goes first, and its own is only needed at the run's
# end (measured: demos/docs/performance.md)
BESIDE_NICE = 10


def lower_priority() -> None:
    """In a process beside the run: BESIDE_NICE below its parent (where the system lets it)."""
    try:
        os.nice(BESIDE_NICE)
    except (OSError, AttributeError):  # not allowed, or no os.nice (Windows)
        pass


def auto_threads(cores: int) -> int:
    """`threads: auto`: 1 on up to 2 cores (two threads wait on each other as soon as anything
    else wants a core), else half the cores, at most 8 (the scenarios' tensors are small)."""
    return 1 if cores <= 2 else min(8, cores // 2)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1
