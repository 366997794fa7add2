"""The command line of autograd-demos: `python runner.py`, `python -m demos` and the
`autograd-demos` console script all land here, with the scenarios of demos/scenarios/."""
from __future__ import annotations

import sys
from typing import NoReturn


def main(argv: list[str] | None = None, prog: str = "runner.py") -> int:
    """Run the command line `argv` (default: sys.argv[1:]); return the exit code."""
    from demos.lab.core.console import ensure_streams

    ensure_streams()  # a closed stdout or stderr (>&-) is the null device, not a crash
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["exercise"], ["grade"]):  # the exercise kit's words (demos/exercises/)
        from demos.exercises.cli import main as kit
        return kit(argv, prog)
    from demos.lab.runner.start import main as run  # light: its handler is its first work

    return run(argv, registry, prog)


def registry():
    """The scenarios of demos/scenarios/, imported when first asked for."""
    from demos.scenarios import registry

    return registry()


def entry_point(prog: str = "autograd-demos") -> NoReturn:
    """main(), then exit without tearing the interpreter down (see demos.lab.core.signals.leave)."""
    from demos.lab.core.signals import leave

    leave(main(prog=prog))
