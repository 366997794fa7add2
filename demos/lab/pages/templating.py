"""The pages' one jinja2 environment: the templates in templates/, autoescaped, with static/
inlined (demos/docs/output.md, "The pages"). The only Markup handed in is the graphviz SVG
(report.inline_svg).
"""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

PACKAGE = "demos.lab.pages"


def fmt(value: Any) -> str:
    """A value as the pages show it: floats to 8 significant digits, None as a dash."""
    if isinstance(value, float):
        return f"{value:.8g}"
    return "—" if value is None else str(value)


def rate(value: float | None) -> str:
    """A rate as a person reads it: whole numbers with thousands separators from 100 on
    (2,351 steps/s), 3 significant digits below; a dash for none."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def breakable(value: Any) -> Any:
    """Text that may wrap only after a path's or a key's separators (/ _ = ,), never inside
    a word: a config path or a --set in a narrow table cell, escaped, with <wbr> there."""
    import markupsafe

    text = markupsafe.escape(visible_text("" if value is None else str(value)))
    return markupsafe.Markup(re.sub(r"([/_=,])", r"\1<wbr>", str(text)))


@functools.cache
def static(name: str) -> Any:
    """A file of static/ (CSS, JS), as it is: inlined raw, never read as a template."""
    from importlib import resources

    import markupsafe

    return markupsafe.Markup(resources.files(PACKAGE).joinpath("static").joinpath(name)
                             .read_text(encoding="utf-8"))


@functools.cache
def environment() -> jinja2.Environment:
    """Templates by name ("report.html.j2"); `static(name)` inlines a file of static/."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader(PACKAGE, "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.finalize = visible_text  # every {{ value }}: control characters shown, not kept
    env.globals["static"] = static
    env.filters.update(fmt=fmt, rate=rate, breakable=breakable)
    env.policies["json.dumps_kwargs"] = {"allow_nan": False}  # |tojson: strict JSON, in order
    return env


def visible_text(value: Any) -> Any:
    """A value a page shows: text with its control characters escaped as the console shows
    them (`\x1b`: a run folder's name may hold an escape sequence); markup (Markup: the inline
    SVG, |tojson) as it is. The template then escapes the text's markup characters."""
    import markupsafe

    from demos.lab.core.console import shown

    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return shown(value, None)
    return value


def render(template: str, part: str | None = None, **context: Any) -> str:
    """The text of `template` with `context`; with `part`, only that block of it (the "body"
    or "style" of a page, for an inline view: demos.lab.pages.inline)."""
    page = environment().get_template(template)
    if part is None:
        return page.render(**context)
    return "".join(page.blocks[part](page.new_context(context)))
