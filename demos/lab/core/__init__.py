"""The bottom layer: torch-free, nothing here imports from above. Besides its modules, `lazily`,
with which the API surfaces (demos, demos.scenario_api) load their names on first use."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any, Callable


def lazily(namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]],
                                               list[str]]:
    """A module's `__getattr__`, `__dir__` (PEP 562) and `__all__`, for its globals `namespace`,
    its names written once: the names its `if TYPE_CHECKING:` block imports (for type checkers
    and editors) are imported from there when first used, and kept; `__all__` holds them, the
    names its other imports take from this package (but those imported as _private), and its
    public functions."""
    tree = ast.parse(Path(namespace["__file__"]).read_text(encoding="utf-8"))
    lazy: dict[str, tuple[str, str]] = {}
    eager = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                   "typing.TYPE_CHECKING"):
            lazy |= {a.asname or a.name: (str(n.module), a.name)
                     for n in node.body if isinstance(n, ast.ImportFrom) for a in n.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("demos."):
            eager += [n for a in node.names if not (n := a.asname or a.name).startswith("_")]
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            eager.append(node.name)

    def getattr_(name: str) -> Any:
        if name not in lazy:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        module, attribute = lazy[name]
        try:
            value = getattr(importlib.import_module(module), attribute)
        except AttributeError:  # a module of its own: `from demos.lab.checks import support`
            value = importlib.import_module(f"{module}.{attribute}")
        namespace[name] = value
        return value

    names = [*eager, *lazy]
    return getattr_, lambda: sorted(names), names
