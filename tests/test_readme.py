"""The README stays true to the code: its tables are generated from the declarations, its
"Add a scenario" section really works, and its Quickstart is as shipped."""
import json
import re
import shutil
import subprocess
import sys

from demos.scenarios import registry
from tests.conftest import ROOT
from tests.readme_tables import current, generate

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_config_tables_are_generated_from_the_code():
    assert current(README) == generate(), "run: python -m tests.readme_tables"


def test_every_scenario_has_a_row_and_a_config():
    rows = re.findall(r"^\| `(\w+)` \|", section("Scenarios"), re.M)
    assert sorted(rows) == sorted(registry())
    for name in registry():
        assert f"python runner.py --config configs/{name}.yaml" in README
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
                                             "graph.svg", "explain.txt"])


def test_quickstart_has_exactly_the_two_make_commands():
    block = re.search(r"```bash\n(.*?)```", section("Quickstart"), re.S).group(1)
    assert [ln.split("#")[0].strip() for ln in block.splitlines()] == ["make demo", "make test"]


def test_readme_pictures_exist():
    for path in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README):
        assert (ROOT / path).is_file(), path
