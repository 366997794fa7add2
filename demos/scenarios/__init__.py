"""The scenarios: every module here declares one, as `SCENARIO = Scenario(...)` at its end.

`registry()` finds them; adding a scenario is adding a module (and its configs/<name>.yaml).
Importing them is cheap: a scenario imports torch inside its `run`.
"""
from __future__ import annotations

import importlib
import pkgutil

from demos.api import Scenario

_found: dict[str, Scenario] | None = None


def registry() -> dict[str, Scenario]:
    """{name: Scenario}, ordered by document, then name."""
    global _found
    if _found is None:
        found = {}
        for info in pkgutil.iter_modules(__path__):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            scenario = getattr(module, "SCENARIO", None)
            if not isinstance(scenario, Scenario) or scenario.name != info.name:
                raise TypeError(f"{module.__file__} must end with SCENARIO = Scenario("
                                f"name='{info.name}', ...)")
            found[info.name] = scenario
        _found = dict(sorted(found.items(), key=lambda kv: (kv[1].document, kv[0])))
    return _found
