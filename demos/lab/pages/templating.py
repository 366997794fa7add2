"""The pages' one jinja2 environment: the templates in templates/, the stylesheets and
scripts in static/, inlined, so that each page is one file that works offline.

Autoescaped: every value a template shows is escaped unless it is Markup, and the only
Markup handed in is the graphviz SVG (report.inline_svg). jinja2 loads when a page is
written, never at start-up.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

PACKAGE = "demos.lab.pages"


def fmt(value: Any) -> str:
    """A value as the pages show it: floats to 8 significant digits, None as a dash."""
    if isinstance(value, float):
        return f"{value:.8g}"
    return "—" if value is None else str(value)


@functools.cache
def environment() -> jinja2.Environment:
    """Templates by name ("report.html.j2"); static files as "static/<name>", for include."""
    import jinja2

    loader = jinja2.ChoiceLoader([
        jinja2.PackageLoader(PACKAGE, "templates"),
        jinja2.PrefixLoader({"static": jinja2.PackageLoader(PACKAGE, "static")}),
    ])
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["fmt"] = fmt
    env.policies["json.dumps_kwargs"] = {"allow_nan": False}  # |tojson: strict JSON, in order
    return env


def render(template: str, **context: Any) -> str:
    """The text of `template` with `context`."""
    return environment().get_template(template).render(**context)
