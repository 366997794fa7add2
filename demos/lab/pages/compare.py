"""compare.html: run folders side by side (templates/compare.html.j2).

demos.lab.comparing.side_by_side compares the runs and hands this page plain data (a Page);
here they become the runs' table, the config diffs, a table of values per entry and the
overlaid loss curves.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from demos.lab.core import fingerprint as fp
from demos.lab.core.layout import REPORT
from demos.lab.pages.templating import render as render_template

FACTS = ["config", "torch", "device", "seed", "threads", "sets", "kernels"]  # the runs' table


@dataclass
class Column:
    """A run as the page shows it."""
    label: str
    dir: Path
    info: dict[str, Any]  # from its summary.json: status, config, torch, device, seed, ...
    config: str           # its config.yaml's text


@dataclass
class Cell:
    """A value of a run; `beyond`: why it is beyond tolerance of the first run's."""
    value: Any
    beyond: str | None = None


@dataclass
class EntryTable:
    """One entry's values, a column per run that has it."""
    entry: str
    labels: list[str]
    statuses: list[str]
    rows: dict[str, list[Cell]]  # "metrics.loss" -> a cell per run
    only: list[str] | None       # the runs that have it, when not all do


@dataclass
class Page:
    """Everything compare.html shows."""
    agree: bool
    verdict: str
    runs: list[Column]
    machines: list[str]           # how each run's machine differs from the first's
    tables: list[EntryTable]
    plots: dict[str, str]         # entry -> its overlaid loss curves' file name
    unfinished: list[str] = field(default_factory=list)  # runs still running, stopped, ...
    notes: list[str] = field(default_factory=list)  # corrupt summaries, a baseline unused


def render(page: Page, out: Path, part: str | None = None) -> str:
    """The HTML of compare.html, in the folder `out` (`part`: one block of it)."""
    return render_template("compare.html.j2", part, page=page,
                           word="agree" if page.agree else "differ", facts=FACTS,
                           runs=[run_row(r, out) for r in page.runs],
                           diffs=config_diffs(page.runs))


def run_row(r: Column, out: Path) -> dict[str, Any]:
    """Where, how and with what a run ran; its report's link relative to `out`."""
    info = dict(r.info)
    info["kernels"] = fp.describe(info["fingerprint"], ("capability", "cpu", "env")) \
        if isinstance(info["fingerprint"], dict) else None
    if isinstance(info["sets"], list):  # the run's --set overrides (newer runs)
        info["sets"] = " ".join(map(str, info["sets"])) or None
    return {"label": r.label, "href": report_href(r.dir, out), "status": info["status"],
            "facts": [info[k] for k in FACTS]}


def report_href(run_dir: Path, out: Path) -> str | None:
    """The run's report.html by a path relative to `out`; None when it has none."""
    report = run_dir / REPORT
    if not report.is_file():
        return None
    try:
        return quote(os.path.relpath(report.resolve(), out.resolve()))
    except ValueError:  # another drive (Windows): no relative path exists
        return report.resolve().as_uri()


def config_diffs(runs: list[Column]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each run's config.yaml against the first's, as a unified diff: (label, lines), each
    line with its kind ("add", "del", "hunk", or "" for context and the file names); no lines
    when identical."""
    def lines(text: str) -> list[str]:  # the header comment names the run: always differs
        return [line for line in text.splitlines(keepends=True) if not line.startswith("#")]

    ref, out = runs[0], []
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    for r in runs[1:]:
        diff = difflib.unified_diff(lines(ref.config), lines(r.config),
                                    f"{ref.label}/config.yaml", f"{r.label}/config.yaml")
        out.append((r.label, [("" if line[:3] in ("+++", "---") else kinds.get(line[:1], ""),
                               line) for line in diff]))
    return out
