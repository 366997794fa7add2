"""The README's images, drawn anew from current runs: `python -m tests.readme_images`.

Each PNG carries a stamp: a hash of the code that draws what it shows (the pages' templates and
static files, plots.py, render.py). tests/test_readme.py compares the stamps with the code as it
is, so an image cannot silently go stale: change the pages or the plots, and the test asks for
this command. Needs Debian's chromium and chromedriver (make browser) and graphviz's dot.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "demos" / "docs"
DRAWN_BY = [*sorted((ROOT / "demos/lab/pages/templates").iterdir()),
            *sorted((ROOT / "demos/lab/pages/static").iterdir()),
            ROOT / "demos/lab/pages/plots.py", ROOT / "demos/lab/instruments/render.py"]
STAMP = "autograd-demos-drawn-by"  # the PNG text chunk that holds the hash
# README image: (run's entry file) copied from a full run of configs/all.yaml
COPIED = {"legendre_fit.png": "legendre_fit/fit.png", "my_relu_loss.png": "my_relu/loss.png",
          "lenet_accuracy.png": "lenet/accuracy.png"}
SHOT = ("report.png", "custom_ok.png", "custom_mistake.png", "backward_stepper.png",
        "multiply_add_graph.png")


def drawn_by() -> str:
    """The hash of the code that draws the images."""
    h = hashlib.sha256()
    for path in DRAWN_BY:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def stamp_of(path: Path) -> str | None:
    from PIL import Image

    with Image.open(path) as im:
        return im.info.get(STAMP)


def stamped(source: Path, target: Path, crop: tuple[int, int, int, int] | None = None) -> None:
    """`source` saved as `target` with the stamp (and cropped to `crop`)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(STAMP, drawn_by())
    with Image.open(source) as im:
        (im.crop(crop) if crop else im).save(target, pnginfo=info)


def run(config: str, out: Path) -> Path:
    subprocess.run([sys.executable, "runner.py", "--config", config, "--no-progress",
                    "--output-dir", str(out)], cwd=ROOT, check=False, capture_output=True)
    return next(p for p in out.iterdir() if p.is_dir())


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--disable-background-networking"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or "chromium"
    return webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")),
                            options=options)


def section_shot(driver, report: Path, target: Path, tmp: Path) -> None:
    """An entry's head, its verdict and its checks (its failed ones first), unfolded: the rest
    of the section (its graph, numbers and folded details) hidden for the picture. The element
    fits the window, so the picture is all page, no band beyond it."""
    driver.get(report.as_uri())
    section = driver.find_element("css selector", "section.scenario")
    driver.execute_script(
        "var s = arguments[0];"
        "s.querySelector('details.checks').open = true;"
        "Array.from(s.children).forEach(function (c) {"
        "  if (!c.matches('h2, p.doc, p.verdict, p.error-text, div.failures, details.checks'))"
        "    c.style.display = 'none'; });", section)
    section.screenshot(str(tmp / "section.png"))
    stamped(tmp / "section.png", target)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        full = run("configs/all.yaml", tmp / "all")
        for image, entry_file in COPIED.items():
            stamped(full / entry_file, DOCS / image)
        subprocess.run(["dot", "-Tpng", "-Gdpi=72", "-o", str(tmp / "graph.png"),
                        str(full / "multiply_add" / "graph.gv")], check=True)
        stamped(tmp / "graph.png", DOCS / "multiply_add_graph.png")
        driver = browser()
        try:
            driver.set_window_size(1100, 1300)
            driver.get((full / "report.html").as_uri())
            driver.save_screenshot(str(tmp / "report.png"))
            stamped(tmp / "report.png", DOCS / "report.png")
            driver.set_window_size(900, 1600)
            for name, image in (("cube_ok", "custom_ok.png"),
                                ("cube_mistake", "custom_mistake.png")):
                section_shot(driver, run(f"configs/examples/{name}.yaml", tmp / name) /
                             "report.html", DOCS / image, tmp)
            driver.get((full / "report.html").as_uri())  # the stepper at step 3
            box = driver.find_element("css selector",
                                      'section#autograd_internals .backward[data-graph="graph"]')
            driver.execute_script("arguments[0].scrollIntoView()", box)
            for _ in range(3):
                box.find_element("css selector", "[data-action=next]").click()
            box.screenshot(str(tmp / "stepper.png"))
            stamped(tmp / "stepper.png", DOCS / "backward_stepper.png")
        finally:
            driver.quit()
    print(f"demos/docs: {len(COPIED) + len(SHOT)} images drawn, stamped {drawn_by()}")


if __name__ == "__main__":
    main()
