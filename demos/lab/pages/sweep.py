"""sweep.html: a sweep's points, each group's statistics and checks, and each entry's loss
curves over the group's runs as a band (min-max shaded, mean line). Self-contained like the
report (templates/sweep.html.j2): inline CSS, relative links and images."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from demos.lab.core.config import ID_RE
from demos.lab.core.files import write_atomic
from demos.lab.core.layout import METRICS, REPORT, SWEEP_PAGE
from demos.lab.core.results import Check
from demos.lab.pages.plots import band_plot, groups_plot, read_losses
from demos.lab.pages.templating import fmt, render


@dataclass
class Group:
    """A group of the sweep's runs (those differing only in seed), as the page shows it."""
    label: str
    runs: int
    checks: list[Check]
    scenarios: dict[str, dict[str, dict[str, dict[str, float]]]]  # entry -> kind -> value -> stats
    images: dict[str, str]  # entry -> its loss band's file name


@dataclass
class SideBySide:
    """The groups of a --sweep side by side: a row per value, a column per group; and one plot
    per metric across the groups."""
    labels: list[str]
    rows: list[tuple[str, list[str]]]  # ("entry kind.name", a cell per group)
    images: list[tuple[str, str]]      # (caption, file name)


SAFE = re.compile(r"[A-Za-z0-9_.-]+")  # a value's name that can be part of a file name


def drawn(draw: Callable[..., None], path: Path, notes: list[str], *args: Any,
          **kwargs: Any) -> bool:
    """Whether `draw(path, ...)` drew its plot; values matplotlib cannot place (near the
    float limit, say) leave it out, with a note."""
    try:
        draw(path, *args, **kwargs)
    except (ValueError, OverflowError, ArithmeticError) as e:
        notes.append(f"{path.name} not drawn: {' '.join(str(e).split()[:20])}")
        return False
    return True


def side_by_side(folder: Path, data: dict[str, Any],
                 notes: list[str] | None = None) -> SideBySide | None:
    """The groups compared, when there are two or more; their plots drawn into `folder`
    (those that cannot be drawn are said in `notes`)."""
    groups = data["groups"]
    if len(groups) < 2:
        return None
    labels = [group_label(g, data) for g in groups]
    keys: dict[tuple[str, str, str], None] = {}  # in first-seen order
    for g in groups:
        for entry, kinds in g["scenarios"].items():
            for kind, names in kinds.items():
                keys.update({(entry, kind, name): None for name in names})
    rows, images = [], []
    for entry, kind, name in keys:
        stats = [g["scenarios"].get(entry, {}).get(kind, {}).get(name, {"n": 0}) for g in groups]
        rows.append((f"{entry} {kind}.{name}", [
            f"{fmt(st['mean'])} ± {st['std']:.3g} (n={st['n']})" if st.get("n") else "—"
            for st in stats]))
        if kind == "metrics" and all(st.get("n") for st in stats) and ID_RE.fullmatch(entry) \
                and SAFE.fullmatch(name):
            file = f"groups_{entry}_{name}.png"
            ticks = [re.sub(r"scenarios(\.[^.=]+|\[\d+\])\.", "", label) for label in labels]
            if drawn(groups_plot, folder / file, notes if notes is not None else [], ticks,
                     stats, title=f"{entry}: {name} across the groups", ylabel=name):
                images.append((f"{entry}: {name}, each group's mean ± std, min and max", file))
    return SideBySide(labels, rows, images)


def bands(folder: Path, data: dict[str, Any], notes: list[str]) -> dict[tuple[int, str], str]:
    """Draw each group's loss band per entry; {(group, entry): file name}."""
    out = {}
    for gi, g in enumerate(data["groups"]):
        for entry in filter(ID_RE.fullmatch, g["scenarios"]):  # names a file: a folder-safe id
            curves = [c for c in (read_losses(folder / r / entry / METRICS)
                                  for r in g["runs"]) if c and c[0]]
            if curves:
                name = f"loss_g{gi}_{entry}.png"
                label = group_label(g, data)
                if drawn(band_plot, folder / name, notes, curves, title=f"{entry}: loss, {label}"):
                    out[(gi, entry)] = name
    return out


def write_page(folder: Path, data: dict[str, Any]) -> list[str]:
    """sweep.html in `folder`, from its sweep.json's `data`; notes on the plots it could not
    draw (the page shows them too)."""
    notes: list[str] = []
    images = bands(folder, data, notes)
    compared = side_by_side(folder, data, notes)
    points = [{"run": p["run"], "status": str(p["status"]), "duration_s": p["duration_s"],
               "why": p.get("why") or [],
               "href": f"{quote(p['run'], errors='surrogateescape')}/{REPORT}",
               "swept": " ".join(s for s in p["sets"] if s.partition("=")[0] in data["axes"])}
              for p in data["points"]]
    groups = [Group(group_label(g, data), len(g["runs"]), [Check(**c) for c in g["checks"]],
                    g["scenarios"], {e: f for (i, e), f in images.items() if i == gi})
              for gi, g in enumerate(data["groups"])]
    axes = "; ".join(f"{k} = {', '.join(v)}" for k, v in data["axes"].items()) or "none"
    page = render("sweep.html.j2", data={**data, "notes": [*data["notes"], *notes]},
                  name=Path(data["folder"]).name, points=points, groups=groups, compared=compared,
                  axes=axes, failed_checks=sum(c.passed is False for g in groups for c in g.checks))
    write_atomic(folder / SWEEP_PAGE, page)
    return notes


def group_label(g: dict[str, Any], data: dict[str, Any]) -> str:
    """What sets a group apart: its swept values, and its config where there are several."""
    parts = list(g["sets"])
    if len(data["configs"]) > 1:
        parts.insert(0, g["config"])
    if g["dry_run"] and not all(x["dry_run"] for x in data["groups"]):
        parts.append("dry run")
    return ", ".join(parts) or "all runs"
