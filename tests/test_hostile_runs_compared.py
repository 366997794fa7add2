"""Sweeps, aggregate and compare against hostile conditions (issue 23): a key swept under two
spellings, points killed or corrupt, FIFOs and devices in a run folder, unwritable output, huge
values, a reader that goes away, an ASCII console, escape sequences in run folders, runs still
running, --jobs beyond the cores, many runs in one plot. Real points run only where the sweep
itself is the point (about 2.5 s each); the other run folders are made by hand, which compare
and aggregate cannot tell."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from demos.lab.comparing import sweep
from tests.conftest import ROOT, SWEEP, cli, run_cli

ESCAPES = ("\x1b]0;title\x07", "\x1b[2J")


def fake_run(folder: Path, metrics: dict, status: str = "passed", sets=(), entry: str = "e",
             **extra) -> Path:
    """A run folder as compare and aggregate see one: summary.json, and a metrics.csv."""
    (folder / entry).mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "run_id": folder.name, "status": status, "config": "c.yaml", "sets": list(sets),
        "seed": 0, "device": "cpu", "scenarios": [
            {"id": entry, "status": status, "metrics": metrics, "checks": []}], **extra}))
    (folder / entry / "metrics.csv").write_text("step,loss\n0,2.0\n1,1.0\n")
    return folder


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def one_line_error(code, out, err, words):
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (out, err)
    assert words in err, err


@pytest.fixture
def swept(sweep_of_three):
    """Three seeds of tests/fixtures/sweep.yaml, two at a time: a whole sweep folder."""
    code, text, folder = sweep_of_three
    assert code == 0, text
    return folder


def copied(swept, tmp_path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(swept, copy, symlinks=True)
    return copy


# 2, 12. A reader that goes away, an ASCII console, a folder name that is not ASCII.

def closed_pipe():
    """A pipe whose reader has gone away already: `| head -0`."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.slow
def test_a_sweep_whose_reader_went_away_on_an_ascii_console_runs_to_its_end(tmp_path):
    out = tmp_path / "ausgabe-ü"
    write = closed_pipe()
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "runner.py"), "sweep", "--config", str(SWEEP),
             "--seeds", "0-1", "--jobs", "2", "--run-name", "s", "--output-dir", str(out),
             "--set", "scenarios.my_relu.expect.metrics.final_loss.max=1.0e-30"],
            cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
            env={**os.environ, "PYTHONIOENCODING": "ascii"})
    finally:
        os.close(write)
    assert done.returncode == 1, done.stderr  # both points fail their target: exit 1
    assert "Traceback" not in done.stderr
    data = json.loads((out / "s" / "sweep.json").read_text())
    assert [p["status"] for p in data["points"]] == ["failed", "failed"]


def test_compare_whose_reader_went_away_exits_with_its_verdict(tmp_path):
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 2.0})
    write = closed_pipe()
    try:
        done = subprocess.run([sys.executable, str(ROOT / "runner.py"), "compare", str(a),
                               str(b), "--output-dir", str(tmp_path / "out")], cwd=ROOT,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == ""  # they differ; the pipe is no error
    [folder] = (tmp_path / "out").glob("compare_*")
    assert not json.loads((folder / "compare.json").read_text())["agree"]


def test_aggregate_and_compare_on_an_ascii_console(tmp_path):
    root = tmp_path / "läufe"
    for i in range(2):
        fake_run(root / f"p{i}-µ", {"m": 1.0 + i}, sets=[f"seed={i}"])
    env = {"PYTHONIOENCODING": "ascii"}
    done = run_cli("aggregate", root, env=env, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "mean 1.5 \\xb1 0.707" in done.stdout and "l\\xe4ufe" in done.stdout
    done = run_cli("compare", root / "p0-µ", root / "p1-µ", "--output-dir", tmp_path / "out",
                   env=env, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "p1-\\xb5" in done.stdout


# 4. One key, two spellings.

@pytest.mark.parametrize("args, words", [
    (("--sweep", "scenarios.my_relu.lr=1e-3,2e-3", "--sweep", "scenarios[0].lr=3e-3,4e-3"),
     "--sweep scenarios[0].lr: the same key as --sweep scenarios.my_relu.lr"),
    (("--sweep", "scenarios[0].lr=1e-3,2e-3", "--set", "scenarios.my_relu.lr=3e-3"),
     "--sweep scenarios[0].lr: the same key as --set scenarios.my_relu.lr=3e-3"),
    (("--seeds", "0-1", "--set", "scenarios.my_relu.expect={}",
      "--set", "scenarios[0].expect.metrics={}"),
     "--set scenarios[0].expect.metrics={}: the same key as --set scenarios.my_relu.expect"),
])
def test_a_key_given_twice_under_two_spellings_is_refused(tmp_path, args, words):
    code, out, err = cli("sweep", "--config", SWEEP, *args, "--output-dir", tmp_path)
    one_line_error(code, out, err, words)
    assert not any(tmp_path.iterdir())


# 5. Points missing, killed or corrupt.

@pytest.mark.slow
def test_aggregate_names_the_points_it_lacks_and_never_passes_over_fewer(swept, tmp_path):
    copy = copied(swept, tmp_path)
    killed = copy / "1_seed=1" / "summary.json"
    s = json.loads(killed.read_text())
    s.update(status="running", pid=dead_pid(), host=socket.gethostname())
    killed.write_text(json.dumps(s))
    (copy / "2_seed=2" / "summary.json").write_text('{"run_id": "x", "scenarios": [')
    code, out, err = cli("aggregate", copy)
    assert code == 1, out + err
    assert "killed: 1_seed=1 (its summary says running; its process is gone)" in out
    assert "corrupt: 2_seed=2 (summary.json is not a run's)" in out
    assert out.splitlines()[-2].startswith(
        "INCOMPLETE: 1 of 3 planned runs, 0 failed, 2 missing, killed or corrupt; 0 sweep")
    assert "skip sweep my_relu metrics.final_loss n: not evaluated: 2 point(s) without" in out
    data = json.loads((copy / "sweep.json").read_text())
    assert data["status"] == "incomplete" and data["planned"] == 3
    assert [m["run"] for m in data["missing_runs"]] == ["1_seed=1", "2_seed=2"]
    shutil.rmtree(copy / "1_seed=1")
    shutil.rmtree(copy / "2_seed=2")
    code, out, _ = cli("aggregate", copy)
    assert code == 1 and "missing: 1_seed=1 (no run folder)" in out


# 9. FIFOs, devices and huge files are refused, never read.

def test_aggregate_never_blocks_on_a_fifo_or_reads_a_device(swept, tmp_path):
    copy = copied(swept, tmp_path)
    csv0, csv1 = (copy / p / "my_relu" / "metrics.csv" for p in ("0_seed=0", "1_seed=1"))
    csv0.unlink()
    os.mkfifo(csv0)
    csv1.unlink()
    csv1.symlink_to("/dev/zero")
    done = run_cli("aggregate", copy, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("case", ["fifo", "huge"])
def test_compare_refuses_a_config_it_cannot_read_whole(tmp_path, case):
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 1.0})
    if case == "fifo":
        os.mkfifo(b / "config.yaml")
    else:
        with open(b / "config.yaml", "wb") as f:
            f.truncate(64 << 20)  # sparse: costs no disk
    code, out, err = cli("compare", a, b, "--output-dir", tmp_path / "out")
    one_line_error(code, out, err, f"{b / 'config.yaml'}: ")
    assert not (tmp_path / "out").exists()


# 10. Tracebacks and lying exit codes.

def test_compare_of_a_deeply_nested_reference_config_is_one_line(tmp_path):
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 1.0})
    (a / "config.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    one_line_error(*cli("compare", a, b, "--output-dir", tmp_path / "out"), "nested")


def test_compare_that_cannot_write_its_folder_leaves_none(tmp_path, monkeypatch):
    from demos.lab.comparing import side_by_side

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(side_by_side, "write_json", full)
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 1.0})
    one_line_error(*cli("compare", a, b, "--output-dir", tmp_path / "out"),
                   "No space left on device")
    assert not list((tmp_path / "out").glob("compare_*"))


def test_aggregate_that_cannot_write_removes_the_stale_aggregate(tmp_path, monkeypatch):
    from demos.lab.comparing import aggregate

    for i in range(2):
        fake_run(tmp_path / f"p{i}", {"m": 1.0}, sets=[f"seed={i}"])
    assert cli("aggregate", tmp_path)[0] == 0

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(aggregate, "write_json", full)
    one_line_error(*cli("aggregate", tmp_path), "cannot write sweep.json")
    assert not (tmp_path / "sweep.json").exists() and not (tmp_path / "sweep.html").exists()


def test_values_near_the_float_limit_aggregate_exactly(tmp_path):
    for i in range(4):  # two groups of two seeds
        fake_run(tmp_path / f"p{i}", {"m": 1.7e308 - i % 2 * 1e307, "k": -1.6e308},
                 sets=[f"seed={i % 2}", f"lr={i // 2}"])
    code, out, err = cli("aggregate", tmp_path)
    assert code == 0 and err == "", out + err
    data = json.loads((tmp_path / "sweep.json").read_text(),
                      parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    m = data["groups"][0]["scenarios"]["e"]["metrics"]["m"]
    assert m["mean"] == pytest.approx(1.65e308) and m["std"] == pytest.approx(1e307 / 2 ** 0.5)
    assert data["groups"][0]["scenarios"]["e"]["metrics"]["k"]["std"] == 0.0
    assert (tmp_path / "sweep.html").is_file()


# 15. Escape sequences in a run folder.

def test_escape_sequences_from_run_folders_are_shown_not_obeyed(tmp_path):
    a = fake_run(tmp_path / f"a{ESCAPES[0]}", {f"m{ESCAPES[1]}": 1.0}, entry="e",
                 sets=["seed=0"])
    b = fake_run(tmp_path / f"b{ESCAPES[1]}", {f"m{ESCAPES[1]}": 2.0}, entry="e",
                 sets=["seed=1"])
    s = json.loads((b / "summary.json").read_text())
    s["scenarios"].append({"id": f"x{ESCAPES[0]}", "status": "passed", "metrics": {}})
    (b / "summary.json").write_text(json.dumps(s))
    code, out, err = cli("compare", a, b, "--output-dir", tmp_path / "out")
    assert code == 1
    code2, out2, err2 = cli("aggregate", tmp_path)
    assert code2 == 0, out2 + err2
    for text in (out, err, out2, err2):
        assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in out and "\\x1b]0;title\\x07" in out and "\\x1b[2J" in out2


# 16. A full disk behind stdout.

def test_compare_to_a_full_disk_ends_with_its_verdict_and_one_warning(tmp_path):
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 2.0})
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, str(ROOT / "runner.py"), "compare", str(a),
                               str(b), "--output-dir", str(tmp_path / "out")], cwd=ROOT,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ("warning: cannot write the output (No space left on device); the "
                           "rest of it is dropped\n")


# 20. Runs still running, or killed.

def test_compare_says_which_runs_are_still_running_or_were_killed(tmp_path):
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 1.0}, status="running", pid=os.getpid(),
                 host=socket.gethostname())
    c = fake_run(tmp_path / "c", {"m": 1.0}, status="running", pid=dead_pid(),
                 host=socket.gethostname())
    code, out, _ = cli("compare", a, b, c, "--output-dir", tmp_path / "out")
    assert f"b: still running (process {os.getpid()}): its values so far" in out
    assert "c: stopped before it finished (its summary says running; its process is gone)" in out
    [folder] = (tmp_path / "out").glob("compare_*")
    page = (folder / "compare.html").read_text()
    assert "still running" in page and "stopped before it finished" in page
    assert [r["status"] for r in json.loads((folder / "compare.json").read_text())["runs"]] \
        == ["passed", "running", "stopped"]


# 21. --jobs beyond the cores.

def test_jobs_beyond_the_usable_cores_are_capped_with_a_warning(monkeypatch):
    from demos.lab.runner.options import parse
    from demos.scenarios import registry

    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    args = parse(["sweep", "--config", str(SWEEP), "--seeds", "0-3", "--jobs", "16"],
                 "runner.py")
    plan = sweep.make_plan(args, registry())
    assert plan.jobs == 2 and plan.threads == 1
    assert "--jobs 16: 2 usable cores here; running 2 points at a time" in plan.notes[0]


# Many runs in one plot.

def test_compare_of_many_runs_draws_a_readable_plot_without_warnings(tmp_path, recwarn):
    from demos.lab.pages.plots import legend_labels

    runs = [fake_run(tmp_path / f"r{i:02d}", {"m": 1.0}) for i in range(60)]
    code, out, err = cli("compare", *runs, "--output-dir", tmp_path / "out")
    assert code == 0 and err == "", err
    assert not [w for w in recwarn if "matplotlib" in str(w.filename)
                or "layout" in str(w.message)], [str(w.message) for w in recwarn]
    [folder] = (tmp_path / "out").glob("compare_*")
    assert (folder / "e_loss.png").read_bytes().startswith(b"\x89PNG")
    assert legend_labels([f"r{i}" for i in range(60)], most=10) == [
        *(f"r{i}" for i in range(9)), "and 51 more"]
    assert legend_labels(["a", "b"], most=10) == ["a", "b"]


# A second probe: stale verdicts, links, counts that do not match the plan, smaller ones.

def planned(folder: Path, points: list[str]) -> None:
    """A sweep-plan.json as a sweep writes it, for run folders made by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep-plan.json").write_text(json.dumps({
        "digest": "x", "config": "c.yaml", "total": len(points), "axes": {}, "every_point": [],
        "points": points}))


def test_aggregate_of_no_readable_point_removes_the_old_verdict_and_names_them(swept, tmp_path):
    copy = copied(swept, tmp_path)
    assert json.loads((copy / "sweep.json").read_text())["status"] == "passed"
    (copy / "0_seed=0" / "summary.json").write_text("garbage")
    killed = copy / "1_seed=1" / "summary.json"
    s = json.loads(killed.read_text())
    s.update(status="running", pid=dead_pid(), host=socket.gethostname())
    killed.write_text(json.dumps(s))
    (copy / "2_seed=2" / "summary.json").unlink()
    os.mkfifo(copy / "2_seed=2" / "summary.json")
    code, out, err = cli("aggregate", copy)
    one_line_error(code, out, err, "no finished run")
    assert "the old sweep.json and sweep.html were removed" in err
    assert not (copy / "sweep.json").exists() and not (copy / "sweep.html").exists()
    assert "corrupt: 0_seed=0 (summary.json is not a run's)" in out
    assert "killed: 1_seed=1 (its summary says running; its process is gone)" in out
    assert "corrupt: 2_seed=2 (summary.json is not a regular file" in out


def test_aggregate_counts_only_the_plans_points_each_once(tmp_path):
    planned(tmp_path, ["0_seed=0", "1_seed=1", "2_seed=2"])
    fake_run(tmp_path / "0_seed=0", {"m": 1.0}, sets=["seed=0"])
    fake_run(tmp_path / "1_seed=1", {"m": 2.0}, sets=["seed=1"])
    fake_run(tmp_path / "renamed", {"m": 3.0}, sets=["seed=2"])  # 2_seed=2, renamed
    fake_run(tmp_path / "stray", {"m": 9.0}, status="failed", sets=["seed=7"])
    code, out, err = cli("aggregate", tmp_path)
    assert code == 1, out + err
    assert "missing: 2_seed=2 (no run folder)" in out
    assert "not part of the sweep's plan, left out: renamed" in out
    assert "not part of the sweep's plan, left out: stray" in out
    assert out.splitlines()[-2].startswith("INCOMPLETE: 2 of 3 planned runs, 0 failed, 1 missing")
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["status"] == "incomplete" and data["unplanned_runs"] == ["renamed", "stray"]
    assert [p["run"] for p in data["points"]] == ["0_seed=0", "1_seed=1"]
    assert data["groups"][0]["scenarios"]["e"]["metrics"]["m"]["n"] == 2


def test_a_value_that_is_not_a_number_makes_its_point_corrupt(tmp_path):
    fake_run(tmp_path / "p0", {"m": 1.0}, sets=["seed=0"])
    fake_run(tmp_path / "p1", {"m": "abc"}, sets=["seed=1"])
    code, out, err = cli("aggregate", tmp_path)
    assert code == 1, out + err
    assert "corrupt: p1 (e metrics.m is 'abc', not a number)" in out
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["status"] == "incomplete" and [p["run"] for p in data["points"]] == ["p0"]
    assert data["groups"][0]["scenarios"]["e"]["metrics"]["m"]["n"] == 1


@pytest.mark.parametrize("plan", ["[1,2", '{"points": "abc", "total": 3}',
                                  '{"points": ["p0", 1], "total": 2}',
                                  '{"points": ["p0"], "total": "1"}'])
def test_a_corrupt_sweep_plan_is_refused_in_one_line(tmp_path, plan):
    fake_run(tmp_path / "p0", {"m": 1.0}, sets=["seed=0"])
    assert cli("aggregate", tmp_path)[0] == 0  # an old verdict, then the plan breaks
    (tmp_path / "sweep-plan.json").write_text(plan)
    one_line_error(*cli("aggregate", tmp_path), "sweep-plan.json: not a sweep's plan")
    assert not (tmp_path / "sweep.json").exists()


@pytest.mark.parametrize("values", ["1e-3,1e-3", "1e-3,0.001"])
def test_a_value_swept_twice_is_refused(tmp_path, values):
    code, out, err = cli("sweep", "--config", SWEEP, "--sweep", f"scenarios.my_relu.lr={values}",
                         "--dry-run", "--output-dir", tmp_path)
    one_line_error(code, out, err, f"--sweep scenarios.my_relu.lr={values}: the value ")
    assert not any(tmp_path.iterdir())


def test_an_ensemble_caps_its_jobs_with_the_sweeps_warning(tmp_path, monkeypatch):
    from demos.lab.comparing import ensemble

    seen = []

    def run_points(plan, folder, stop):
        seen.append(plan.jobs)
        stop.requested = "SIGINT"  # end before any run
        return {}, []
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    monkeypatch.setattr(ensemble, "available_cores", lambda: 2)
    monkeypatch.setattr(sweep, "run_points", run_points)
    code, out, err = cli("--config", SWEEP, "--dry-run", "--save-baseline", tmp_path / "b.yaml",
                         "--ensemble", "native,threads2", "--jobs", "64",
                         "--output-dir", tmp_path / "out")
    assert seen == [2], out + err
    assert "warning: --jobs 64: 2 usable cores here; running 2 runs at a time" in err
    assert "2 at a time" in out


def test_compare_says_when_the_baselines_tolerances_apply_to_none(tmp_path):
    from tests.conftest import BASELINE

    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": 1.0})
    code, out, err = cli("compare", a, b, "--baseline", BASELINE, "--output-dir", tmp_path / "o")
    assert code == 0, out + err
    assert "holds none of the compared entries (e): its tolerances applied to none of them" in out
    [folder] = (tmp_path / "o").glob("compare_*")
    assert "applied to none of them" in (folder / "compare.html").read_text()


def test_compare_names_a_value_that_is_not_a_number(tmp_path):
    a = fake_run(tmp_path / "a", {"m": 1.0})
    b = fake_run(tmp_path / "b", {"m": "abc"})
    code, out, err = cli("compare", a, b, "--output-dir", tmp_path / "o")
    assert code == 1, out + err
    assert "b: summary.json is corrupt: e metrics.m is 'abc', not a number" in out
    row = [line for line in out.splitlines() if line.startswith("b ")]
    assert row and "not a number" in row[0] and "none" not in row[0], out
    [folder] = (tmp_path / "o").glob("compare_*")
    page = (folder / "compare.html").read_text()
    assert "summary.json is corrupt" in page
    assert json.loads((folder / "compare.json").read_text())["corrupt"] == {
        "b": ["e metrics.m is 'abc', not a number"]}


def test_pages_show_control_characters_escaped_and_the_console_table_aligns(tmp_path):
    runs = tmp_path / "runs"
    a = fake_run(runs / "a", {"m": 1.0}, sets=["seed=0"])
    b = fake_run(runs / f"b{ESCAPES[1]}", {"m": 2.0}, sets=["seed=1"])
    c = fake_run(runs / f"c{ESCAPES[0]}", {"m": 3.0}, sets=["seed=2"])
    code, out, _ = cli("compare", a, b, c, "--output-dir", tmp_path / "o")
    assert code == 1
    lines = out.splitlines()
    column = lines[0].index("  entry")
    assert [line.index("  e  ") for line in lines[1:3]] == [column, column], out
    assert cli("aggregate", runs)[0] == 0
    [folder] = (tmp_path / "o").glob("compare_*")
    for page in (folder / "compare.html", runs / "sweep.html"):
        raw = page.read_bytes()
        assert b"\x1b" not in raw and b"\x07" not in raw, page
        assert b"\\x1b[2J" in raw, page
