"""The house keeps its plan: the import rules of pyproject.toml ([tool.importlinter]) hold,
the module map has no circle, and breaking a rule is caught (an upward import from the bottom
layer, shown on a copy of the package)."""
import shutil
import subprocess
import sys

import grimp

from tests.conftest import ROOT


def lint(cwd, pythonpath):
    return subprocess.run([sys.executable, "-c",
                           "from importlinter.cli import lint_imports_command;"
                           " lint_imports_command()",
                           "--no-cache", "--config", str(ROOT / "pyproject.toml")],
                          cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"})


def test_the_import_rules_hold():
    # in its own process: import-linter in-process leaves the logging it set up behind
    proc = lint(ROOT, ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 kept, 0 broken" in proc.stdout


def test_an_upward_import_from_the_bottom_layer_is_caught(tmp_path):
    shutil.copytree(ROOT / "demos", tmp_path / "demos",
                    ignore=shutil.ignore_patterns("__pycache__", "data", "docs"))
    results = tmp_path / "demos" / "lab" / "core" / "results.py"
    results.write_text(results.read_text() + "\n\ndef late():\n"
                       "    from demos.lab.runner import run  # upward, and hidden in a function\n")
    proc = lint(tmp_path, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nothing imports upward BROKEN" in proc.stdout
    assert "demos.lab.core.results -> demos.lab.runner.run" in proc.stdout


def test_torch_in_the_torch_free_layers_is_caught(tmp_path):
    shutil.copytree(ROOT / "demos", tmp_path / "demos",
                    ignore=shutil.ignore_patterns("__pycache__", "data", "docs"))
    page = tmp_path / "demos" / "lab" / "pages" / "report.py"
    page.write_text(page.read_text() + "\nimport torch  # noqa\n")
    proc = lint(tmp_path, tmp_path)
    assert proc.returncode == 1 and "import no torch BROKEN" in proc.stdout, proc.stdout


def test_a_scenario_reaching_past_demos_api_is_caught(tmp_path):
    shutil.copytree(ROOT / "demos", tmp_path / "demos",
                    ignore=shutil.ignore_patterns("__pycache__", "data", "docs"))
    scenario = tmp_path / "demos" / "scenarios" / "my_exp.py"
    scenario.write_text(scenario.read_text() + "\nfrom demos.lab.core import schema  # noqa\n")
    proc = lint(tmp_path, tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "through demos.scenario_api alone BROKEN" in proc.stdout
    assert "demos.scenarios.my_exp -> demos.lab.core.schema" in proc.stdout


def cycles(graph):
    """The strongly connected parts of the import graph with more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
                on.discard(part[-1])
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_module_map_has_no_circle():
    # every import counts, those inside functions too: a lazy import hides a circle, not ends it
    graph = grimp.build_graph("demos", exclude_type_checking_imports=True, cache_dir=None)
    assert cycles(graph) == []
    imported = graph.find_modules_directly_imported_by("demos.lab.core.config")
    assert "demos.lab.core.schema" in imported
    graph.add_import(importer="demos.lab.core.schema", imported="demos.lab.core.config")
    found = cycles(graph)  # the circle, with every module on a path between the two
    assert len(found) == 1 and {"demos.lab.core.config", "demos.lab.core.schema"} <= set(found[0])


def test_the_root_package_is_the_top_layer():
    """demos/__init__.py (the Python API's names, loaded on first use) sits above every layer:
    no module of the package imports it (import-linter's layers cannot name it: a layer may
    not contain another). scenario_api took `lazily` from it once; caught here."""
    graph = grimp.build_graph("demos", exclude_type_checking_imports=True, cache_dir=None)
    assert graph.find_modules_that_directly_import("demos") == set()
    graph.add_import(importer="demos.scenario_api", imported="demos")  # the old upward import
    assert graph.find_modules_that_directly_import("demos") == {"demos.scenario_api"}
