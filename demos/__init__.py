"""autograd-demos: the classic PyTorch autograd examples as a lab you can run, see and check.

The Python API (demos.python_api), loaded on first use so that `import demos` stays cheap:

    from demos import run
    r = run("my_exp")          # as `python runner.py my_exp`; r.passed, r.folder, r["my_exp"]
    grade("ex/exercise.py")    # as `autograd-demos grade ex/exercise.py`; .score, .tests
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from demos.lab.core import lazily as _lazily

__version__ = "0.1.0"

if TYPE_CHECKING:  # the Python API's names, from demos.python_api when first used
    from demos.python_api import (
        ConfigError,
        EntryResult,
        GradeResult,
        GraphView,
        RunInterrupted,
        RunResult,
        SupportView,
        Ungradable,
        check_function,
        exercise,
        forward_mode,
        grade,
        graph,
        load,
        run,
    )

__getattr__, __dir__, __all__ = _lazily(globals())
