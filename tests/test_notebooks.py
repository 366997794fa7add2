"""The documents' notebooks (demos/notebooks/), part one: as tests/notebooks.py writes them;
half of them executed headless by nbclient in an ipykernel (dry_run set in their parameters
cell; the other half, and the browser, in test_notebooks_in_browser.py, so that two test workers
share them); a real kernel interrupt."""
from __future__ import annotations

import json
import time

import pytest

from tests import notebooks
from tests.notebooks import (  # noqa: F401 (kernel: a fixture)
    CHECKED,
    FIRST_HALF,
    FOLDER,
    WALKS,
    function_of,
    judges_an_edit,
    kernel,
    tiered,
    walks_its_example,
)

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

def test_the_notebooks_are_as_the_table_writes_them():
    """One per scenario that runs in one process; regenerate with `python -m tests.notebooks`."""
    from demos.scenarios import registry
    assert sorted(WALKS) == sorted(n for n, s in registry().items() if not s.data_parallel)
    assert sorted(p.name for p in FOLDER.iterdir() if p.name != "exercises") == \
        sorted(f"{n}.ipynb" for n in WALKS)
    for name in WALKS:
        assert (FOLDER / f"{name}.ipynb").read_text(encoding="utf-8") == notebooks.text(name), \
            f"{name}.ipynb differs: python -m tests.notebooks"
        nbformat.validate(nbformat.read(FOLDER / f"{name}.ipynb", as_version=4))


@pytest.mark.parametrize("name", tiered(FIRST_HALF))
def test_a_notebook_walks_its_example(name, tmp_path, kernel):  # noqa: F811
    walks_its_example(name, tmp_path)


def test_every_notebook_with_a_function_checks_its_own_class():
    """Each tutorial's Function is checked in its notebook, as the notebook defines it, by
    check_function and by the lab's run, and has an edit to try (issue 43)."""
    with_one = sorted(n for n in WALKS if function_of(n))
    assert with_one == sorted(CHECKED) == ["legendre_fit", "linear_function", "multiply_add",
                                           "my_exp", "my_relu"]
    for name in with_one:
        cells = {c["id"]: "".join(c["source"]) for c in json.loads(
            (FOLDER / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]}
        ids, function = list(cells), function_of(name)
        assert ids.index("instruments") < ids.index("check") < ids.index("run")
        assert f"check_function(\n    {function}," in cells["check"]
        assert f"lab.{function} = {function}" in cells["run"]
        assert CHECKED[name].edit[0] in cells[f"tutorial-{function}"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHECKED))
def test_an_edit_of_a_notebooks_function_fails_its_check_and_the_labs_run(name, tmp_path,
                                                                           kernel):  # noqa: F811
    """The edit each notebook invites (P3 without its 1.5, ...), made in its cell and run
    headless: check_function on the notebook's class fails, saying why, and so does the lab's
    run (it checked the scenario file's class, and said PASSED)."""
    judges_an_edit(name, tmp_path)


@pytest.mark.slow
def test_a_notebooks_interrupt_stops_the_run_whole(tmp_path, kernel):  # noqa: F811
    """The kernel interrupted (a notebook's stop button: SIGINT) mid-training: the run stops
    at a step boundary with its folder whole, RunInterrupted is the cell's error, and the
    kernel lives on with its own SIGINT handler back."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        def outputs(msg_id, until=None):
            """The cell's stream text, errors and results; returns early once `until` shows."""
            seen = []
            while True:
                m = kc.get_iopub_msg(timeout=120)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                kind, content = m["msg_type"], m["content"]
                if kind == "stream":
                    seen.append(content["text"])
                elif kind == "error":
                    seen.append(f"{content['ename']}: {content['evalue']}")
                elif kind == "execute_result":
                    seen.append(content["data"]["text/plain"])
                elif kind == "status" and content["execution_state"] == "idle":
                    return "".join(seen)
                if until and until in "".join(seen):
                    return "".join(seen)

        cell = kc.execute("from demos import run\n"
                          "r = run('legendre_fit', steps=10**8, output_dir='outputs')")
        assert "run " in outputs(cell, until=", seed 0")  # the run's first line: it has begun
        deadline = time.monotonic() + 120
        while not any("training: steps" in p.read_text()  # its loop began: a state seen
                      for p in (tmp_path / "outputs").glob("*/run.log")):
            assert time.monotonic() < deadline, "the run's loop did not begin"
            time.sleep(0.05)
        km.interrupt_kernel()
        shown = outputs(cell)
        assert "RunInterrupted: interrupted: what was done is in" in shown
        assert "INTERRUPTED legendre_fit" in shown
        after = kc.execute("import signal, sys\ne = sys.last_value\n"
                           "(e.result.status, e.result['legendre_fit'].summary.steps > 0, "
                           "signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
        assert outputs(after) == "('interrupted', True, True)"
        run_dir = next((tmp_path / "outputs").glob("20*"))
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
        assert (run_dir / "report.html").is_file()
    finally:
        km.shutdown_kernel(now=True)


# -- the exercise notebooks (demos/notebooks/exercises/, issue 45) -----------------------------

EXERCISE_NAMES = ["legendre_fit", "my_relu", "multiply_add", "my_exp", "linear_function"]


def test_the_exercise_notebooks_are_as_the_generator_writes_them():
    assert sorted(p.name for p in notebooks.EXERCISES.iterdir()) == \
        sorted(f"{n}.ipynb" for n in EXERCISE_NAMES)
    for name in EXERCISE_NAMES:
        path = notebooks.EXERCISES / f"{name}.ipynb"
        assert path.read_text(encoding="utf-8") == notebooks.exercise_text(name), \
            f"{path.name} differs: python -m tests.notebooks"
        nbformat.validate(nbformat.read(path, as_version=4))


@pytest.mark.slow  # a kernel each (5 s): the quick tier keeps one notebook, legendre_fit's
@pytest.mark.parametrize("name", EXERCISE_NAMES)
def test_an_exercise_notebook_runs_headless_untouched_and_solved(name, tmp_path, kernel,  # noqa: F811
                                                                  monkeypatch):
    """As shipped (backward raises NotImplementedError) it runs through and its grade cell
    shows 0 points and why; with backward written, full marks."""
    from tests.conftest import ROOT
    from tests.test_exercise import SOLUTIONS

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's demos

    def graded(nb) -> str:
        out = next(c for c in nb.cells if c.get("id") == "grade").outputs
        return "".join(o.get("data", {}).get("text/plain", "") for o in out)

    shown = graded(notebooks.execute_exercise(name, tmp_path))
    assert ": 0/" in shown and "backward is not written yet" in shown, shown
    shown = graded(notebooks.execute_exercise(name, tmp_path, SOLUTIONS[name]))
    points = shown.splitlines()[0].split(": ")[1].split(" ")[0]
    assert points.split("/")[0] == points.split("/")[1] and "FAIL" not in shown, shown
