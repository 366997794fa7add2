"""Sweeps end to end (--seeds, --sweep, --jobs, aggregate) and their parsing."""
import json
import shutil
import statistics

import pytest
import yaml

from demos.lab.comparing import sweep
from demos.lab.comparing.aggregate import stats
from demos.scenarios import registry
from tests.conftest import ROOT, SWEEP, cli


@pytest.fixture
def seeds(sweep_of_three):
    """Three seeds, two at a time: the sweep the tests below look at (conftest's)."""
    return sweep_of_three


@pytest.mark.slow
def test_a_seed_sweep_runs_one_ordinary_run_per_point_and_aggregates_them(seeds):
    code, text, folder = seeds
    assert code == 0, text
    data = json.loads((folder / "sweep.json").read_text())
    assert [p["seed"] for p in data["points"]] == [0, 1, 2]
    assert [p["sets"][0] for p in data["points"]] == ["seed=0", "seed=1", "seed=2"]
    assert data["axes"] == {"seed": ["0", "1", "2"]} and len(data["groups"]) == 1
    finals = []
    for p in data["points"]:  # each point is a whole run folder, with its report
        s = json.loads((folder / p["run"] / "summary.json").read_text())
        assert s["status"] == "passed" and (folder / p["run"] / "report.html").is_file()
        assert s["determinism"]["cpu_threads"] == 1  # 2 jobs share the 2 cores
        finals.append(s["scenarios"][0]["metrics"]["final_loss"])
    assert len(set(finals)) == 3  # the seed reached the random start
    got = data["groups"][0]["scenarios"]["my_relu"]["metrics"]["final_loss"]
    assert got["n"] == 3 and got["min"] == min(finals) and got["max"] == max(finals)
    assert got["mean"] == pytest.approx(statistics.fmean(finals))
    assert got["std"] == pytest.approx(statistics.stdev(finals))
    checks = {c["name"]: c["passed"] for c in data["groups"][0]["checks"]}
    assert checks == {"sweep my_relu metrics.final_loss max": True,
                      "sweep my_relu metrics.final_loss n": True}
    assert "my_relu metrics.final_loss: mean" in text
    assert "PASSED: 3 runs, 0 failed; 0 sweep check(s) failed" in text
    # the console gives each point's duration as sweep.html does, then the process's
    for p in data["points"]:
        assert f": PASSED in {p['duration_s']:.1f} s (" in text
    assert "s with the process's start-up)" in text


def test_the_sweep_page_and_the_index(seeds):
    _, _, folder = seeds
    page = (folder / "sweep.html").read_text()
    assert page.count("/report.html") == 3 and 'src="loss_g0_my_relu.png"' in page
    assert (folder / "loss_g0_my_relu.png").read_bytes().startswith(b"\x89PNG")
    index = (folder.parent / "index.html").read_text()
    assert f"./{folder.name}/sweep.html" in index and "seed = 0, 1, 2" in index
    points = (folder / "index.html").read_text()  # the sweep's own index of its points
    assert "seed=1" in points and points.count("/report.html") == 3


def test_expectations_over_the_seeds_fail_and_aggregate_rebuilds(seeds, tmp_path):
    _, _, folder = seeds
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "sweep.json").unlink()
    first = sorted(p for p in copy.iterdir() if p.is_dir())[0] / "config.yaml"
    cfg = yaml.safe_load(first.read_text())
    cfg["scenarios"][0]["expect"]["sweep"]["metrics"]["final_loss"] = {"max": {"max": 1.0}}
    first.write_text(yaml.safe_dump(cfg))
    code, text, _ = cli("aggregate", copy)
    assert code == 1 and "FAIL sweep my_relu metrics.final_loss max:" in text
    data = json.loads((copy / "sweep.json").read_text())
    assert data["status"] == "failed" and data["groups"][0]["scenarios"] == json.loads(
        (folder / "sweep.json").read_text())["groups"][0]["scenarios"]


def test_points_run_one_command_each_then_aggregate_group_by_the_other_keys(tmp_path):
    """As a scheduler runs a sweep that outgrows one machine: any command per point (an
    ordinary run, named for its point), then `aggregate` over the folder."""
    folder = tmp_path / "by_hand"
    for i, lr in enumerate(("1e-3", "2e-3")):
        code, text, _ = cli("--config", SWEEP, "--dry-run", "--output-dir", folder,
                            "--run-name", f"{i}_lr={lr}", "--set", f"scenarios.my_relu.lr={lr}")
        assert code == 0, text
    code, text, _ = cli("aggregate", folder)
    data = json.loads((folder / "sweep.json").read_text())
    assert code == 0 and data["dry_run"] and [g["sets"] for g in data["groups"]] == [
        ["scenarios.my_relu.lr=1e-3"], ["scenarios.my_relu.lr=2e-3"]]
    assert [g["scenarios"]["my_relu"]["metrics"]["final_loss"]["n"]
            for g in data["groups"]] == [1, 1]
    # a dry run's targets are reported, not evaluated (n: {value: 3} would fail here)
    checks = [c for g in data["groups"] for c in g["checks"]]
    assert len(checks) == 4 and all(c["passed"] is None for c in checks)
    assert "not evaluated: --dry-run (1; expected 3" in checks[1]["detail"]


def test_a_planned_sweep_run_by_a_scheduler_is_incomplete_until_every_point_ran(tmp_path):
    """sweep --plan-only writes the plan and prints a command per point, running nothing; a
    scheduler runs them; aggregate counts the plan's points: one missing, the sweep is
    incomplete (exit 1, the point named), never passed over fewer runs than planned."""
    import shlex

    code, text, err = cli("sweep", "--config", SWEEP, "--seeds", "0-1", "--dry-run",
                          "--plan-only", "--run-name", "planned", "--output-dir", tmp_path)
    assert code == 0, err
    folder = tmp_path / "planned"
    commands = [shlex.split(line) for line in text.splitlines()]
    assert len(commands) == 2 and all(c[1:3] == ["-m", "demos"] for c in commands)
    assert (folder / "sweep-plan.json").is_file() and "aggregate" in err
    assert not [p for p in folder.iterdir() if p.is_dir()]  # nothing ran
    assert cli(*commands[0][3:])[0] == 0  # the scheduler ran one point
    code, text, _ = cli("aggregate", folder)
    assert code == 1 and "1_seed=1" in text, text
    assert cli(*commands[1][3:])[0] == 0  # and then the other
    code, text, _ = cli("aggregate", folder)
    assert code == 0, text


def test_parsing():
    assert sweep.parse_seeds("0-2,7,1") == ["0", "1", "2", "7"]
    assert sweep.split_values("1,[2, 3],'a,b'") == ["1", "[2, 3]", "'a,b'"]
    assert sweep.point_name(3, ["scenarios.lenet.lr=1e-3", "seed=2"], 2) == "03_lr=1e-3,seed=2"
    assert stats([1.0, float("nan"), 3.0]) == {"n": 2, "mean": 2.0, "std": 2 ** 0.5,
                                               "min": 1.0, "max": 3.0}
    assert stats([]) == {"n": 0}


@pytest.mark.parametrize("args, words", [
    (("--seeds", "3-1"), "--seeds 3-1: expected seeds like 0,1,2 or a range 0-4"),
    (("--sweep", "seed"), "--sweep seed: expected KEY=V1,V2,..."),
    (("--seeds", "0", "--jobs", "0"), "--jobs: must be from 1 to 256"),
    (("--seeds", "0-1", "--seed", "3"), "--sweep seed: also fixed by --seed 3"),
    (("--sweep", "scenarios.my_relu.lr=1,2", "--set", "scenarios.my_relu.lr=3"),
     "--sweep scenarios.my_relu.lr: also fixed by --set scenarios.my_relu.lr=3"),
    (("--seeds", "0-99999999999"), "--seeds 0-99999999999: more than 1000 seeds"),
    (("--seeds", "0-1", "--device", "gpu"), "--device: must be auto, cpu, cuda, cuda:N or mps"),
    (("--sweep", "scenarios.my_relu.lrr=1,2"), "sweep point 0_lrr=1: "),
    (("--sweep", "scenarios.my_relu.lr=1,-2"), "scenarios[0].lr: must be > 0, got -2.0"),
    (("--seeds", "0", "--save-baseline", "b.yaml"),
     "--save-baseline: an option of run, not of sweep"),
])
def test_bad_sweeps_are_one_line_errors_before_anything_runs(tmp_path, args, words):
    code, out, err = cli("sweep", "--config", SWEEP, *args, "--output-dir", tmp_path)
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())


def test_aggregate_of_a_folder_without_runs_is_an_error(tmp_path):
    code, _, err = cli("aggregate", tmp_path)
    assert code == 2 and "no finished run folders" in err


@pytest.mark.slow
def test_sweep_compare_and_index_pages_in_a_real_browser(seeds, tmp_path):
    """Every link and image of sweep.html, compare.html and the index resolves; in Chromium the
    images load, nothing is logged, and each page fits a 1024 and a 1400 px window."""
    from urllib.parse import unquote

    from tests.test_report import browser, links_of

    _, _, shared = seeds
    folder = tmp_path / "outputs" / shared.name  # a copy: the session's sweep stays as it is
    shutil.copytree(shared, folder)
    points = sorted(p for p in folder.iterdir() if p.is_dir())
    code, _, _ = cli("compare", points[0], points[1], "--output-dir", folder.parent)
    assert code == 1  # two seeds: their losses differ
    [compared] = folder.parent.glob("compare_*")
    pages = [folder / "sweep.html", compared / "compare.html", folder.parent / "index.html"]
    for page in pages:
        for ref in links_of(page).refs:
            target = page.parent / unquote(ref.split("#")[0])
            assert "://" not in ref and target.exists(), (page, ref)
    driver = browser()
    try:
        for i, page in enumerate(pages):
            driver.get(page.as_uri())
            images = driver.execute_script(
                "return Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
            assert all(done and width > 0 for done, width in images), (page, images)
            assert len(images) == (0 if page.name == "index.html" else 1), page
            errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
            assert errors == [], page
            assert driver.save_screenshot(str(tmp_path / f"page{i}.png"))
            for width in (1024, 1400):  # nothing wider than the window
                driver.set_window_size(width, 900)
                wide = driver.execute_script(  # and what sticks out, if anything does
                    "var d = document.documentElement; return [d.scrollWidth, d.clientWidth,"
                    " Array.from(document.querySelectorAll('body *')).filter(e =>"
                    " e.getBoundingClientRect().right > d.clientWidth).map(e => e.tagName)];")
                assert wide[0] <= wide[1], (page.name, width, wide)
                tall = driver.execute_script(  # a badge on one line: PASSED, never PASSE/D
                    "return Array.from(document.querySelectorAll('.badge')).filter(b =>"
                    " b.getBoundingClientRect().height > 1.9 * parseFloat("
                    "getComputedStyle(b).fontSize)).map(b => b.textContent);")
                assert tall == [], (page.name, width, tall)
    finally:
        driver.quit()


@pytest.mark.slow
def test_a_signal_stops_the_running_points_and_starts_no_new_one(tmp_path):
    """Ctrl-C reaches the sweep: each running point stops at a step boundary and writes its
    summary; the points not started are named; exit 130; no child left behind."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "runner.py"), "sweep", "--config", SWEEP, "--seeds", "0-2",
         "--jobs", "2", "--set", "scenarios.my_relu.steps=100000000", "--run-name", "s",
         "--output-dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:  # both running points are in their training loops
        logs = list(tmp_path.glob("s/*/run.log"))
        if len(logs) == 2 and all("training: steps" in p.read_text() for p in logs):
            break  # both in their loops: a state seen in their logs, not a time waited
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "not run (interrupted): 2_seed=2" in out and "SIGINT: the running points" in err
    for point in ("0_seed=0", "1_seed=1"):
        s = json.loads((tmp_path / "s" / point / "summary.json").read_text())
        assert s["status"] == "interrupted" and s["scenarios"][0]["steps"] > 0
    assert not (tmp_path / "s" / "2_seed=2").exists()
    data = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert data["status"] == "interrupted" and data["not_run"] == ["2_seed=2"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps  # no point left running


def test_an_interrupted_point_is_not_a_failed_one_and_one_run_is_one_run(tmp_path):
    from demos.lab.comparing.aggregate import PointRun, console_lines, sweep_data

    def point(name, status):
        folder = tmp_path / name
        folder.mkdir()
        return PointRun(folder, {"run_id": name, "status": status, "config": "c.yaml",
                                 "sets": [f"seed={name[-1]}"], "scenarios": []})
    data = sweep_data(tmp_path, [point("p0", "passed"), point("p1", "interrupted")], registry())
    assert data["failed_runs"] == [] and data["interrupted_runs"] == ["p1"]
    assert data["status"] == "interrupted"
    lines = console_lines(data)
    assert "interrupted run: p1" in lines and not any("failed run" in ln for ln in lines)
    assert lines[-1] == "INTERRUPTED: 2 runs, 0 failed, 1 interrupted; 0 sweep check(s) failed"
    assert lines[0].endswith("(2 runs):")
    one = console_lines(sweep_data(tmp_path, [PointRun(tmp_path / "p0", {
        "run_id": "p0", "status": "passed", "config": "c.yaml", "sets": [], "scenarios": []})],
        registry()))
    assert one[0] == "all runs (1 run):" and one[-1].startswith("PASSED: 1 run, 0 failed")


def test_a_failed_point_says_why_on_the_console_and_in_sweep_json(tmp_path):
    from demos.lab.comparing.aggregate import PointRun, console_lines, sweep_data

    (tmp_path / "p0").mkdir()
    failed = {"run_id": "p0", "status": "failed", "config": "c.yaml", "sets": ["seed=0"],
              "scenarios": [
                  {"id": "my_relu", "status": "failed", "error": None, "checks": [
                      {"name": "loss stays finite", "passed": False,
                       "detail": "loss is inf at step 2; training stopped there"},
                      {"name": "gradcheck", "passed": True, "detail": "ok"}]},
                  {"id": "lenet", "status": "error", "error": "ValueError: bad", "checks": []}]}
    data = sweep_data(tmp_path, [PointRun(tmp_path / "p0", failed)], registry())
    assert data["points"][0]["why"] == [
        "my_relu: FAIL loss stays finite: loss is inf at step 2; training stopped there",
        "lenet: error: ValueError: bad"]
    lines = console_lines(data)
    assert lines[lines.index("failed run: p0") + 1] == (
        "  my_relu: FAIL loss stays finite: loss is inf at step 2; training stopped there")


def test_the_groups_of_a_sweep_side_by_side(tmp_path):
    from demos.lab.pages.sweep import side_by_side

    def group(lr, mean):
        return {"sets": [f"scenarios.my_relu.lr={lr}"], "config": "c.yaml", "dry_run": False,
                "runs": [], "checks": [], "scenarios": {"my_relu": {"metrics": {"final_loss": {
                    "n": 3, "mean": mean, "std": mean / 10, "min": mean * 0.9,
                    "max": mean * 1.1}}}}}
    data = {"configs": ["c.yaml"], "groups": [group("1e-6", 3e-5), group("2e-6", 1e-5)]}
    compared = side_by_side(tmp_path, data)
    assert compared.labels == ["scenarios.my_relu.lr=1e-6", "scenarios.my_relu.lr=2e-6"]
    assert compared.rows == [("my_relu metrics.final_loss",
                              ["3e-05 ± 3e-06 (n=3)", "1e-05 ± 1e-06 (n=3)"])]
    (caption, file), = compared.images
    assert (tmp_path / file).read_bytes().startswith(b"\x89PNG")
    assert side_by_side(tmp_path, {**data, "groups": data["groups"][:1]}) is None
