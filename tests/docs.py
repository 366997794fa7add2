"""The documentation: README.md, the tour, and the reference pages in demos/docs/ it links to.
The tests that hold the docs to the code read them through here."""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

DOCS = ROOT / "demos" / "docs"
README_PATH = ROOT / "README.md"


def pages() -> list[Path]:
    """Every reference page, demos/docs/*.md, in name order."""
    return sorted(DOCS.glob("*.md"))


def files() -> list[Path]:
    """README.md, then every reference page."""
    return [README_PATH, *pages()]


def text(path: Path = README_PATH) -> str:
    return path.read_text()


def page(name: str) -> str:
    """The text of demos/docs/<name>."""
    return (DOCS / name).read_text()


def section(source: str, title: str, level: int = 2) -> str:
    """The body of the `## title` section of `source` (a heading of that level), up to the next
    heading of that level or above."""
    marks = "#" * level
    return source.split(f"\n{marks} {title}\n", 1)[1].split(f"\n{marks} ", 1)[0]


def links(path: Path) -> list[str]:
    """The targets of the Markdown links and images in a file, outside code blocks."""
    prose = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", prose)
