"""sweep.html: a sweep's points, each group's statistics and checks, and each entry's loss
curves over the group's runs as a band (min-max shaded, mean line). Self-contained like the
report (templates/sweep.html.j2): inline CSS, relative links and images."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demos.lab.core.config import ID_RE
from demos.lab.core.files import write_atomic
from demos.lab.core.layout import METRICS, SWEEP_PAGE
from demos.lab.core.results import Check


@dataclass
class Group:
    """A group of the sweep's runs (those differing only in seed), as the page shows it."""
    label: str
    runs: int
    checks: list[Check]
    scenarios: dict[str, dict[str, dict[str, dict[str, float]]]]  # entry -> kind -> value -> stats
    images: dict[str, str]  # entry -> its loss band's file name


def bands(folder: Path, data: dict[str, Any]) -> dict[tuple[int, str], str]:
    """Draw each group's loss band per entry; {(group, entry): file name}."""
    from demos.lab.pages.plots import band_plot, read_losses

    out = {}
    for gi, g in enumerate(data["groups"]):
        for entry in filter(ID_RE.fullmatch, g["scenarios"]):  # names a file: a folder-safe id
            curves = [c for c in (read_losses(folder / r / entry / METRICS)
                                  for r in g["runs"]) if c and c[0]]
            if curves:
                name = f"loss_g{gi}_{entry}.png"
                label = group_label(g, data)
                band_plot(folder / name, curves, title=f"{entry}: loss, {label}")
                out[(gi, entry)] = name
    return out


def write_page(folder: Path, data: dict[str, Any]) -> None:
    """sweep.html in `folder`, from its sweep.json's `data`."""
    from demos.lab.pages.templating import render

    images = bands(folder, data)
    points = [{"run": p["run"], "status": str(p["status"]), "duration_s": p["duration_s"],
               "why": p.get("why") or [],
               "swept": " ".join(s for s in p["sets"] if s.partition("=")[0] in data["axes"])}
              for p in data["points"]]
    groups = [Group(group_label(g, data), len(g["runs"]), [Check(**c) for c in g["checks"]],
                    g["scenarios"], {e: f for (i, e), f in images.items() if i == gi})
              for gi, g in enumerate(data["groups"])]
    page = render("sweep.html.j2", data=data, name=Path(data["folder"]).name, points=points,
                  groups=groups,
                  axes="; ".join(f"{k} = {', '.join(v)}" for k, v in data["axes"].items())
                  or "none",
                  failed_checks=sum(c.passed is False for g in groups for c in g.checks))
    write_atomic(folder / SWEEP_PAGE, page)


def group_label(g: dict[str, Any], data: dict[str, Any]) -> str:
    """What sets a group apart: its swept values, and its config where there are several."""
    parts = list(g["sets"])
    if len(data["configs"]) > 1:
        parts.insert(0, g["config"])
    if g["dry_run"] and not all(x["dry_run"] for x in data["groups"]):
        parts.append("dry run")
    return ", ".join(parts) or "all runs"
