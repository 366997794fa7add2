"""The command line of autograd-demos: `python runner.py`, `python -m demos` and the
`autograd-demos` console script all land here, with the scenarios of demos/scenarios/."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    from demos.lab import cli
    from demos.scenarios import registry

    if prog is None:
        prog = "autograd-demos" if sys.argv and sys.argv[0].endswith("autograd-demos") else \
            "runner.py"
    return cli.main(argv, registry, prog)
