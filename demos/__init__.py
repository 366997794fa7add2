"""autograd-demos: the classic PyTorch autograd examples as a lab you can run, see and check.

The Python API (demos.python_api), loaded on first use so that `import demos` stays cheap:

    from demos import run
    r = run("my_exp")          # as `python runner.py my_exp`; r.passed, r.folder, r["my_exp"]
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"


if TYPE_CHECKING:
    from demos.python_api import (
        ConfigError,
        EntryResult,
        GraphView,
        RunInterrupted,
        RunResult,
        SupportView,
        check_function,
        forward_mode,
        graph,
        load,
        run,
    )

__all__ = ["run", "check_function", "graph", "forward_mode", "load", "ConfigError",
           "RunInterrupted", "RunResult", "EntryResult", "GraphView", "SupportView"]


def __getattr__(name: str) -> Any:
    """A name of __all__, from demos.python_api, imported now (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("demos.python_api"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
