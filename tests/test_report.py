"""report.html and index.html: self-contained, every link real, and looked at in a real browser."""
import html.parser
import json
import multiprocessing
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from demos.cli import main
from demos.lab.pages.index import write_index
from tests.conftest import CONFIGS, a_summary, only_run_dir, summary


class Links(html.parser.HTMLParser):
    """Every src/href of a page, and anything that would reach the network."""

    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append(value)


def links_of(page: Path) -> Links:
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_report_is_self_contained_and_every_link_exists(dry_run):
    dry_run = dry_run.dir
    page = dry_run / "report.html"
    links = links_of(page)
    assert "link" not in links.tags  # no stylesheets or fonts from anywhere
    for ref in links.refs:
        assert "://" not in ref and not ref.startswith("//"), ref  # nothing from a network
        target = ref.split("#")[0]
        if target:
            assert (page.parent / target).exists(), ref
    text = page.read_text()
    for e in summary(dry_run)["scenarios"]:
        assert f'<section class="scenario" id="{e["id"]}">' in text
        assert f'{e["id"]}/graph' in text and f'{e["id"]}/explain.txt' in text
    assert "legendre_fit/fit.gif" in text and "lenet/accuracy.png" in text
    assert "Graph walk (explain.txt)" in text and "Resolved config" in text


def test_failures_come_first_and_are_marked(tmp_path):
    code = main(["--config", str(CONFIGS / "my_exp.yaml"), "--no-progress", "--output-dir",
                 str(tmp_path), "--set", "scenarios.my_exp.expect.metrics.max_grad_error.max=-1"])
    assert code == 1
    text = (only_run_dir(tmp_path) / "report.html").read_text()
    verdict = text.split('<p class="verdict">')[1].split("</p>")[0]
    assert "1 of 11 checks failed</b>: expect metrics.max_grad_error." in verdict
    failures = text.split('<div class="failures">')[1].split("</table>")[0]  # not folded
    assert failures.count("<tr") == 2 and 'class="fail"' in failures.split("<tr")[2]
    assert "expect metrics.max_grad_error" in failures
    others = text.split('<details class="checks">')[1].split("</details>")[0]  # folded
    assert "The other checks, each with what it compared (10)" in others
    assert 'class="fail"' not in others and others.count('class="pass"') == 10
    assert '<span class="badge failed">FAILED</span>' in text


class WrongCube(torch.autograd.Function):
    """x ** 3 with a classic mistake: its backward forgets the 3 of 3 x^2."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * x ** 2


def test_a_failing_entry_shows_its_verdict_and_why_above_its_pictures_and_graphs(tmp_path):
    """What went wrong first: the verdict and each failed check with its why come before the
    graphs (they sat below them, a screen or more down); each why once; a passing entry's
    section keeps the pictures first (test_each_scenario_shows_its_pictures_...)."""
    from demos import check_function

    r = check_function(WrongCube, inputs={"x": torch.randn(5, 3, requires_grad=True)},
                       reference=lambda x: x ** 3, support=[], output_dir=tmp_path, quiet=True)
    assert not r.passed
    page = (r.folder / "report.html").read_text()
    part = page.split('<section class="scenario" id="WrongCube">')[1]
    pictures = min(i for i in (part.find("<img"), part.find('class="graph"')) if i >= 0)
    verdict, why = part.index('<p class="verdict">'), part.index('<div class="why">')
    assert verdict < why < pictures
    assert "2 of " in part[verdict:why] and "gradcheck; parity with the reference" in \
        part[verdict:why]
    assert part.count('<div class="why">') == 2  # gradcheck's and parity's, once each
    assert "1/3 times the right one" in part[why:pictures]


def test_index_lists_runs_newest_first(tmp_path):
    for _ in range(2):
        assert main(["--config", str(CONFIGS / "my_exp.yaml"), "--no-progress",
                     "--output-dir", str(tmp_path)]) == 0
    runs = sorted((p.name for p in tmp_path.iterdir() if p.is_dir()), reverse=True)
    text = (tmp_path / "index.html").read_text()
    assert text.index(f'href="./{runs[0]}/report.html"') < \
        text.index(f'href="./{runs[1]}/report.html"')
    assert all(f'href="./{r}/report.html"' in text for r in runs)
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".") and "tmp" in p.name] == []


def fake_run(output_dir: Path, name: str) -> None:
    """A finished run's folder as the index reads it: summary.json and report.html."""
    folder = output_dir / name
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(a_summary(started=name)))
    (folder / "report.html").write_text("<html></html>")


def test_index_is_whole_when_runs_finish_together(tmp_path):
    """Four processes rebuild the index at once (as four runs ending together do)."""
    for i in range(4):
        fake_run(tmp_path, f"2026-01-01_00-00-0{i}")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(write_index, [tmp_path] * 4 * 5)
    text = (tmp_path / "index.html").read_text()
    assert text.count("/report.html") == 4 and text.rstrip().endswith("</html>")
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def browser():
    """A headless Chromium driven by selenium, or a skip saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium "
                    "chromium-driver; make test does this where it can)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-quic", "--no-first-run", "--window-size=1280,2000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)


def look_at(page: Path, screenshot: Path, expected_ids):
    driver = browser()
    try:
        driver.get(page.as_uri())
        driver.execute_script("return document.readyState")
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, "
            "i.naturalWidth])")
        assert images and all(done and width > 0 for _, done, width in images), images
        ids = driver.execute_script(
            "return Array.from(document.querySelectorAll('section.scenario')).map(s => s.id)")
        assert ids == expected_ids
        heights = driver.execute_script(  # every graph opens fitted: none taller than its box
            "return Array.from(document.querySelectorAll('.graph svg'), s => s.clientHeight)")
        assert heights and max(heights) <= 640, heights
        graph = driver.find_element("css selector", ".graph svg")  # inline, for the stepper
        before = graph.size["width"]
        driver.find_element("css selector", ".zoom button[data-z='1.25']").click()
        assert graph.size["width"] > before  # the zoom works
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        assert driver.save_screenshot(str(screenshot))
        assert screenshot.read_bytes().startswith(b"\x89PNG")
    finally:
        driver.quit()


@pytest.mark.slow
def test_report_in_a_real_browser(dry_run, tmp_path):
    ids = [e["id"] for e in dry_run.summary["scenarios"]]
    look_at(dry_run.dir / "report.html", tmp_path / "report.png", ids)


@pytest.mark.slow
def test_the_reports_first_screen_shows_the_first_scenarios_pictures(dry_run):
    """At 1280 x 800 the first scenario's first picture starts on the first screen (it was
    about 1,900 px down, under the run's metadata, the checks and the support matrix)."""
    driver = browser()
    try:
        driver.set_window_size(1280, 800)
        driver.get((dry_run.dir / "report.html").as_uri())
        top, height = driver.execute_script(
            "var i = document.querySelector('section.scenario img');"
            "return [i.getBoundingClientRect().top + window.scrollY, window.innerHeight];")
        assert top < height, (top, height)
    finally:
        driver.quit()


def test_each_scenario_shows_its_pictures_and_graphs_before_its_checks(dry_run):
    """The lesson first: in every section the pictures and graphs, in the document's order,
    come before the verdict and the checks (folded unless one failed); the run's metadata
    and each support matrix folded."""
    text = (dry_run.dir / "report.html").read_text()
    head, *sections = text.split('<section class="scenario"')
    assert '<details class="run-details">' in head and head.index(
        '<details class="run-details">') < head.index("numbers from")
    for part in sections:
        sid = part.split('"', 2)[1]
        pictures = [i for i in (part.find("<img"), part.find('class="graph"')) if i >= 0]
        assert pictures and max(pictures) < part.index('<p class="verdict">'), sid
        assert part.index('<p class="verdict">') < part.index('<details class="checks">'), sid
        if "<table class=\"support\">" in part:
            assert part.index('<details class="support">') < part.index('<table class="support">')
    graph = sections[[s.split('"', 2)[1] for s in sections].index("computation_graph")]
    order = [graph.index(f"Autograd graph: {g}<") for g in
             ("graph_requires_grad", "graph_no_grad", "graph_detach")]  # document 001's order
    assert order == sorted(order)
    legendre = sections[0]
    assert legendre.index("Autograd graph: graph<") < \
        legendre.index("Autograd graph: forward_mode<")
    assert "backward runs against them" in legendre  # what the stepper's arrows mean


@pytest.mark.slow
def test_report_still_works_zipped_and_moved(dry_run, tmp_path):
    dry_run = dry_run.dir
    archive = shutil.make_archive(str(tmp_path / "run"), "zip", dry_run.parent, dry_run.name)
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path / "elsewhere")
    moved = tmp_path / "elsewhere" / dry_run.name
    ids = [e["id"] for e in summary(moved)["scenarios"]]
    look_at(moved / "report.html", tmp_path / "moved.png", ids)


def test_open_needs_a_display_and_uses_the_browser_when_there_is_one(tmp_path, monkeypatch):
    import webbrowser

    from demos.lab.runner.run import open_in_browser
    page = tmp_path / "report.html"
    page.write_text("<html></html>")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert open_in_browser(page) == f"--open: no display here; open {page.as_uri()} in a browser"
    opened = []
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(webbrowser, "open", lambda uri: opened.append(uri) or True)
    assert open_in_browser(page) == f"opened {page.as_uri()}" and opened == [page.as_uri()]


def test_the_index_tidies_a_killed_runs_temp_and_lists_its_folder(tmp_path):
    fake_run(tmp_path, "2026-01-01_00-00-01")
    (tmp_path / "2026-01-01_00-00-02").mkdir()  # killed before its summary
    (tmp_path / ".index.html.abc123.tmp").write_text("half")  # killed while writing the index
    write_index(tmp_path)
    text = (tmp_path / "index.html").read_text()
    assert "2026-01-01_00-00-02</td><td colspan=\"8\">no summary.json" in text
    assert not (tmp_path / ".index.html.abc123.tmp").exists()


def test_the_index_removes_the_temp_files_of_a_run_killed_outright(tmp_path):
    """SIGKILL leaves the temp file being written; once the run's process is gone (same host),
    the next index removes the writers' temps and nothing else; a live run keeps its own."""
    import os
    import socket
    import tempfile

    def run_folder(name: str, pid: int) -> list[Path]:
        folder = tmp_path / name
        (folder / "lenet").mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(a_summary(
            status="running", pid=pid, host=socket.gethostname())))
        temps = [tempfile.mkstemp(prefix=".summary.json.", suffix=".tmp", dir=folder)[1],
                 tempfile.mkstemp(prefix=".", suffix=".loss.png", dir=folder / "lenet")[1]]
        (folder / "lenet" / ".keep").write_text("a user's own dotfile")
        return [Path(t) for t in temps]

    dead = run_folder("2026-01-01_00-00-01", 2**22 + 12345)
    alive = run_folder("2026-01-01_00-00-02", os.getpid())
    write_index(tmp_path)
    assert not any(p.exists() for p in dead)
    assert all(p.exists() for p in alive)
    assert (tmp_path / "2026-01-01_00-00-01" / "lenet" / ".keep").exists()


def test_the_last_resort_rewrite_never_empties_the_file(tmp_path):
    """overwrite() writes over the file's own bytes, padded, without truncating it first
    (a truncation would show as a smaller file)."""
    from demos.lab.core import files
    path = tmp_path / "summary.json"
    path.write_text('{"status": "running"}'.ljust(200))
    files.overwrite(path, '{"status": "passed"}\n')
    assert json.loads(path.read_text()) == {"status": "passed"}
    assert path.stat().st_size == 200
    with pytest.raises(OSError, match="do not fit"):
        files.overwrite(path, "x" * 201)
    assert json.loads(path.read_text()) == {"status": "passed"}


@pytest.mark.slow
def test_the_backward_stepper_in_a_real_browser(dry_run, tmp_path):
    """Next N times highlights step N's node; Prev, the arrow keys and Play move it too; every
    step of every graph on the page has its node in the SVG; no console errors."""
    import time

    from selenium.webdriver.common.keys import Keys

    driver = browser()
    try:
        driver.get((dry_run.dir / "report.html").as_uri())
        missing = driver.execute_script("""
            var out = [];
            document.querySelectorAll('.backward').forEach(function (box) {
              var titles = Array.from(box.querySelectorAll('g.node title'), t => t.textContent);
              JSON.parse(box.querySelector('script.steps').textContent).forEach(function (s) {
                if (titles.indexOf(s.dot_node) < 0) out.push(box.dataset.graph + ' ' + s.node);
              });
            });
            return [document.querySelectorAll('.backward').length, out];""")
        assert missing[0] >= 10 and missing[1] == []

        def active(box):
            """The titles of the nodes lit in the stepper `box`."""
            return driver.execute_script(
                "var a = arguments[0].querySelectorAll('g.node.active title');"
                "return Array.from(a, t => t.textContent);", box)

        for section, graph in [("autograd_internals", "graph"),
                               ("computation_graph", "graph_detach")]:
            steps = json.loads((dry_run.dir / section / "backward.json").read_text())["graphs"]
            steps = next(g for g in steps if g["graph"] == graph)["steps"]
            box = driver.find_element(
                "css selector", f'section#{section} .backward[data-graph="{graph}"]')
            driver.execute_script("arguments[0].scrollIntoView()", box)
            button = {a: box.find_element("css selector", f"[data-action={a}]")
                      for a in ("prev", "next", "play")}
            detail = box.find_element("css selector", ".step-detail")
            assert active(box) == []
            for n, step in enumerate(steps, 1):
                button["next"].click()
                assert active(box) == [step["dot_node"]], (section, n)
                assert f"step {n}: {step['node']}" in detail.text
            button["prev"].click()
            assert active(box) == [steps[-2]["dot_node"]]
            box.send_keys(Keys.ARROW_LEFT)
            assert active(box) == [steps[-3]["dot_node"]]
            box.send_keys(Keys.ARROW_RIGHT)
            assert active(box) == [steps[-2]["dot_node"]]
        button["play"].click()  # from step len-1: one tick reaches the end and stops
        deadline = time.monotonic() + 5
        while active(box) != [steps[-1]["dot_node"]] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert active(box) == [steps[-1]["dot_node"]] and button["play"].text == "Play"
        button["play"].click()  # at the end: Play restarts at once, at step 1
        assert active(box) == [steps[0]["dot_node"]] and button["play"].text == "Pause"
        button["play"].click()
        # zoomed in, the lit node is scrolled into the graph's view
        frame = box.find_element("css selector", "svg").find_element("xpath", "..")
        driver.execute_script("arguments[0].style.width = '40px';"
                              "arguments[0].style.height = '40px';"
                              "arguments[0].style.overflow = 'auto';", frame)
        button["next"].click()
        inside = driver.execute_script("""
            var node = arguments[0].querySelector('g.node.active'), f = arguments[1];
            var a = node.getBoundingClientRect(), b = f.getBoundingClientRect();
            return a.right > b.left && a.left < b.right && a.bottom > b.top && a.top < b.bottom;
            """, box, frame)
        assert inside
        # what backward keeps (MyExp: its output, 3 float32): the figure, and its fall to zero
        box = driver.find_element("css selector", 'section#my_exp .backward[data-graph="graph"]')
        driver.execute_script("arguments[0].scrollIntoView()", box)
        detail = box.find_element("css selector", ".step-detail")
        assert "held for backward: 12 B saved by the forward" in detail.text
        box.find_element("css selector", "[data-action=next]").click()
        assert "held for backward: 0 B (it released saved_tensors[0], 12 B before)" in detail.text
        assert len(box.find_elements("css selector", ".step-detail svg.held circle")) == 1
        # the second backward of custom_function: a stepper of its own, each step's pass named
        box = driver.find_element(
            "css selector", 'section#custom_function .backward[data-graph="second_backward"]')
        driver.execute_script("arguments[0].scrollIntoView()", box)
        box.find_element("css selector", "[data-action=next]").click()
        detail = box.find_element("css selector", ".step-detail")
        assert "made by: the sum that starts the second pass" in detail.text
        assert box.find_elements("css selector", "g.node.active")
        # forward mode of MyExp's twin: value and tangent, then J·v beside reverse mode's vᵀ·J
        box = driver.find_element("css selector",
                                  'section#my_exp .backward[data-graph="forward_mode"]')
        driver.execute_script("arguments[0].scrollIntoView()", box)
        assert box.text.startswith("forward mode, step by step:")
        box.find_element("css selector", "[data-action=next]").click()
        detail = box.find_element("css selector", ".step-detail").text
        assert "tangent:" in detail and "J·v (forward, one pass):" in detail
        assert "vᵀ·J (reverse, one backward): x:" in detail
        assert box.find_elements("css selector", "g.node.active")
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == []
    finally:
        driver.quit()


def test_the_report_shows_each_functions_support_matrix(dry_run):
    """A table per scenario with Functions: a column per Function, a row per capability, the
    status in each cell with its detail on hover, and why-not-ok folded below."""
    page = (dry_run.dir / "report.html").read_text()
    section = page.split('<section class="scenario" id="my_exp">', 1)[1].split("</section>")[0]
    table = section.split('<table class="support">', 1)[1].split("</table>")[0]
    assert "<th>MyExp</th><th>MyExpModern</th>" in table
    assert table.count("<tr>") == 1 + 13  # the header, a row per capability (--dry-run: no
    #                                        compile; all.yaml: no autocast)
    assert '<td class="sup-unsupported" title="RuntimeError: In order to use an ' in table
    assert "<summary>Why not ok</summary>" in section


def test_the_index_shows_every_option_that_changes_a_run():
    from demos.lab.core.results import RunSummary
    from demos.lab.core.schema import build
    from demos.lab.pages.index import other_options

    s = build(RunSummary, a_summary(command=["runner.py", "--config", "c.yaml", "--seed", "3",
                                             "--threads", "2", "--device", "cpu", "--only", "a"],
                                    world={"size": 2, "backend": "gloo"}), "")
    assert other_options(s) == ["torchrun: 2 processes", "--seed 3", "--threads 2",
                                "--device cpu", "--only a"]  # a run from before `sets` held them
    s.sets = ["seed=3", "threads=2", "device=cpu"]  # shown as the overrides they are
    assert other_options(s) == ["torchrun: 2 processes", "--only a"]


def test_the_index_and_the_report_fit_a_1024_and_a_1400_px_window(dry_run, tmp_path):
    """Long overrides and ids wrap inside their cells: nothing is wider than the window."""
    s = json.loads((dry_run.dir / "summary.json").read_text())
    s["sets"] = ["scenarios.legendre_fit.init=[0.0, -1.0, 0.0, 0.3]" * 3,
                 "scenarios.my_relu.expect.written_for={N: 64, D_in: 1000, H: 100}"]
    s["command"] = ["runner.py", "--config", "configs/all.yaml", "--seed", "3", "--threads",
                    "1", "--device", "cpu", "--only", "legendre_fit,my_relu,multiply_add"]
    for name in ("2026-01-02_03-04-05", "2026-01-02_03-04-06-1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({**s, "run_id": name}))
    write_index(tmp_path)
    driver = browser()
    try:
        for width in (1024, 1400):  # the index, and a whole report beside it
            driver.set_window_size(width, 900)
            for page in (tmp_path / "index.html", dry_run.dir / "report.html"):
                driver.get(page.as_uri())
                wide = driver.execute_script(
                    "var d = document.documentElement; return [d.scrollWidth, d.clientWidth];")
                assert wide[0] <= wide[1], (page.name, width, wide)
    finally:
        driver.quit()


@pytest.mark.slow
def test_the_steppers_panel_is_in_view_with_its_buttons_and_the_arrows_need_no_click(dry_run):
    """At 1280 x 900 every stepper, scrolled to its top, shows its buttons and its
    explanation panel together (the panel sat up to 736 px below its Next button); on the
    page, without a click, the arrow keys step the stepper most in view and no other, and
    the page stays where it is."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver = browser()
    try:
        driver.set_window_size(1280, 900)
        driver.get((dry_run.dir / "report.html").as_uri())
        out = driver.execute_script("""
            var out = [], h = window.innerHeight;
            document.querySelectorAll('.backward').forEach(function (box) {
              window.scrollTo(0, box.getBoundingClientRect().top + window.scrollY - 8);
              box.querySelector('[data-action=next]').click();
              [box.querySelector('[data-action=next]'), box.querySelector('.step-detail')]
                .forEach(function (el) {
                  var r = el.getBoundingClientRect();
                  if (r.top < 0 || r.bottom > h || !el.textContent.trim())
                    out.push([box.closest('section').id, box.dataset.graph, el.className,
                              Math.round(r.top), Math.round(r.bottom), h]);
                });
            });
            return [document.querySelectorAll('.backward').length, out];""")
        assert out[0] >= 10 and out[1] == [], out[1]

        driver.get((dry_run.dir / "report.html").as_uri())  # afresh: nothing clicked

        def lit():
            """{"<section> <graph>": its lit nodes' titles} over the steppers that light one."""
            return {k: v for k, v in map(tuple, driver.execute_script(
                "return Array.from(document.querySelectorAll('.backward'), b => "
                "[b.closest('section').id + ' ' + b.dataset.graph, Array.from("
                "b.querySelectorAll('g.node.active title'), t => t.textContent).join()])"))
                if v}

        def press(key):
            ActionChains(driver).send_keys(key).perform()

        right, left = Keys.ARROW_RIGHT, Keys.ARROW_LEFT
        for section, graph, keys, at in [("autograd_internals", "graph", [right] * 3 + [left], 2),
                                         ("computation_graph", "graph_detach", [right], 1)]:
            steps = json.loads((dry_run.dir / section / "backward.json").read_text())["graphs"]
            steps = next(g for g in steps if g["graph"] == graph)["steps"]
            box = driver.find_element(
                "css selector", f'section#{section} .backward[data-graph="{graph}"]')
            driver.execute_script("arguments[0].scrollIntoView()", box)
            before, y = lit(), driver.execute_script("return window.scrollY")
            for key in keys:
                press(key)
            assert lit() == {**before, f"{section} {graph}": steps[at - 1]["dot_node"]}
            assert driver.execute_script("return window.scrollY") == y  # the page kept still
    finally:
        driver.quit()
