"""The run report (report.html in the run folder) and the list of runs (index.html above them).

Self-contained: inline CSS and a few lines of inline JavaScript, no network, no fonts; every
image and link is a relative path to a file that exists in the run folder, so the folder can be
zipped and moved and its report still works.
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import re
import socket
import stat
import time
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import quote

from demos.lab.core import fingerprint
from demos.lab.core.files import remove_temps, write_atomic
from demos.lab.core.results import Check, EntrySummary, RunSummary

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 0 1.2em 3em; color: #1d2129; background: #fbfbfc; }
h1 { margin: 0.8em 0 0.3em; } h2 { margin: 0; font-size: 1.35em; } h3 { margin: 1.2em 0 0.4em; }
table { border-collapse: collapse; margin: 0.3em 0; } td, th { padding: 0.25em 0.7em;
  border-bottom: 1px solid #e3e5e8; text-align: left; vertical-align: top; }
th { background: #f0f2f5; } code, pre { font: 13px/1.4 ui-monospace, Menlo, Consolas, monospace; }
pre { background: #f3f4f6; padding: 0.8em; overflow: auto; max-height: 32em; }
.badge { display: inline-block; padding: 0.05em 0.6em; border-radius: 0.8em; font-size: 0.75em;
         font-weight: 600; vertical-align: middle; color: #fff; }
.passed { background: #2e7d32; } .failed, .error { background: #c62828; }
.interrupted { background: #ef6c00; } .skipped { background: #78909c; }
.agree { background: #2e7d32; } .differ { background: #c62828; }
tr.fail td { background: #fdecea; } tr.fail td:first-child { font-weight: 600; color: #b71c1c; }
tr.skip td { color: #607080; }
section.scenario { background: #fff; border: 1px solid #e3e5e8; border-radius: 8px;
                   padding: 1em 1.3em; margin: 1.3em 0; }
.doc { color: #4a5160; margin: 0.3em 0; } .error-text { color: #b71c1c; font-weight: 600; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; } figure { margin: 0; }
figure img { max-width: 100%; width: 520px; border: 1px solid #e3e5e8; background: #fff; }
figcaption { font-size: 0.85em; color: #4a5160; }
.graph { overflow: auto; max-height: 640px; border: 1px solid #e3e5e8; background: #fff;
         resize: vertical; } .graph img { display: block; }
.zoom button, .stepper button { font-size: 0.9em; margin-right: 0.3em; }
.graph svg { display: block; }
.backward { outline: none; } .backward:focus-within .stepper, .backward:focus .stepper {
  color: #0d47a1; } .hint { color: #78909c; font-size: 0.85em; }
.backward g.node.active polygon { fill: #ffd54f; stroke: #d32f2f; stroke-width: 3; }
.backward g.node.leaf-active polygon { stroke: #d32f2f; stroke-width: 3; }
.backward g.edge.active path, .backward g.edge.active polygon { stroke: #d32f2f;
  stroke-width: 3; } .backward g.edge.active polygon { fill: #d32f2f; }
td.sup-ok { background: #e8f5e9; } td.sup-unsupported { background: #fff8e1; }
td.sup-fails { background: #fdecea; font-weight: 600; color: #b71c1c; }
td.sup-skipped { color: #78909c; }
.step-detail { font: 13px/1.5 ui-monospace, Menlo, Consolas, monospace; background: #f3f4f6;
  padding: 0.5em 0.8em; margin-top: 0.4em; min-height: 5.5em; }
nav a { margin-right: 0.9em; white-space: nowrap; } details { margin: 0.5em 0; }
summary { cursor: pointer; font-weight: 600; } .files a { margin-right: 0.8em; }
"""

ZOOM_JS = """
function natural(svg) {
  var box = svg.viewBox.baseVal;
  return box && box.width ? [box.width, box.height] : [svg.clientWidth, svg.clientHeight];
}
document.querySelectorAll('.zoom').forEach(function (bar) {
  var box = document.getElementById(bar.dataset.target);
  var el = box.tagName === 'IMG' ? box : box.querySelector('svg'), scale = 1;
  if (!el) return;
  function size() { return el.tagName === 'IMG' ? [el.naturalWidth, el.naturalHeight]
                                                : natural(el); }
  function fit() {  /* the whole graph in view: tall graphs open fitted */
    var s = size(), holder = el.tagName === 'IMG' ? el.parentNode : box;
    return Math.min(1.5, (holder.clientWidth - 4) / s[0], 620 / s[1]);
  }
  function apply() {
    var s = size();
    el.style.width = (s[0] * scale) + 'px';
    if (el.tagName !== 'IMG') el.style.height = (s[1] * scale) + 'px';
  }
  if (el.tagName === 'IMG') {
    el.addEventListener('load', apply); if (el.complete) apply();
  } else {
    el.removeAttribute('width'); el.removeAttribute('height'); scale = fit(); apply();
  }
  bar.querySelectorAll('button').forEach(function (b) {
    b.addEventListener('click', function () {
      scale = b.dataset.z === 'fit' ? fit() : b.dataset.z === '1' ? 1
            : scale * parseFloat(b.dataset.z);
      apply();
    });
  });
});
"""

STEPPER_JS = """
function num(x, digits) {  /* "nan", "inf" arrive as strings (strict JSON) */
  return typeof x === 'number' ? String(+x.toPrecision(digits)) : String(x);
}
function describeGrad(g) {
  if (g === null || g === undefined) return 'None';
  if (g.values) {
    var v = g.values.map(function (x) { return num(x, 6); });
    return g.shape.length ? '[' + v.join(', ') + ']' : v[0];
  }
  var shape = '(' + g.shape.join(', ') + (g.shape.length === 1 ? ',' : '') + ')';
  return shape + ' in [' + num(g.min, 4) + ', ' + num(g.max, 4) + '], norm ' + num(g.norm, 4);
}
document.querySelectorAll('.backward').forEach(function (box) {
  var steps = JSON.parse(box.querySelector('script.steps').textContent);
  var svg = box.querySelector('svg'), detail = box.querySelector('.step-detail');
  var count = box.querySelector('.step-count'), play = box.querySelector('[data-action=play]');
  var nodes = {}, edges = {}, k = 0, timer = null;
  svg.querySelectorAll('g.node').forEach(function (g) {
    nodes[g.querySelector('title').textContent] = g; });
  svg.querySelectorAll('g.edge').forEach(function (g) {
    edges[g.querySelector('title').textContent] = g; });
  function mark(el, cls) { if (el) el.classList.add(cls); }
  function line(label, text) {
    var p = document.createElement('div'), b = document.createElement('b');
    b.textContent = label + ' '; p.appendChild(b);
    p.appendChild(document.createTextNode(text)); detail.appendChild(p);
  }
  function show() {
    svg.querySelectorAll('.active, .leaf-active').forEach(function (el) {
      el.classList.remove('active'); el.classList.remove('leaf-active'); });
    count.textContent = 'step ' + k + ' of ' + steps.length;
    detail.textContent = '';
    if (k === 0) { line('', 'Press Next to run backward one node at a time.'); return; }
    var s = steps[k - 1];
    mark(nodes[s.dot_node], 'active');  /* and the edges a gradient really travels */
    s.sent.forEach(function (e) { if (e.dot_edge && e.grad) mark(edges[e.dot_edge], 'active'); });
    line('step ' + k + ':', s.node);
    line('received:', s.received.map(describeGrad).join(', '));
    if (s.leaf && s.received[0] === null) {
      line('adds:', 'nothing (None arrived): ' + s.leaf.name + '.grad stays ' +
           describeGrad(s.leaf.grad));
    } else if (s.leaf) {
      mark(nodes[s.leaf.dot_node], 'leaf-active'); mark(edges[s.leaf.dot_edge], 'active');
      line('adds into:', s.leaf.name + '.grad, which is now ' + describeGrad(s.leaf.grad));
    } else {
      line('sends:', s.sent.map(function (e) {
        return e.to ? describeGrad(e.grad) + ' to ' + e.to
                    : describeGrad(e.grad) + ' for ' + e.input_name + ': carries nothing';
      }).join('; ') || 'nothing');
    }
  }
  function go(d) { k = Math.max(0, Math.min(steps.length, k + d)); show(); }
  function stop() { clearInterval(timer); timer = null; play.textContent = 'Play'; }
  box.querySelectorAll('button[data-action]').forEach(function (b) {
    b.addEventListener('click', function () {
      box.focus({preventScroll: true});
      if (b.dataset.action === 'prev') { stop(); go(-1); }
      else if (b.dataset.action === 'next') { stop(); go(1); }
      else if (timer) { stop(); }
      else {
        if (k >= steps.length) k = 0;
        play.textContent = 'Pause';
        timer = setInterval(function () { go(1); if (k >= steps.length) stop(); }, 900);
      }
    });
  });
  box.addEventListener('keydown', function (ev) {
    if (ev.key === 'ArrowRight') { stop(); go(1); ev.preventDefault(); }
    if (ev.key === 'ArrowLeft') { stop(); go(-1); ev.preventDefault(); }
  });
  show();
});
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.8g}"
    return "—" if value is None else str(value)


def badge(status: str) -> str:
    return f'<span class="badge {esc(status)}">{esc(status.upper())}</span>'


def table(rows: Mapping[str, Any], header: bool = True) -> str:
    body = "".join(f"<tr><td><code>{esc(k)}</code></td><td>{esc(fmt(v))}</td></tr>"
                   for k, v in rows.items())
    head = "<tr><th>name</th><th>value</th></tr>" if header else ""
    return f"<table>{head}{body}</table>"


def checks_table(checks: list[Check]) -> str:
    """Failures first, then passes, then what was not evaluated."""
    order = {False: 0, True: 1, None: 2}
    rows = []
    for c in sorted(checks, key=lambda c: order[c.passed]):
        cls, word = {False: ("fail", "FAIL"), True: ("pass", "pass"),
                     None: ("skip", "not evaluated")}[c.passed]
        rows.append(f'<tr class="{cls}"><td>{word}</td><td>{esc(c.name)}</td>'
                    f'<td>{esc(c.detail)}</td></tr>')
    return ("<table><tr><th></th><th>check</th><th>detail</th></tr>" + "".join(rows) + "</table>"
            if rows else "<p>No checks ran.</p>")


def scenario_section(e: EntrySummary, folder: Path, description: str, config_yaml: str) -> str:
    rel = e.id
    try:
        files = sorted(p.name for p in folder.iterdir()
                       if p.is_file() and not p.name.startswith("."))
    except OSError:  # its folder could not be made
        files = []
    parts = [f'<section class="scenario" id="{esc(rel)}">',
             f'<h2>{esc(e.id)} {badge(e.status)}</h2>',
             f'<p class="doc"><code>{esc(e.scenario)}</code>: {esc(description)}</p>']
    if e.timing:
        parts.append(f'<p>{e.steps:,} steps, training loop {e.timing.train_s:.3f} s '
                     f'({fmt(e.timing.steps_per_s)} steps/s) on {esc(e.device)}</p>')
    if e.error:
        parts.append(f'<p class="error-text">{esc(e.error)}</p>')
    parts += ["<h3>Checks</h3>", checks_table(e.checks)]
    if e.metrics:
        parts += ["<h3>Metrics</h3>", table(e.metrics)]
    if e.params:
        parts += ["<h3>Params</h3>", table(e.params)]
    if e.inspection:
        parts += ["<h3>What the document inspects</h3>", table(e.inspection)]
    if e.support:
        parts += ["<h3>What the Function supports</h3>", support_table(e.support)]
    images = [f for f in files if f.endswith((".png", ".gif"))]
    images.sort(key=lambda f: (f != "loss.png", f))
    if images:
        parts.append('<h3>Plots</h3><div class="plots">')
        parts += [f'<figure><img src="{esc(rel)}/{esc(f)}" alt="{esc(f)}">'
                  f'<figcaption>{esc(f)}</figcaption></figure>' for f in images]
        parts.append("</div>")
    traces = backward_traces(folder)
    for svg in [f for f in files if f.endswith(".svg")]:
        stem, target = svg[:-4], f"g-{rel}-{svg[:-4]}"
        links = " ".join(f'<a href="{esc(rel)}/{esc(stem + ext)}">{esc(stem + ext)}</a>'
                         for ext in (".pdf", ".svg", ".gv") if stem + ext in files)
        parts += [f"<h3>Autograd graph: {esc(stem)}</h3>",
                  f'<p class="zoom" data-target="{esc(target)}">zoom: '
                  '<button data-z="1.25">+</button><button data-z="0.8">&minus;</button>'
                  '<button data-z="1">100%</button><button data-z="fit">fit</button> '
                  f'{links}</p>']
        inline = inline_svg(folder / svg, target)
        steps = traces.get(stem, [])
        if inline is None:  # unreadable: the file itself, as an image
            parts.append(f'<div class="graph"><img id="{esc(target)}" src="{esc(rel)}/{esc(svg)}" '
                         f'alt="autograd graph {esc(stem)}"></div>')
        elif not steps:
            parts.append(f'<div class="graph" id="{esc(target)}">{inline}</div>')
        else:  # strict JSON: backward.json writes NaN and inf as strings
            data = json.dumps(steps, allow_nan=False).replace("</", "<\\/")
            parts += [f'<div class="backward" data-graph="{esc(stem)}" tabindex="0">',
                      '<p class="stepper">backward, step by step: '
                      '<button data-action="prev">&#9664; Prev</button>'
                      '<button data-action="next">Next &#9654;</button>'
                      '<button data-action="play">Play</button> '
                      f'<span class="step-count">{len(steps)} steps</span> '
                      '<span class="hint">(or the arrow keys)</span></p>',
                      f'<div class="graph" id="{esc(target)}">{inline}</div>',
                      '<div class="step-detail">Press Next to run backward one node at a time.'
                      '</div>',
                      f'<script type="application/json" class="steps">{data}</script></div>']
    if "explain.txt" in files:
        text = (folder / "explain.txt").read_text(encoding="utf-8")
        parts.append(f"<details><summary>Graph walk (explain.txt)</summary><pre>{esc(text)}</pre>"
                     "</details>")
    parts.append(f"<details><summary>Resolved config</summary><pre>{esc(config_yaml)}</pre>"
                 "</details>")
    parts.append('<p class="files">Files: ' + " ".join(
        f'<a href="{esc(rel)}/{esc(f)}">{esc(f)}</a>' for f in files) + "</p></section>")
    return "\n".join(parts)


def baseline_section(block: Mapping[str, Any] | None) -> str:
    """The drift table of --baseline: only what moved, worst first; entries one side lacks."""
    if not block:
        return ""
    src = block.get("from") or {}
    parts = [f'<section class="scenario" id="baseline"><h2>Baseline {badge(block["status"])}</h2>',
             f'<p class="doc">Compared with <code>{esc(block["file"])}</code> (run '
             f'{esc(src.get("run"))}, torch {esc(src.get("torch"))}, {esc(src.get("device"))}, '
             f'{esc(src.get("threads"))} thread(s), seed {esc(src.get("seed"))}): '
             f'{block["compared"]} values, {len(block["drift"])} moved.</p>']
    if block.get("differs"):
        how = ("each value is judged against the band its ensemble measured" if
               block.get("measured") else "the baseline is exact to one machine, so values "
               "are compared at rtol 1e-5 (the arithmetic tier)")
        parts.append(f'<p class="doc">Not the baseline\'s machine ({esc(block["differs"])}): '
                     f'{esc(how)}.</p>')
    lacking = [(i, "in the baseline, not in this config") for i in block["only_in_baseline"]]
    lacking += [(i, "not in the baseline") for i in block["not_in_baseline"]]
    if block["not_run"]:
        lacking.append((", ".join(block["not_run"]), "in the baseline, not run here (--only)"))
    if lacking:
        parts.append("<ul>" + "".join(f"<li><b>{esc(i)}</b>: {esc(why)}</li>"
                                      for i, why in lacking) + "</ul>")
    if block["drift"]:
        rows = "".join(
            f'<tr class="{"" if d["within"] else "fail"}"><td>{esc(d["entry"])}</td>'
            f'<td><code>{esc(d["key"])}</code></td><td>{esc(fmt(d["old"]))}</td>'
            f'<td>{esc(fmt(d["new"]))}</td><td>{esc(fmt(d["diff"]))}</td>'
            f'<td>{esc(fmt(d["allowed"]))}</td>'
            f'<td title="{esc(d.get("rule", ""))}">{esc(d.get("tier", ""))}</td>'
            f'<td>{"within" if d["within"] else "OUT"}</td></tr>'
            for d in block["drift"])
        parts.append('<table class="drift"><tr><th>entry</th><th>value</th><th>baseline</th>'
                     '<th>now</th><th>difference</th><th>allowed</th><th>by</th><th></th></tr>'
                     f'{rows}</table>')
    else:
        parts.append("<p>Nothing moved: every value is the baseline's.</p>")
    return "\n".join(parts) + "</section>"


def support_table(support: Mapping[str, Mapping[str, Mapping[str, str]]]) -> str:
    """Capabilities down, Functions across; each cell its status, the detail on hover and
    folded below the table for the rows that are not ok."""
    functions = list(support)
    capabilities = list(dict.fromkeys(k for rows in support.values() for k in rows))
    head = "".join(f"<th>{esc(f)}</th>" for f in functions)
    body, notes = [], []
    for cap in capabilities:
        cells = []
        for f in functions:
            row = support[f].get(cap, {"status": "", "detail": ""})
            status, detail = str(row.get("status", "")), str(row.get("detail", ""))
            cells.append(f'<td class="sup-{esc(status)}" title="{esc(detail)}">{esc(status)}</td>')
            if status in ("unsupported", "fails") and detail:
                notes.append(f"<li><b>{esc(f)}, {esc(cap)}</b>: {esc(detail)}</li>")
        body.append(f"<tr><td>{esc(cap)}</td>{''.join(cells)}</tr>")
    details = (f"<details><summary>Why not ok</summary><ul>{''.join(notes)}</ul></details>"
               if notes else "")
    return (f'<table class="support"><tr><th>capability</th>{head}</tr>{"".join(body)}</table>'
            + details)


def backward_traces(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The steps of each traced graph in the entry's backward.json, by graph name."""
    try:
        data = json.loads((folder / "backward.json").read_text(encoding="utf-8"))
        return {g["graph"]: g["steps"] for g in data["graphs"] if g.get("steps")}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def inline_svg(path: Path, prefix: str) -> str | None:
    """An SVG that graphviz wrote, ready to sit in the page: no XML prolog, ids made unique
    in the page, and sized by the script (fitted to the box when it opens)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    start = text.find("<svg")
    if start < 0:
        return None
    text = re.sub(r'\bid="', f'id="{esc(prefix)}-', text[start:])
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def render_report(run_dir: Path, s: RunSummary, descriptions: Mapping[str, str],
                  configs: Mapping[str, str]) -> str:
    """The HTML of report.html for the run in `run_dir` with this summary."""
    meta = {"status": s.status, "scenarios passed": f"{s.passed} of {len(s.scenarios)}",
            "device": s.device, "torch": s.torch, "seed": s.seed,
            "dry run": "yes" if s.dry_run else "no", "config": s.config,
            "command": "python " + " ".join(s.command), "started": s.started,
            "overrides (--set)": " ".join(s.sets) or "none",
            **({"processes": f"{s.world['size']} under torchrun ({s.world['backend']}); rank 0 "
                             f"wrote this run, the others their rank<N>.log"} if s.world else {}),
            "duration": f"{s.duration_s:.1f} s",
            "determinism": ", ".join(f"{k} {v}" for k, v in s.determinism.items()
                                     if k != "seeded"),
            **({"numbers from": fingerprint.describe(s.fingerprint)} if s.fingerprint else {})}
    nav = " ".join(f'<a href="#{esc(e.id)}">{esc(e.id)} {badge(e.status)}</a>'
                   for e in s.scenarios)
    sections = [scenario_section(e, run_dir / e.id, descriptions.get(e.scenario, ""),
                                 configs.get(e.id, "")) for e in s.scenarios]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autograd-demos run {esc(s.run_id)}: {esc(s.status)}</title>
<style>{CSS}</style></head>
<body>
<h1>Run {esc(s.run_id)} {badge(s.status)}</h1>
{table(meta, header=False)}
<p><a href="summary.json">summary.json</a> <a href="config.yaml">config.yaml</a>
<a href="run.log">run.log</a> {rank_logs(run_dir)}<a href="../index.html">all runs</a></p>
<nav>{nav}</nav>
{baseline_section(s.baseline)}
{chr(10).join(sections)}
<script>{ZOOM_JS}{STEPPER_JS}</script>
</body></html>
"""


def rank_logs(run_dir: Path) -> str:
    """Links to the logs of the ranks but 0 (under torchrun), in rank order."""
    try:
        names = [p.name for p in run_dir.iterdir() if re.fullmatch(r"rank\d+\.log", p.name)]
    except OSError:
        return ""
    names.sort(key=lambda n: int(n[4:-4]))
    return "".join(f'<a href="{esc(n)}">{esc(n)}</a> ' for n in names)


def write_report(run_dir: Path, summary: RunSummary, descriptions: Mapping[str, str],
                 configs: Mapping[str, str]) -> Path:
    path = run_dir / "report.html"
    write_atomic(path, render_report(run_dir, summary, descriptions, configs))
    return path


RUN_ID = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?")  # a run folder's name
LOCK_WAIT_S = 10.0  # how long a finished run waits for another run's index rebuild


@contextlib.contextmanager
def locked(path: Path, wait_s: float | None = None) -> Iterator[None]:
    """An exclusive lock on `path` (where the OS has flock), so index rebuilds never interleave.

    Waits at most `wait_s` (default LOCK_WAIT_S) for another process's lock, then raises
    TimeoutError.
    """
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    try:
        import fcntl
    except ImportError:  # Windows: the atomic rename still keeps the file whole
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0), 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted at its name
        os.close(fd)
        raise OSError(f"{path} is not a regular file; remove it")
    with os.fdopen(fd, "r+") as f:  # never through a link planted at the lock's name
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path.name} held by another process for {wait_s:g} s")
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_run(summary_path: Path) -> dict[str, Any] | None:
    """A sibling run's summary.json as the index needs it, or None if it is not one (a link,
    a FIFO, a device, a file over 10 MB, or not a run's JSON); never blocks."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(summary_path, flags)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > 10 << 20:
                return None
            s = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return None
    if not isinstance(s, dict) or not isinstance(s.get("scenarios", []), list) or \
            not all(isinstance(e, dict) for e in s.get("scenarios", [])):
        return None
    return s


def still_running(s: dict[str, Any]) -> bool:
    """Whether the process that wrote a "running" summary is alive (when it ran on this host)."""
    pid = s.get("pid")
    if s.get("host") != socket.gethostname() or not isinstance(pid, int) or \
            not 0 < pid < 2**31:
        return True  # cannot tell from here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def write_index(output_dir: Path) -> list[str]:
    """outputs/index.html: every run in `output_dir`, newest first, linking to its report.

    Returns the folders skipped because their summary.json is not a run's (foreign, broken).
    """
    with locked(output_dir / ".index.lock"):
        for stale in output_dir.glob(".index.html.*.tmp"):  # index temps exist only under this
            if stale.is_file() and not stale.is_symlink():  # lock: these are a killed run's
                with contextlib.suppress(OSError):
                    stale.unlink()
        runs, skipped = [], []
        folders = [p for p in output_dir.iterdir() if p.is_dir() and not p.is_symlink()]
        unfinished = sorted(p.name for p in folders
                            if RUN_ID.fullmatch(p.name) and not (p / "summary.json").exists())
        for summary_path in (p / "summary.json" for p in folders):
            if not os.path.lexists(summary_path):
                continue
            name = summary_path.parent.name
            s = read_run(summary_path)
            if s is None:
                skipped.append(name)
                continue
            if s.get("status") == "running" and not still_running(s):
                s["status"] = "stopped"  # killed (SIGKILL, power) before its final summary
                remove_temps(summary_path.parent)  # what it was writing when it died
            suffix = name.rsplit("-", 1)[1] if name.count("-") == 5 else "0"  # -1, -2: same second
            runs.append((str(s.get("started", "")),
                         int(suffix) if suffix.isascii() and suffix.isdigit() else 0, name, s))
        runs.sort(reverse=True)
        rows = []
        for started, _, name, s in runs:
            entries = s.get("scenarios", [])
            ok = sum(e.get("status") == "passed" for e in entries)
            href = quote(os.fsencode(f"./{name}/report.html"))  # ./: a folder named like
            # http: stays a folder; fsencode: a name whose bytes are not UTF-8 stays itself
            link = (f'<a href="{esc(href)}">{esc(name)}</a>'
                    if (output_dir / name / "report.html").exists() else esc(name))
            rows.append(f"<tr><td>{link}</td><td>{esc(started)}</td><td>{esc(s.get('config'))}"
                        f"</td><td><code>{esc(' '.join(overrides(s) + other_options(s)))}"
                        f"</code></td>"
                        f"<td>{badge(str(s.get('status', '?')))}</td><td>{ok}</td>"
                        f"<td>{len(entries) - ok}</td><td>{esc(s.get('device'))}</td>"
                        f"<td>{'yes' if s.get('dry_run') else ''}</td></tr>")
        rows += [f'<tr><td>{esc(name)}</td><td colspan="8">no summary.json: still running, or '
                 f'stopped without one</td></tr>' for name in reversed(unfinished)]
        others = sweeps_and_comparisons(output_dir, folders)
        page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autograd-demos runs</title>
<style>{CSS}</style></head><body><h1>Runs</h1>
{others}
<table><tr><th>run</th><th>started</th><th>config</th><th>overrides</th><th>status</th>
<th>passed</th><th>failed</th><th>device</th><th>dry run</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
        write_atomic(output_dir / "index.html", page)
    return sorted(skipped)


def overrides(s: dict[str, Any]) -> list[str]:
    """A run's --set overrides: summary.json's `sets`, or read off the command of a run from
    before summaries had them."""
    sets = s.get("sets")
    if isinstance(sets, list):
        return [str(x) for x in sets]
    command = [str(a) for a in s.get("command") or [] if isinstance(a, str)]
    return [b for a, b in zip(command, command[1:]) if a == "--set"]


def other_options(s: dict[str, Any]) -> list[str]:
    """What else in a run's command changes what it checks: --only, --baseline, --dry-run."""
    command = [str(a) for a in s.get("command") or [] if isinstance(a, str)]
    shown = [f"{a} {b}" for a, b in zip(command, command[1:]) if a in ("--only", "--baseline")]
    return shown


def sweeps_and_comparisons(output_dir: Path, folders: list[Path]) -> str:
    """The index's tables of sweep folders (sweep.json) and comparisons (compare.json)."""
    sweeps, comparisons = [], []
    for p in sorted(folders, key=lambda p: p.name, reverse=True):
        href = lambda f: esc(quote(os.fsencode(f"./{p.name}/{f}")))  # noqa: E731
        if (p / "sweep.json").is_file() or p.name.startswith("sweep_"):
            data = read_run(p / "sweep.json")
            if data is None:
                sweeps.append(f"<tr><td>{esc(p.name)}</td><td colspan=\"4\">no sweep.json yet: "
                              f"running, or shards not yet aggregated (--aggregate)</td></tr>")
                continue
            axes = "; ".join(f"{k} = {', '.join(map(str, v))}"
                             for k, v in (data.get("axes") or {}).items())
            sweeps.append(f'<tr><td><a href="{href("sweep.html")}">{esc(p.name)}</a></td>'
                          f"<td>{esc(data.get('config'))}</td><td>{esc(axes)}</td>"
                          f"<td>{len(data.get('points') or [])}</td>"
                          f"<td>{badge(str(data.get('status', '?')))}</td></tr>")
        elif (p / "compare.json").is_file():
            data = read_run(p / "compare.json") or {}
            runs = [str(r.get("label", r.get("run_id", "?"))) if isinstance(r, dict) else str(r)
                    for r in data.get("runs") or []]
            status = {True: "agree", False: "differ"}.get(data.get("agree"), "?")
            comparisons.append(f'<tr><td><a href="{href("compare.html")}">{esc(p.name)}</a>'
                               f"</td><td>{esc(', '.join(runs))}</td>"
                               f"<td>{badge(status)}</td></tr>")
    parts = []
    if sweeps:
        parts.append("<h2>Sweeps</h2><table><tr><th>sweep</th><th>config</th><th>swept</th>"
                     "<th>runs</th><th>status</th></tr>" + "".join(sweeps) + "</table>")
    if comparisons:
        parts.append("<h2>Comparisons</h2><table><tr><th>comparison</th><th>runs</th>"
                     "<th></th></tr>" + "".join(comparisons) + "</table>")
    if parts:
        parts.append("<h2>Runs</h2>")
    return "\n".join(parts)
