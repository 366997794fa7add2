"""The run report: report.html in the run folder, one self-contained file (demos/docs/output.md,
"The pages"). This module gathers what the page shows (files, plots, graphs, backward traces);
the template, templates/report.html.j2, lays it out, escaped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from demos.lab.core import machine
from demos.lab.core.files import BACKWARD, EXPLAIN, GRADS, LOSS_PLOT, RANK_LOG, REPORT, write_atomic
from demos.lab.core.results import EntrySummary, Row, RunSummary

if TYPE_CHECKING:
    from markupsafe import Markup


@dataclass
class Graph:
    """An autograd graph of an entry, as graphviz drew it (<stem>.svg)."""
    stem: str
    target: str                     # the element id its zoom buttons act on
    links: list[str]                # its .pdf, .svg, .gv beside it
    svg: Markup | None              # inline; None: unreadable, shown as an image
    steps: list[dict[str, Any]]     # backward.json's steps: the stepper, where traced


@dataclass
class Support:
    """A support matrix: a row per capability, a (status, detail) cell per Function."""
    functions: list[str]
    rows: list[tuple[str, list[tuple[str, str]]]]
    notes: list[tuple[str, str, str]]  # (Function, capability, detail) of the cells not ok


@dataclass
class Section:
    """What the report shows of one entry besides its summary."""
    entry: EntrySummary
    description: str
    config: str                     # the entry's resolved config, YAML
    files: list[str]                # every file in its folder
    images: list[str]               # the PNGs and GIFs, loss.png first
    graphs: list[Graph]
    support: Support | None
    explain: str | None             # explain.txt: the graph walk


def render_report(run_dir: Path, s: RunSummary, descriptions: Mapping[str, str],
                  configs: Mapping[str, str], part: str | None = None) -> str:
    """The HTML of report.html for the run in `run_dir` with this summary (`part`: one block
    of it, see templating.render)."""
    from demos.lab.pages.templating import render

    meta = {"status": s.status, "scenarios passed": f"{s.passed} of {len(s.scenarios)}",
            "device": s.device, "torch": s.torch, "seed": s.seed,
            "dry run": "yes" if s.dry_run else "no", "config": s.config,
            "command": ("python " if s.command[:1] and s.command[0].endswith(".py") else "")
            + " ".join(s.command), "started": s.started,
            "overrides": " ".join(s.sets) or "none",
            **({"processes": f"{s.world['size']} under torchrun ({s.world['backend']}); rank 0 "
                             f"wrote this run, the others their rank<N>.log"} if s.world else {}),
            "duration": f"{s.duration_s:.1f} s",
            "determinism": ", ".join(f"{k} {v}" for k, v in s.determinism.items()
                                     if k != "seeded"),
            **({"numbers from": machine.describe(s.fingerprint)} if s.fingerprint else {})}
    sections = [section(e, run_dir / e.id, descriptions.get(e.scenario, ""),
                        configs.get(e.id, "")) for e in s.scenarios]
    return render("report.html.j2", part, s=s, meta=meta, rank_logs=rank_logs(run_dir),
                  sections=sections)


def write_report(run_dir: Path, summary: RunSummary, descriptions: Mapping[str, str],
                 configs: Mapping[str, str]) -> Path:
    path = run_dir / REPORT
    write_atomic(path, render_report(run_dir, summary, descriptions, configs))
    return path


def section(e: EntrySummary, folder: Path, description: str, config_yaml: str) -> Section:
    """An entry and the files its folder holds."""
    files = files_of(folder)
    images = sorted((f for f in files if f.endswith((".png", ".gif"))),
                    key=lambda f: (f != LOSS_PLOT, f))
    explain = (folder / EXPLAIN).read_text(encoding="utf-8") if EXPLAIN in files else None
    return Section(e, description, config_yaml, files, images, graphs(folder, e.id, files),
                   support_matrix(e.support) if e.support else None, explain)


def files_of(folder: Path) -> list[str]:
    """The files in an entry's folder, hidden temporaries aside; none when it could not be made."""
    try:
        return sorted(p.name for p in folder.iterdir()
                      if p.is_file() and not p.name.startswith("."))
    except OSError:
        return []


def graphs(folder: Path, rel: str, files: list[str]) -> list[Graph]:
    """The entry's graphs (its .svg files), each with its traced backward steps if any, in the
    order the scenario drew them (backward.json's: the document's order), the rest after."""
    traces, out = backward_traces(folder), []
    drawn = list(traces)
    svgs = sorted((f for f in files if f.endswith(".svg") and not f.endswith(f"{GRADS}.svg")),
                  key=lambda f: (drawn.index(f[:-4]) if f[:-4] in drawn else len(drawn), f))
    for svg in svgs:
        stem = svg[:-4]
        target = f"g-{rel}-{stem}"
        links = [stem + kind + ext for kind in ("", GRADS) for ext in (".pdf", ".svg", ".gv")
                 if stem + kind + ext in files]  # and the same graph with its gradients
        out.append(Graph(stem, target, links, inline_svg(folder / svg, target),
                         traces.get(stem, [])))
    return out


def support_matrix(support: Mapping[str, Mapping[str, Row]]) -> Support:
    """Capabilities down (in the order first seen), Functions across; a cell (status,
    detail), blank where not run."""
    functions = list(support)
    capabilities = list(dict.fromkeys(k for rows in support.values() for k in rows))
    rows = [(cap, [(r.status, r.detail) if (r := support[f].get(cap)) else ("", "")
                   for f in functions]) for cap in capabilities]
    notes = [(f, cap, detail) for cap, cells in rows
             for f, (status, detail) in zip(functions, cells)
             if status in ("unsupported", "fails", "differs") and detail]
    return Support(functions, rows, notes)


def backward_traces(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The steps of each graph in the entry's backward.json, by graph name, in the order the
    scenario drew them (an empty list: drawn, not traced)."""
    try:
        return {g["graph"]: steps if isinstance(steps := g.get("steps"), list) and all(
            isinstance(s, dict) for s in steps) else [] for g in backward_data(folder)}
    except (KeyError, TypeError, AttributeError):
        return {}


def backward_data(folder: Path) -> list[dict[str, Any]]:
    """backward.json's graphs, as written; [] where there is none, or none readable."""
    try:
        data = json.loads((folder / BACKWARD).read_text(encoding="utf-8"))
        graphs = data["graphs"]
        return [g for g in graphs if isinstance(g, dict)] if isinstance(graphs, list) else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


def inline_svg(path: Path, prefix: str) -> Markup | None:
    """An SVG that graphviz wrote, ready to sit in the page: no XML prolog, ids made unique
    in the page, and sized by the script (fitted to the box when it opens)."""
    from markupsafe import Markup, escape

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    start = text.find("<svg")
    if start < 0:
        return None
    text = re.sub(r'\bid="', f'id="{escape(prefix)}-', text[start:])
    # The one markup the page takes as it is: graphviz's drawing of our own graph, whose
    # labels graphviz escaped (node names, tensor shapes). Everything else is escaped.
    return Markup(re.sub(r"<!--.*?-->", "", text, flags=re.S))


def rank_logs(run_dir: Path) -> list[str]:
    """The logs of the ranks but 0 (under torchrun), in rank order."""
    try:
        names = [p.name for p in run_dir.iterdir() if RANK_LOG.fullmatch(p.name)]
    except OSError:
        return []
    return sorted(names, key=lambda n: int(n[4:-4]))
