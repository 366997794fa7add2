"""The documents' notebooks, part two: the other half executed headless (see
test_notebooks.py), and one of them exported to HTML by nbconvert and opened in headless
Chromium, its steppers pressed."""
from __future__ import annotations

import pytest

from tests.notebooks import (  # noqa: F401 (kernel: a fixture)
    FIRST_HALF,
    WALKS,
    execute,
    executed,
    kernel,
    tiered,
    walks_its_example,
)

pytest.importorskip("nbclient")


@pytest.mark.parametrize("name", tiered([n for n in WALKS if n not in FIRST_HALF]))
def test_a_notebook_walks_its_example(name, tmp_path, kernel):  # noqa: F811
    walks_its_example(name, tmp_path)


@pytest.mark.slow
def test_an_exported_notebook_in_a_real_browser(tmp_path, kernel):  # noqa: F811
    """legendre_fit's notebook, executed and exported by nbconvert (its lab template): the
    stepper cell's graph and the entry cell's copy of it are two steppers of the same graph
    on one page; each moves alone, every image (loss.png, embedded) loads, the tables' cells
    are left-aligned under JupyterLab's own CSS, no console errors."""
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
        aligned = driver.execute_script(  # JupyterLab's CSS right-aligns table cells
            "return Array.from(document.querySelectorAll('.autograd-demos td'), "
            "c => getComputedStyle(c).textAlign)")
        assert aligned and set(aligned) == {"left"}, set(aligned)
        boxes_css = driver.execute_script(  # the output's width, not the page's 1100 px
            "return Array.from(document.querySelectorAll('.autograd-demos'), "
            "b => getComputedStyle(b).maxWidth + ' ' + getComputedStyle(b).marginLeft)")
        assert boxes_css and set(boxes_css) == {"none 0px"}, set(boxes_css)
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        assert driver.save_screenshot(str(tmp_path / "notebook.png"))
    finally:
        driver.quit()


