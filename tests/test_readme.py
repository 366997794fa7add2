"""The docs stay true to the code: README.md (the tour) and the reference pages in demos/docs/.
Their config tables are generated from the declarations, their transcripts are replayed, the
README's "Add a scenario" section really works, and its Quickstart is as shipped."""
import contextlib
import io
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from demos.cli import main
from demos.scenarios import registry
from tests import docs
from tests.conftest import ROOT
from tests.readme_tables import TABLES, current, generate

README = docs.text()


def section(title: str) -> str:
    return docs.section(README, title)


def test_the_config_tables_are_generated_from_the_code():
    assert current(TABLES.read_text()) == generate(), "run: python -m tests.readme_tables"


def test_the_readme_is_a_tour():
    """Reference material lives in demos/docs/; the README stays short enough to read."""
    assert len(README.splitlines()) <= 450


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path) -> set[str]:
    prose = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", prose, re.M)}


def test_every_link_between_the_docs_resolves_and_every_page_is_linked():
    linked = set()
    for path in docs.files():
        for target in docs.links(path):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            assert resolved.is_file(), f"{path.name}: {target}"
            if anchor and resolved.suffix == ".md":
                assert anchor in anchors(resolved), f"{path.name}: {target}"
            if path == docs.README_PATH:
                linked.add(resolved)
    pages = docs.pages()
    assert len(pages) >= 10
    assert [p.name for p in pages if p.resolve() not in linked] == [], "pages the README omits"


def test_every_scenario_has_a_row_and_a_config():
    rows = re.findall(r"^\| `(\w+)` \|", section("Scenarios"), re.M)
    assert sorted(rows) == sorted(registry())
    for name, s in registry().items():  # a data-parallel one as torchrun starts it
        assert ("runner.py" if s.data_parallel else "python runner.py") + \
            f" --config configs/{name}.yaml" in README
        assert (ROOT / "configs" / f"{name}.yaml").is_file()


def test_add_a_scenario_really_holds(tmp_path):
    """The section's two files, dropped into a copy of the package, make a working scenario."""
    text = section("Add a scenario")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    config = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    shutil.copytree(ROOT / "demos", tmp_path / "demos",
                    ignore=shutil.ignore_patterns("__pycache__", "docs"))
    (tmp_path / "demos" / "scenarios" / "line_fit.py").write_text(code)
    (tmp_path / "line_fit.yaml").write_text(config)
    run = subprocess.run([sys.executable, "-m", "demos", "--config", "line_fit.yaml",
                          "--output-dir", "out"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    listed = subprocess.run([sys.executable, "-m", "demos", "--list"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60).stdout
    assert "line_fit  " in listed
    data = json.loads(next((tmp_path / "out").glob("*/summary.json")).read_text())
    e = data["scenarios"][0]
    assert (e["scenario"], e["status"]) == ("line_fit", "passed")
    assert sorted(e["artifacts"]) == sorted(["metrics.csv", "loss.png", "graph.gv", "graph.pdf",
                                             "graph.svg", "graph_grads.gv", "graph_grads.pdf",
                                             "graph_grads.svg", "explain.txt", "backward.json"])


def test_quickstart_has_exactly_the_two_make_commands():
    block = re.search(r"```bash\n(.*?)```", section("Quickstart"), re.S).group(1)
    assert [ln.split("#")[0].strip() for ln in block.splitlines()] == ["make demo", "make test"]


def test_the_docs_pictures_exist():
    """Image links are relative to the file: demos/docs/x.png from README, x.png from a page."""
    seen = 0
    for doc in docs.files():
        for path in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", doc.read_text()):
            assert (doc.parent / path).is_file(), f"{doc.name}: {path}"
            seen += 1
    assert seen >= 8


RUN_ID = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?")


def normalized(line: str, output_dir: str) -> str:
    """A console line without what differs between runs: run ids, timings, where it ran."""
    line = RUN_ID.sub("RUN", line.replace(output_dir, "outputs"))
    line = re.sub(r"in \d+\.\d+ s", "in T s", line)
    return re.sub(r"^run RUN: torch \S+, device .*$", "run RUN: torch ..., device ...", line)


def transcripts():
    """(command, expected lines, expected exit code or None) for each `$ python runner.py` in
    the code blocks of the README and of every page in demos/docs/."""
    blocks = [b for doc in docs.files()
              for b in re.findall(r"```\n(\$ python runner\.py.*?)```", doc.read_text(), re.S)]
    for block in blocks:
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            command, output, code = lines[i][2:], [], None
            i += 1
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            if i < len(lines) and lines[i] == "$ echo $?":
                code, i = int(lines[i + 1]), i + 2
            yield command, output, code


@pytest.mark.parametrize("command, expected, code", list(transcripts()),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_the_readme_transcripts_are_what_the_runner_prints(tmp_path, monkeypatch, command,
                                                          expected, code):
    args = shlex.split(command)[2:]  # after "python runner.py"
    monkeypatch.chdir(ROOT)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        got = main([*args, "--no-progress", "--output-dir", str(tmp_path / "outputs")])
    printed = (out.getvalue() + err.getvalue()).splitlines()
    assert [normalized(ln, str(tmp_path / "outputs")) for ln in printed] == \
        [normalized(ln, "outputs") for ln in expected]
    if code is not None:
        assert got == code


def test_the_quoted_explain_txt_is_what_the_runner_writes(dry_run):
    quoted = docs.page("output.md").split("Here is part of `autograd_internals/explain.txt`:", 1)[1]
    quoted = re.search(r"```\n(.*?)```", quoted, re.S).group(1).splitlines()
    real = (dry_run.dir / "autograd_internals" / "explain.txt").read_text().splitlines()
    lines = [ln for ln in quoted if ln != "..."]
    assert lines == real[:len(lines)]


def test_the_summary_json_example_has_the_real_keys(dry_run):
    example = json.loads(re.search(r"`summary.json`:\n\n```json\n(.*?)```", docs.page("output.md"),
                                   re.S).group(1))
    real = dry_run.summary
    assert set(example) == set(real)
    assert set(example["scenarios"][0]) == set(real["scenarios"][0]) - {"inspection"}
    assert set(example["determinism"]) - {"..."} <= set(real["determinism"])


def test_the_config_tables_render_on_github():
    """Each row on one line (a newline in a cell splits the row), and "(required)" only where a
    config must give the key."""
    text = generate()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(r.endswith(" |") and r.count(" | ") >= 3 for r in rows)
    lines = text.splitlines()
    for before, line in zip(lines, lines[1:]):  # no stray line inside a table
        assert not (before.startswith("|") and line and not line.startswith("|")), line
    cells = {r.split(" | ")[0][3:-1]: r.split(" | ")[2] for r in rows}
    assert cells["require"] == "`[]`" and cells["scenarios"] == "(required)"
    assert cells["function"] == "(required)" and cells["inputs"] == "(required)"


def test_the_readme_screenshots_end_in_the_page_not_in_a_black_band():
    """custom_ok.png and custom_mistake.png were cropped below the element's picture, which
    left a black band along their bottom: every screenshot's last rows are the page's."""
    from PIL import Image

    from tests import readme_images

    for name in readme_images.SHOT:
        with Image.open(readme_images.DOCS / name) as im:
            rgb = im.convert("RGB")
            bottom = rgb.crop((0, rgb.height - 4, rgb.width, rgb.height)).convert("L")
            dark = bottom.point(lambda v: 255 if v < 40 else 0).histogram()[255]
            assert dark < bottom.width * bottom.height // 2, name


def test_the_readme_images_are_drawn_by_the_code_as_it_is():
    """Each image carries the hash of the pages' templates and static files, plots.py and
    render.py that drew it; change them and this asks for `python -m tests.readme_images`."""
    from tests import readme_images

    current = readme_images.drawn_by()
    for name in [*readme_images.COPIED, *readme_images.SHOT]:
        assert readme_images.stamp_of(readme_images.DOCS / name) == current, (
            f"demos/docs/{name} is stale: run python -m tests.readme_images")
