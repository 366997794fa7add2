"""sweep.html: a sweep's points, each group's statistics and checks, and each entry's loss
curves over the group's runs as a band (min-max shaded, mean line). Self-contained like the
report: inline CSS, relative links and images."""
from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from demos.lab.core.config import ID_RE
from demos.lab.core.files import write_atomic
from demos.lab.pages.report import CSS, badge, checks_table, esc, fmt
from demos.lab.core.results import Check


def bands(folder: Path, data: dict[str, Any]) -> dict[tuple[int, str], str]:
    """Draw each group's loss band per entry; {(group, entry): file name}."""
    from demos.lab.pages.plots import band_plot, read_losses

    out = {}
    for gi, g in enumerate(data["groups"]):
        for entry in filter(ID_RE.fullmatch, g["scenarios"]):  # names a file: a folder-safe id
            curves = [c for c in (read_losses(folder / r / entry / "metrics.csv")
                                  for r in g["runs"]) if c and c[0]]
            if curves:
                name = f"loss_g{gi}_{entry}.png"
                label = group_label(g, data)
                band_plot(folder / name, curves, title=f"{entry}: loss, {label}")
                out[(gi, entry)] = name
    return out


def stats_table(entry: str, kinds: dict[str, dict[str, dict[str, float]]]) -> str:
    rows = []
    for kind, names in kinds.items():
        for name, st in names.items():
            cells = "".join(f"<td>{esc(fmt(st.get(k)))}</td>" for k in ("mean", "std", "min", "max"))
            rows.append(f"<tr><td><code>{esc(kind)}.{esc(name)}</code></td><td>{st['n']}</td>"
                        f"{cells}</tr>")
    return (f"<h3>{esc(entry)}</h3><table><tr><th>value</th><th>n</th><th>mean</th><th>std</th>"
            f"<th>min</th><th>max</th></tr>{''.join(rows)}</table>")


def write_page(folder: Path, data: dict[str, Any]) -> None:
    """sweep.html in `folder`."""
    images = bands(folder, data)
    points = "".join(
        f'<tr><td><a href="{esc(quote(p["run"]))}/report.html">{esc(p["run"])}</a></td>'
        f'<td>{esc(" ".join(s for s in p["sets"] if s.partition("=")[0] in data["axes"]))}</td>'
        f'<td>{badge(str(p["status"]))}</td><td>{esc(fmt(p["duration_s"]))} s</td></tr>'
        for p in data["points"])
    axes = "; ".join(f"{k} = {', '.join(v)}" for k, v in data["axes"].items()) or "none"
    groups = []
    for gi, g in enumerate(data["groups"]):
        parts = [f'<section class="scenario"><h2>{esc(group_label(g, data))} '
                 f'({len(g["runs"])} runs)</h2>']
        if g["checks"]:
            parts += ["<h3>Checks over the runs</h3>",
                      checks_table([Check(**c) for c in g["checks"]])]
        for entry, kinds in g["scenarios"].items():
            parts.append(stats_table(entry, kinds))
            if (gi, entry) in images:
                parts.append(f'<figure><img src="{esc(images[(gi, entry)])}" alt="{esc(entry)} '
                             f'loss band"><figcaption>{esc(entry)}: loss of every run, min to '
                             f'max shaded, mean as a line</figcaption></figure>')
        groups.append("\n".join(parts) + "</section>")
    notes = "".join(f"<p class=\"error-text\">{esc(n)}</p>" for n in data["notes"])
    if data["not_run"]:
        notes += f"<p>Not run (interrupted): {esc(', '.join(data['not_run']))}</p>"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autograd-demos sweep {esc(Path(data["folder"]).name)}: {esc(data["status"])}</title>
<style>{CSS}</style></head><body>
<h1>Sweep {esc(Path(data["folder"]).name)} {badge(data["status"])}</h1>
<table><tr><td>config</td><td>{esc(data["config"])}</td></tr>
<tr><td>swept</td><td>{esc(axes)}</td></tr>
<tr><td>runs</td><td>{len(data["points"])}, {len(data["failed_runs"])} failed; {sum(
    c["passed"] is False for g in data["groups"] for c in g["checks"])} sweep check(s) failed</td></tr>
<tr><td>dry run</td><td>{"yes" if data["dry_run"] else "no"}</td></tr>
<tr><td>command</td><td>{esc(" ".join(data["command"]))}</td></tr></table>
<p><a href="sweep.json">sweep.json</a> <a href="index.html">the runs' index</a></p>
{notes}
<h2>Runs</h2>
<table><tr><th>run</th><th>swept values</th><th>status</th><th>duration</th></tr>{points}</table>
{chr(10).join(groups)}
</body></html>
"""
    write_atomic(folder / "sweep.html", page)

def group_label(g: dict[str, Any], data: dict[str, Any]) -> str:
    """What sets a group apart: its swept values, and its config where there are several."""
    parts = list(g["sets"])
    if len(data["configs"]) > 1:
        parts.insert(0, g["config"])
    if g["dry_run"] and not all(x["dry_run"] for x in data["groups"]):
        parts.append("dry run")
    return ", ".join(parts) or "all runs"
