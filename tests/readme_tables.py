"""The config tables of demos/docs/config.md (linked from the README), generated from the code:
`python -m tests.readme_tables` rewrites them in place; tests/test_readme.py fails while they
differ from what the code declares."""
from __future__ import annotations

import dataclasses
import sys
import typing

import yaml

from demos.lab.core.config import RunConfig
from demos.lab.core.scenario import ScenarioConfig, Target
from demos.lab.core.schema import REQUIRED, describe
from demos.lab.core.tolerance import Tolerance
from demos.scenarios import registry
from tests.conftest import ROOT

TABLES = ROOT / "demos" / "docs" / "config.md"
BEGIN = "<!-- config tables: generated from the code by `python -m tests.readme_tables` -->"
END = "<!-- end of the generated config tables -->"


def shown(default) -> str:
    if default is None:
        return "(none)"
    if default == REQUIRED:
        return REQUIRED
    if isinstance(default, dict) or dataclasses.is_dataclass(default):
        return "`{}`"
    text = yaml.safe_dump(default, default_flow_style=True, width=10**6).strip()  # one line
    return f"`{text.removesuffix(chr(10) + '...').strip()}`"


def cell(text: str) -> str:
    return text.replace("|", "&#124;").replace("*", "\\*")


def table(cls, skip=()) -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, type_name, default, help in describe(cls):
        if name not in skip:
            rows.append(f"| `{name}` | {cell(type_name)} | {shown(default)} | {cell(help)} |")
    return "\n".join(rows)


def generate() -> str:
    parts = [BEGIN, "", "**Top level**", "", table(RunConfig), "",
             "**Every entry**", "", table(ScenarioConfig), "",
             "**Targets** (under `expect.params` and `expect.metrics`): at least one of `value`, "
             "`min`, `max`.", "", table(Target), "",
             "**Tolerances** (under `tolerance`, by key `all`, `metrics`, `params`, "
             "`metrics.<name>` or `params.<name>`; each the word `exact` or these fields; used by "
             "`--baseline`; see \"Reproducible\"):", "",
             table(Tolerance)]
    base = {f.name for f in dataclasses.fields(ScenarioConfig)}
    for name, s in registry().items():
        reports = [f"params `{' '.join(s.params)}`"] if s.params else []
        reports += [f"metrics `{' '.join(s.metrics)}`"] if s.metrics else []
        parts += ["", f"**`{name}`** (document {s.document}): {'; '.join(reports) or 'no metrics'}"
                  f"; writes {' '.join(f'`{f}`' for f in s.files)}"
                  + (f" (and, when its config asks, {' '.join(f'`{f}`' for f in s.optional_files)})"
                     if s.optional_files else ""), "",
                  table(s.config, skip=base)]
        for key, tp in typing.get_type_hints(s.config).items():  # typed items, e.g. inputs
            inner = typing.get_args(tp)
            if typing.get_origin(tp) is list and inner and dataclasses.is_dataclass(inner[0]):
                parts += ["", f"Each of its `{key}`:", "", table(inner[0])]
    parts += ["", END]
    return "\n".join(parts)


def current(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


if __name__ == "__main__":
    text = TABLES.read_text()
    new = text.replace(current(text), generate())
    TABLES.write_text(new)
    print(f"{TABLES.relative_to(ROOT)}: config tables",
          "updated" if new != text else "already current", file=sys.stderr)
