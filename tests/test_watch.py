"""--watch on a real process (its signals and its file polling are the point): a run, then a
rerun after each edit of the Function's file, the new code each time (never a stale class);
an edit that breaks the file is said and watched until fixed; watch.html shows the newest
report; Ctrl-C ends the watch with exit 130."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CONFIGS, ROOT

pytestmark = pytest.mark.slow


class Watch:
    """runner.py --watch in a subprocess, its output read as it comes."""

    def __init__(self, folder: Path, *args: str):
        self.log = folder / "watch.log"
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "runner.py"), "--config", "custom_function.yaml",
             "--watch", "--set", "scenarios[0].support=[backward, compile]", *args],
            cwd=folder, stdout=self.log.open("w"), stderr=subprocess.STDOUT, text=True)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, what: str, count: int = 1, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while self.text().count(what) < count:
            assert self.process.poll() is None, self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.02)
        return self.text()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_watch_reruns_on_each_edit_with_the_new_code(tmp_path):
    shutil.copy(CONFIGS / "custom_function.yaml", tmp_path)
    (tmp_path / "examples").mkdir()
    ops = tmp_path / "examples" / "my_ops.py"
    shutil.copy(CONFIGS / "examples" / "my_ops.py", ops)
    watch = Watch(tmp_path)
    try:
        text = watch.wait_for("(Ctrl-C ends the watch)")
        assert "PASSED      custom_function" in text
        assert "watching 2 file(s): custom_function.yaml, examples/my_ops.py" in text
        # the classic mistake, saved: the rerun runs the new backward
        edit(ops, "grad_x = grad_output * 3 * w * x**2", "grad_x = grad_output * w * x**2")
        text = watch.wait_for("(Ctrl-C ends the watch)", 2)
        assert "examples/my_ops.py changed: running again" in text
        assert "FAIL gradcheck" in text and "FAILED: 0 of 1" in text
        # a file that no longer imports: said in one line, watched until it is fixed
        edit(ops, "import torch", "import torch\ndef broken(:")
        text = watch.wait_for("(Ctrl-C ends the watch)", 3)
        assert "importing module 'my_ops.py' raised SyntaxError" in text
        # a neighbour it imports, broken: still watched, and fixing it alone runs again
        (ops.parent / "helper.py").write_text("THREE = = 3\n")
        edit(ops, "import torch\ndef broken(:", "import torch\nfrom .helper import THREE")
        text = watch.wait_for("(Ctrl-C ends the watch)", 4)
        assert "raised SyntaxError: invalid syntax (helper.py" in text
        assert "watching 3 file(s)" in text.splitlines()[-1]
        (ops.parent / "helper.py").write_text("THREE = 3\n")
        text = watch.wait_for("(Ctrl-C ends the watch)", 5)
        assert "examples/helper.py changed: running again" in text
        edit(ops, "grad_x = grad_output * w * x**2", "grad_x = grad_output * THREE * w * x**2")
        text = watch.wait_for("(Ctrl-C ends the watch)", 6)
        assert text.rstrip().splitlines()[-2].startswith("report: ")
        runs = sorted(p for p in (tmp_path / "outputs").iterdir() if p.name[:2] == "20")
        statuses = [json.loads((p / "summary.json").read_text())["status"] for p in runs]
        assert statuses[0] == "passed" and statuses[1] == "failed" and statuses[-1] == "passed"
        state = (tmp_path / "outputs" / "watch.js").read_text()
        assert json.loads(state[len("autogradDemosWatch("):-3]) == {
            "run": runs[-1].name, "status": "passed", "runs": len(runs)}
        assert (tmp_path / "outputs" / "watch.html").is_file()
        watch.process.send_signal(signal.SIGINT)
        assert watch.process.wait(timeout=30) == 130
        assert watch.text().rstrip().endswith("watch ended")
    finally:
        if watch.process.poll() is None:
            watch.process.kill()


def test_watch_html_shows_the_newest_report(tmp_path):
    """The page (file:, no server) swaps its frame to the next run's report once watch.js
    names it."""
    from demos.lab.runner.watch import write_page, write_state
    from tests.test_report import browser

    for name in ("2026-01-01_00-00-00", "2026-01-01_00-00-01"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.html").write_text(f"<h1>{name}</h1>")
    write_page(tmp_path, "custom_function.yaml")
    write_state(tmp_path, tmp_path / "2026-01-01_00-00-00", 0, 1)
    driver = browser()
    try:
        driver.get((tmp_path / "watch.html").as_uri())

        def shown():
            driver.switch_to.default_content()
            state = driver.find_element("id", "state").text
            driver.switch_to.frame(driver.find_element("id", "report"))
            return state, driver.find_element("tag name", "h1").text

        def once_shown(expected: tuple[str, str]) -> tuple[str, str]:
            """What the page shows once it shows `expected` (its state line and its frame's
            report change one after the other, and while the frame swaps its heading is
            briefly not there: asked again, up to 20 s on a loaded machine)."""
            deadline = time.monotonic() + 20
            while True:
                try:
                    now = shown()
                    if now == expected or time.monotonic() > deadline:
                        return now
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)

        first = ("run 1 PASSED (2026-01-01_00-00-00); the next one shows here when it "
                 "finishes", "2026-01-01_00-00-00")
        assert once_shown(first) == first
        write_state(tmp_path, tmp_path / "2026-01-01_00-00-01", 1, 2)
        second = ("run 2 FAILED (2026-01-01_00-00-01); the next one shows here when it "
                  "finishes", "2026-01-01_00-00-01")
        assert once_shown(second) == second
    finally:
        driver.quit()


def test_a_save_during_a_run_is_a_change_after_it(tmp_path):
    """The files' state is taken before each run: a save while the run goes on runs again
    (the watch compared with the state after the run, and missed it), once the file has
    stopped changing."""
    from demos.lab.runner.watch import stamp, wait_for_change

    code = tmp_path / "ops.py"
    code.write_text("x = 1\n")
    before = {str(code): stamp(str(code))}
    code.write_text("x = 22\n")  # saved "during the run": before the wait starts
    started = time.monotonic()
    assert wait_for_change(before) == str(code)
    assert time.monotonic() - started < 2
