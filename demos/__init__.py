"""autograd-demos: the classic PyTorch autograd examples as a lab you can run, see and check.

The Python API (demos.python_api), loaded on first use so that `import demos` stays cheap:

    from demos import run
    r = run("my_exp")          # as `python runner.py my_exp`; r.passed, r.folder, r["my_exp"]
    grade("ex/exercise.py")    # as `autograd-demos grade ex/exercise.py`; .score, .tests
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Mapping

__version__ = "0.1.0"


if TYPE_CHECKING:
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

__all__ = ["run", "check_function", "graph", "forward_mode", "load", "exercise", "grade",
           "ConfigError", "Ungradable", "RunInterrupted", "RunResult", "EntryResult",
           "GraphView", "SupportView", "GradeResult"]


def lazily(namespace: dict[str, Any], names: Mapping[str, tuple[str, str | None]]
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's `__getattr__` and `__dir__` (PEP 562) for its globals `namespace`: each of
    `names`, {name: (module, attribute)} (attribute None: the module itself), imported when
    first used and kept; dir() lists __all__."""
    def getattr_(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        module, attribute = names[name]
        value = importlib.import_module(module)
        namespace[name] = value if attribute is None else getattr(value, attribute)
        return namespace[name]
    return getattr_, lambda: sorted(namespace["__all__"])


# the Python API's names, from demos.python_api when first used
__getattr__, __dir__ = lazily(globals(), {name: ("demos.python_api", name) for name in __all__})
