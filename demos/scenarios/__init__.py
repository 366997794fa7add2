"""The scenarios: every module here declares one, as `SCENARIO = Scenario(...)` at its end.

`registry()` finds them; adding a scenario is adding a module (and its configs/<name>.yaml).
A scenario file may import torch at its top: the registry imports a module only when its
scenario is asked for, and reads the names and descriptions that --list shows from the files.
"""
from __future__ import annotations

from pathlib import Path

from demos.scenario_api import Scenarios

_found: Scenarios | None = None


def registry() -> Scenarios:
    """{name: Scenario}, ordered by document, then name; each imported when first asked for."""
    global _found
    if _found is None:
        _found = Scenarios(__name__, Path(__file__).parent)
    return _found
