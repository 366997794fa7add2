"""The support matrices computed beside the run (demos.lab.checks.beside): the same rows as in
the run's own process, for right and wrong Functions alike; a Function that kills the process
fails the row it did it in, and the others are still computed; what cannot be pickled, and
runs that live on (--watch, demos.run), stay in the run's process."""
import contextlib
import os
import sys

import pytest
import torch

from demos.documents import functions as fns
from demos.lab.checks import beside, support
from demos.lab.core.threads import available_cores
from tests.conftest import CONFIGS, run_captured
from tests.fixtures import wrong_functions as wrong

D = torch.float64
NO_COMPILE = [r for r in support.CAPABILITIES if r != "compile"]


def x43():
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=D,
                       requires_grad=True)


@pytest.fixture
def forks(monkeypatch):
    """The processes the run forks (their pids), at one thread (a core left idle)."""
    if available_cores() < 2:
        pytest.skip("one core: no idle core for a checks process")
    made = []
    fork = os.fork

    def counted():
        pid = fork()
        if pid:
            made.append(pid)
        return pid

    monkeypatch.setattr(beside.os, "fork", counted)
    monkeypatch.setattr(beside, "_first", True)  # as in a process's first run
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield made
    torch.set_num_threads(threads)


def beside_and_here(fn, inputs, reference, rows):
    with beside.checks_process(True):
        there = support.later(fn, inputs, reference, rows=rows).get()
    return there, support.matrix(fn, inputs, reference, rows=rows)


def test_a_wrong_backward_gives_the_same_rows_beside_as_here(forks):
    there, here = beside_and_here(wrong.P3MissingFactor.apply, {"x": x43()},
                                  fns.legendre_p3_reference, support.CAPABILITIES)
    assert forks, "no process was forked"
    assert there == here
    assert there["backward"].status == "fails" and "Jacobian mismatch" in there["backward"].detail


def test_a_process_killed_in_a_row_fails_that_row_and_the_others_are_still_computed(forks):
    with beside.checks_process(True):  # here, it would end the tests' own process
        got = support.later(wrong.SquareKillsOnGaps.apply, {"x": x43()}, None,
                            rows=["backward", "noncontiguous", "float32"]).get()
    assert got["noncontiguous"] == support.Row(
        "fails", "the checks process ended (SIGKILL) during this row")
    assert got["backward"].status == got["float32"].status == "ok", got
    assert len(forks) >= 2  # the remaining row went to a new process


def test_a_function_that_cannot_be_pickled_is_checked_here(forks):
    class LocalSquare(torch.autograd.Function):  # a class in a function: no name to send
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

    there, here = beside_and_here(LocalSquare.apply, {"x": x43()}, None, NO_COMPILE)
    assert there == here and not forks
    assert there["backward"].status == "ok"


def test_the_generator_is_the_callers_whether_the_matrix_ran_beside_or_here(forks):
    torch.manual_seed(5)
    untouched = torch.rand(3)
    results = {}
    for where in ("beside", "here"):
        with beside.checks_process(where == "beside"):
            # a first job: the process is forked now, with the generator as it is now
            support.later(wrong.SquarePlusNoise.apply, {"x": x43()}, rows=["float32"]).get()
            torch.manual_seed(5)
            rows = support.later(wrong.SquarePlusNoise.apply, {"x": x43()}, None,
                                 rows=["backward", "float32"]).get()
        results[where] = (rows, torch.rand(3))
    assert forks
    assert results["beside"][0] == results["here"][0]  # the same draws inside the rows
    assert results["beside"][0]["backward"].status == "fails"
    assert torch.equal(results["beside"][1], untouched)  # and none taken from the caller
    assert torch.equal(results["here"][1], untouched)


def test_a_run_says_the_same_with_and_without_the_checks_process(tmp_path, forks):
    runs = {}
    for on in ("true", "false"):
        runs[on] = run_captured(tmp_path / on, "--config", CONFIGS / "all.yaml", "--dry-run",
                                "--only", "legendre_fit,my_exp,custom_function",
                                "--set", f"checks_process={on}")
        assert runs[on].code == 0, runs[on].err
    assert len(forks) == 1  # one process forked by the run
    on, off = (runs[k].summary["scenarios"] for k in ("true", "false"))
    for a, b in zip(on, off):
        assert {k: v for k, v in a.items() if k != "timing"} == \
               {k: v for k, v in b.items() if k != "timing"}
        assert a["support"]
    lines = [ln.split()[1] for ln in runs["true"].out.splitlines() if ln.startswith("PASSED ")]
    assert lines == ["legendre_fit", "my_exp", "custom_function"]  # in config order


def test_a_run_from_python_keeps_its_matrices_in_its_own_process(tmp_path, forks):
    from demos import run

    r = run("my_exp", dry_run=True, output_dir=tmp_path, quiet=True)
    assert r.passed and r["my_exp"].support.status("MyExp", "backward") == "ok"
    assert not forks


def test_rows_that_cannot_be_had_make_their_entry_an_error_and_the_run_goes_on(tmp_path,
                                                                                monkeypatch):
    from demos.lab.core.results import Check, Later, Result
    from tests.conftest import entry, patch_run

    def lost():
        raise RuntimeError("rows lost")

    patch_run(monkeypatch, "my_exp", lambda cfg, ctx: Result(
        metrics={}, checks=[Later(lost), Later.now(Check("kept", True, "its rows came"))],
        support={"MyExp": Later(lost), "MyExpModern": Later.now({"backward": {}})}))
    r = run_captured(tmp_path, "--config", CONFIGS / "all.yaml", "--dry-run",
                     "--only", "my_exp,computation_graph")
    assert r.code == 1
    broken = entry(r.summary, "my_exp")
    assert broken["status"] == "error" and broken["error"] == "RuntimeError: rows lost"
    assert [c["name"] for c in broken["checks"]][0] == "kept"  # what did come is kept
    assert list(broken["support"]) == ["MyExpModern"]
    assert entry(r.summary, "computation_graph")["status"] == "passed"
    assert "Traceback" not in r.out + r.err


def test_the_rows_follow_torchs_settings_as_they_are_at_each_matrix(forks):
    fn, rows = wrong.SquarePlusOnesInDefaultDtype.apply, ["backward", "float32"]
    before = torch.get_default_dtype()
    with beside.checks_process(True):
        support.later(fn, {"x": x43()}, rows=rows).get()  # forked here, at the run's settings
        torch.set_default_dtype(torch.float64)
        try:
            with torch.no_grad():
                there = support.later(fn, {"x": x43()}, rows=rows).get()
        finally:
            torch.set_default_dtype(before)
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            here = support.matrix(fn, {"x": x43()}, rows=rows)
    finally:
        torch.set_default_dtype(before)
    assert there == here
    assert here["float32"].status == "fails" and "float64" in here["float32"].detail
    assert torch.get_default_dtype() == before and torch.is_grad_enabled()


def test_a_class_whose_module_the_run_let_go_is_not_imported_again_to_be_sent(forks, tmp_path,
                                                                               monkeypatch):
    (tmp_path / "gone_ops.py").write_text(
        "import torch\n"
        "from pathlib import Path\n"
        "marker = Path(__file__).with_suffix('.runs')\n"
        "marker.write_text(marker.read_text() + 'x' if marker.exists() else 'x')\n"
        "from tests.fixtures.user_fns import SquareModern\n"
        "class Square(SquareModern):\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone_ops

    cls = gone_ops.Square
    monkeypatch.delitem(sys.modules, "gone_ops")  # as user_code lets a neighbour go
    with beside.checks_process(True):
        rows = support.later(cls.apply, {"x": x43()}, rows=["backward"]).get()
    assert rows["backward"].status == "ok"
    assert (tmp_path / "gone_ops.runs").read_text() == "x"  # its file ran once
    assert not forks  # checked here


def test_a_process_that_died_between_matrices_is_replaced_and_no_row_is_blamed(forks):
    import signal
    import time

    from tests.fixtures.user_fns import SquareModern

    with beside.checks_process(True):
        support.later(SquareModern.apply, {"x": x43()}, rows=["backward"]).get()
        os.kill(forks[0], signal.SIGKILL)  # idle, between two matrices
        deadline = time.monotonic() + 10
        while beside._current.reader is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        rows = support.later(SquareModern.apply, {"x": x43()},
                             rows=["backward", "float32"]).get()
    assert [r.status for r in rows.values()] == ["ok", "ok"], rows
    assert len(forks) == 2


def test_a_function_that_calls_sys_exit_fails_its_row_here_and_beside(forks):
    there, here = beside_and_here(wrong.SquareExitsOnGaps.apply, {"x": x43()}, None,
                                  ["backward", "noncontiguous", "float32"])
    assert there == here
    assert here["noncontiguous"] == support.Row(
        "fails", "SystemExit: the Function called sys.exit(3)")
    assert here["float32"].status == "ok"


def test_after_three_crashes_the_matrices_are_skipped_not_run_in_the_runs_process(forks):
    rows = ["noncontiguous", "float32"]
    with beside.checks_process(True):
        got = [support.later(wrong.SquareKillsOnGaps.apply, {"x": x43()}, rows=rows).get()
               for _ in range(4)]  # here, each would end the tests' own process
    assert [g["noncontiguous"].status for g in got] == ["fails"] * 3 + ["skipped"]
    assert [g["float32"].status for g in got] == ["ok", "ok", "skipped", "skipped"]
    assert "the last of 3 times in this run" in got[2]["float32"].detail
    assert "ended 3 times in this run" in got[3]["float32"].detail


def test_the_checks_process_ends_with_the_run_even_in_a_matrix_that_never_ends(tmp_path):
    import subprocess
    import time

    from tests.conftest import ROOT

    script = (
        "import os, signal, sys, time, torch\n"
        "from demos.lab.checks import beside, support\n"
        "from tests.fixtures import wrong_functions as wrong\n"
        "torch.set_num_threads(1)\n"
        "with beside.checks_process(True):\n"
        "    support.later(wrong.SquareHangsOnGaps.apply, {'x': torch.ones(4, 3)},\n"
        "                  rows=['noncontiguous'])\n"
        "    time.sleep(0.5)\n"
        "    print(beside._current.pid, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # the run, killed outright\n")
    out = tmp_path / "out"
    with out.open("w") as f:  # a file: a pipe would wait for the child's end too
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, stdout=f,
                       stderr=subprocess.STDOUT, timeout=60)
    said = out.read_text()
    if not said.split() or not said.split()[0].isdigit():
        pytest.skip(f"no checks process here: {said[-300:]}")
    child = int(said.split()[0])
    deadline = time.monotonic() + 5
    try:
        while time.monotonic() < deadline:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split(")")[1].split()[0] == "Z":  # ended; its reaper is slow
                    return
            time.sleep(0.05)
    except (FileNotFoundError, ProcessLookupError):  # ended, and reaped
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, 9)  # not left spinning on the machine
    pytest.fail("the checks process outlived the run")
