"""The documents' notebooks (demos/notebooks/): as tests/notebooks.py writes them, each executed
headless by nbclient in an ipykernel (dry_run set in its parameters cell), and one exported to
HTML by nbconvert and opened in headless Chromium, its steppers pressed."""
from __future__ import annotations

import json
import re
import sys
import time

import pytest

from tests import notebooks
from tests.notebooks import FOLDER, WALKS

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

executed: dict[str, object] = {}  # name: the executed notebook, for the browser test


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A `python3` kernelspec that starts this interpreter's ipykernel, first on JUPYTER_PATH
    (a user's own python3 kernel, another Python, is not the one under test)."""
    pytest.importorskip("ipykernel")
    folder = tmp_path_factory.mktemp("jupyter")
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (tests)", "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(folder))
        mp.setenv("JUPYTER_PLATFORM_DIRS", "1")
        yield


def execute(name: str, folder):
    """The notebook `name`, executed in `folder` with dry_run on (its parameters cell)."""
    nb = nbformat.read(FOLDER / f"{name}.ipynb", as_version=4)
    parameters = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and "dry_run = False" in parameters[0].source
    parameters[0].source = 'dry_run = True\noutput_dir = "outputs"'
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    executed[name] = nb
    return nb


def test_the_notebooks_are_as_the_table_writes_them():
    """One per scenario; regenerate with `python -m tests.notebooks`."""
    from demos.scenarios import registry
    assert sorted(WALKS) == sorted(registry())
    assert sorted(p.name for p in FOLDER.iterdir()) == sorted(f"{n}.ipynb" for n in WALKS)
    for name in WALKS:
        assert (FOLDER / f"{name}.ipynb").read_text(encoding="utf-8") == notebooks.text(name), \
            f"{name}.ipynb differs: python -m tests.notebooks"
        nbformat.validate(nbformat.read(FOLDER / f"{name}.ipynb", as_version=4))


def html_of(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o["data"]["text/html"] for o in cell.outputs
                   if o.output_type == "execute_result" and "text/html" in o["data"])


def result_of(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o["data"]["text/plain"] for o in cell.outputs
                   if o.output_type == "execute_result")


@pytest.mark.parametrize("name", list(WALKS))
def test_a_notebook_walks_its_example(name, tmp_path, kernel):
    nb = execute(name, tmp_path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert errors == []
    assert result_of(nb, "run") == "True"  # the run passed
    runs = sorted(p for p in (tmp_path / "outputs").iterdir() if re.fullmatch(r"\d{4}-.*", p.name))
    first = json.loads((runs[0] / "summary.json").read_text())
    assert first["status"] == "passed" and first["dry_run"] is True
    assert first["command"][:2] == ["runner.py", "run"]  # the shell's command for the same run
    graph = WALKS[name].graph
    stepper = html_of(nb, "stepper")
    assert f'class="backward" data-graph="{graph}"' in stepper and "<script>" in stepper
    entry = html_of(nb, "entry")
    assert f'<section class="scenario" id="{name}">' in entry and "Checks" in entry
    if name == "custom_function":  # the mistake of a class defined in a cell, caught
        assert result_of(nb, "change") == "False"
        second = json.loads((runs[1] / "summary.json").read_text())
        assert {c["name"] for c in second["scenarios"][0]["checks"] if not c["passed"]} == {
            "gradcheck", "parity with the reference"}
        assert second["scenarios"][0]["id"] == "Cube"
    else:
        assert len(runs) == 2 and "compare" in html_of(nb, "compare")
        second = json.loads((runs[1] / "summary.json").read_text())
        assert second["sets"] == [f"scenarios[0].{k}={notebooks_yaml(v)}"
                                  for k, v in WALKS[name].change.items()]


def notebooks_yaml(value) -> str:
    from demos.interactive import yaml_text
    return yaml_text("", value)


@pytest.mark.slow
def test_an_exported_notebook_in_a_real_browser(tmp_path, kernel):
    """legendre_fit's notebook, executed and exported by nbconvert (its lab template): the
    stepper cell's graph and the entry cell's copy of it are two steppers of the same graph
    on one page; each moves alone, every image (loss.png, embedded) loads, no console
    errors."""
    from nbconvert import HTMLExporter

    from tests.test_report import browser

    nb = executed.get("legendre_fit") or execute("legendre_fit", tmp_path)
    nothing = "data:text/javascript,"  # nbconvert's require.js and MathJax: the network's
    page, _ = HTMLExporter(template_name="lab", require_js_url=nothing,
                           mathjax_url=nothing).from_notebook_node(nb)
    path = tmp_path / "legendre_fit.html"
    path.write_text(page, encoding="utf-8")
    driver = browser()
    try:
        driver.get(path.as_uri())
        boxes = driver.find_elements("css selector",
                                     '.autograd-demos .backward[data-graph="graph"]')
        assert len(boxes) == 2  # the stepper cell's and the entry cell's

        def count(box):
            return box.find_element("css selector", ".step-count").text

        steps = count(boxes[0]).split(" of ")[-1]
        for box in boxes:
            driver.execute_script("arguments[0].scrollIntoView()", box)
            assert count(box) == f"step 0 of {steps}"
        nxt = boxes[0].find_element("css selector", "[data-action=next]")
        nxt.click()
        nxt.click()
        assert count(boxes[0]) == f"step 2 of {steps}" and count(boxes[1]) == f"step 0 of {steps}"
        assert boxes[0].find_elements("css selector", "g.node.active")
        assert not boxes[1].find_elements("css selector", "g.node.active")
        boxes[1].find_element("css selector", "[data-action=next]").click()
        assert count(boxes[1]) == f"step 1 of {steps}" and count(boxes[0]) == f"step 2 of {steps}"
        images = driver.execute_script(
            "return Array.from(document.querySelectorAll('.autograd-demos img'), "
            "i => [i.complete, i.naturalWidth])")
        assert images and all(done and width > 0 for done, width in images)
        widths = driver.execute_script(  # every graph fitted to its box, none collapsed
            "return Array.from(document.querySelectorAll('.autograd-demos .graph svg'), "
            "s => s.getBoundingClientRect().width)")
        assert widths and min(widths) > 20
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        assert driver.save_screenshot(str(tmp_path / "notebook.png"))
    finally:
        driver.quit()


@pytest.mark.slow
def test_a_notebooks_interrupt_stops_the_run_whole(tmp_path, kernel):
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
        time.sleep(1.0)
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
