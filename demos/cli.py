"""The command line of autograd-demos: `python runner.py`, `python -m demos` and the
`autograd-demos` console script all land here, with the scenarios of demos/scenarios/."""
from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def main(argv: list[str] | None = None, prog: str = "runner.py") -> int:
    """Run the command line `argv` (default: sys.argv[1:]); return the exit code."""
    from demos.lab.core.signals import StartUp, StopRequest, signal_handler

    stop = StopRequest()
    with signal_handler(StartUp(stop)):  # from the first line
        try:
            from demos.lab.runner import cli
            from demos.scenarios import registry
        except KeyboardInterrupt:
            print("\ninterrupted before the run started", file=sys.stderr)
            return 130
        return cli.main(argv, registry, prog, stop)


def entry_point(prog: str = "autograd-demos") -> NoReturn:
    """main(), then exit without tearing the interpreter down.

    By the end of a run, torch has lazily loaded its compiler stack (torch.optim and explicit
    backward gradients pull in torch._dynamo and sympy); unloading all that takes about a
    second and does nothing for a run whose files are written and closed. So: flush, run the
    exit handlers (the drawing helper finishes; coverage.py saves its data), and leave.
    """
    from demos.lab.pages import drawing as artifacts
    from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

    from demos.lab.core.signals import StartUp, StopRequest, signal_handler

    code = main(prog=prog)
    if code not in (EXIT_OK, EXIT_FAILED):  # no run, or an interrupted one: nothing to draw
        artifacts.kill()
    late = StopRequest()
    late.deferred = True  # noted only: the exit handlers finish the helper's drawing
    with signal_handler(StartUp(late)):  # a signal now: the run is whole; say so, exit 130
        atexit._run_exitfuncs()
    if late.requested and code != EXIT_INTERRUPTED:
        print("\ninterrupted after the run finished", file=sys.stderr)
        code = EXIT_INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away (| head), or closed
            pass
    os._exit(code)
