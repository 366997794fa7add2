"""Inline views: a run, an entry, a graph's stepper or a support matrix in a notebook's output
(the `_repr_html_` of demos.run's results), as the report shows them (demos/docs/python.md,
"Inline, in notebooks").
"""
from __future__ import annotations

import base64
import html
import os
import re
import uuid
from pathlib import Path
from urllib.parse import quote

from demos.lab.pages.templating import static

BOX = "autograd-demos"  # the class of every view's box; the stylesheet is scoped to it
MAX_EMBEDDED = 8 * 2**20  # an image larger than this is linked, not embedded
IMAGE_TYPES = {".png": "image/png", ".gif": "image/gif", ".svg": "image/svg+xml"}
# the scope of a view's rules, its class three times over: a notebook's own table rules
# (JupyterLab's `:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td {text-align: right}`,
# two classes) would otherwise win over the report's and right-align every check
SCOPE = f".{BOX}" * 3
# inside a notebook's output the page's own margins go: the box sits in the output's width
# (scoped as the page's `body` rule it overrides, and after it)
BOX_STYLE = f"{SCOPE} {{ margin: 0; padding: 0.2em 0.4em 0.6em; max-width: none; }}"


def view(body: str, folder: Path | None) -> str:
    """`body` (a template's HTML, its paths relative to `folder`) as one inline view: in its
    own box with the pages' stylesheet scoped to it, its images embedded, its links made
    relative to the working directory, and the page's scripts run over that box alone."""
    box = f"ad-{uuid.uuid4().hex[:12]}"
    style = scoped(str(static("report.css")), SCOPE)
    body = body if folder is None else localized(body, folder)
    graphs = 'class="zoom"' in body or 'class="backward"' in body
    parts = [f'<div class="{BOX}" id="{box}">', f"<style>\n{style}\n{BOX_STYLE}\n</style>",
             held_back(body) if graphs else body]
    if graphs:
        # the script finds its own box: document.currentScript is this script while it runs
        # (outputs' scripts are re-inserted to run), the box's id where that is not set; it
        # puts each graph's SVG in place of its picture first (see held_back)
        parts.append(f"<script>(function (root) {{\n{SHOW_SVG}\n{static('zoom.js')}\n"
                     f"{static('stepper.js')}\n}})(document.currentScript ? "
                     f"document.currentScript.parentNode : document.getElementById('{box}'));"
                     f"</script>")
    parts.append("</div>")
    return "\n".join(parts)


GRAPH = re.compile(r'(<div class="graph" id="[^"]*">)(<svg\b.*?</svg>)\s*(</div>)', re.S)
# run first in a view's script: each held-back SVG into its box, in place of the picture
SHOW_SVG = """root.querySelectorAll('script.ad-svg').forEach(function (s) {
  var holder = s.parentNode, img = holder.querySelector('img.ad-picture');
  holder.insertAdjacentHTML('beforeend', s.textContent);
  s.remove(); if (img) img.remove();
});"""


def held_back(body: str) -> str:
    """Each inline graph SVG as a picture (data:image/svg+xml) plus its markup in a script
    element, which the view's script puts in place: for a notebook that is not trusted
    (demos/docs/python.md); no stray text of its labels is left there."""
    def hold(m: re.Match[str]) -> str:
        svg = m[2]
        picture = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        return (f'{m[1]}<img class="ad-picture" alt="autograd graph" '
                f'src="data:image/svg+xml;base64,{picture}">'
                f'<script type="image/svg+xml" class="ad-svg">{svg}</script>{m[3]}')

    return GRAPH.sub(hold, body)


RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")


def scoped(css: str, scope: str) -> str:
    """A stylesheet of plain rules (the pages' own: no @media, no nesting) with every
    selector inside `scope`: `body` becomes the scope itself, `table` becomes `scope table`."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)

    def one(selector: str) -> str:
        selector = " ".join(selector.split())
        if selector == "body" or selector.startswith("body "):
            return scope + selector[4:]
        return f"{scope} {selector}"

    return "\n".join(f"{', '.join(one(s) for s in m[1].split(','))} {{{m[2]}}}"
                     for m in RULE.finditer(css) if m[1].strip())


LINKED = re.compile(r'(<(?:img|a)\b[^>]*?\b(src|href)=")([^"]*)(")')


def localized(body: str, folder: Path) -> str:
    """`body` with its relative paths (to `folder`) resolved: images as data: URIs, links
    relative to the working directory; anchors (#...) and URLs (data:, https:) as they are."""
    def fix(m: re.Match[str]) -> str:
        value = html.unescape(m[3])
        if not value or value.startswith("#") or re.match(r"[a-zA-Z][\w+.-]*:", value):
            return m[0]
        path = folder / value
        new = embedded(path) if m[2] == "src" else None
        return m[1] + html.escape(new or here(path)) + m[4]

    return LINKED.sub(fix, body)


def embedded(path: Path) -> str | None:
    """The image at `path` as a data: URI; None when it is not one, too large, or unreadable
    (it is then linked)."""
    kind = IMAGE_TYPES.get(path.suffix.lower())
    try:
        if kind is None or path.stat().st_size > MAX_EMBEDDED:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def here(path: Path) -> str:
    """`path` as a link from the working directory (a file: URI where none exists)."""
    try:
        return quote(os.path.relpath(path))
    except ValueError:  # another drive (Windows)
        return path.absolute().as_uri()
